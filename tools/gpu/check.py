#!/usr/bin/env python3
"""The project's GPU check, in one command on a machine with a CUDA GPU (docs/gpu-check.md).

It builds memtrace offline from Debian packages carried beside the tree, then runs tests/gpu,
tests/estimator/gpu_compare.py, the overhead table (tools/gpu/overhead.py) and the hooks in
tools/gpu/checks.d/, each a process of its own with a timeout, all inside --budget seconds when
given one. The tables are rewritten as each step goes, so a run cut short still leaves them.

    python3 tools/gpu/check.py --fetch-deps     # with apt: the Debian packages into .gpu-deps/
    python3 tools/gpu/check.py --out DIR        # on the GPU machine (the tree and .gpu-deps copied
                                                # there): gpu-check.md, .json and .log into DIR
    python3 tools/gpu/check.py --dry            # here: the same run from a copy of exactly what
                                                # travels; every GPU step must skip with a reason

Exit status: 0 when every step passed (--dry: the build passed and every GPU step skipped
cleanly), 1 otherwise, 2 on bad arguments or a missing prerequisite (said in one line)."""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[2]
DEPS = ".gpu-deps"  # the carried folder of .debs (ignored by git: .gitignore)
HOOKS = ROOT / "tools" / "gpu" / "checks.d"
SKIPPED = 77  # a step that found no GPU: tests/gpu's conftest, overhead.py, hooks

# What a GPU machine without a package registry lacked (docs/gpu-record-h200.md), as Debian 12
# packages: dpkg -x'ed there
# into a prefix that CMake, pkg-config and the dynamic loader are pointed at. The runtime
# libraries (libdw1, libelf1, libspdlog1.10, libfmt9, libunwind8) come too: the image has none
# of them, and the binaries built against the -dev packages need these versions.
DEBIAN_PACKAGES = {
    "libdw-dev": "elfutils' libdw: memtrace-report symbolizes native frames",
    "libdw1": "its shared library",
    "libelf-dev": "libdw.pc requires libelf",
    "libelf1": "its shared library",
    "zlib1g-dev": "the reader's compressed chunks (Note [Compressed chunks]); libdw.pc and "
                  "libelf.pc require zlib.pc too",
    "liblzma-dev": "libdw.pc requires liblzma.pc",
    "libspdlog-dev": "the tools' logging",
    "libspdlog1.10": "its shared library",
    "libfmt-dev": "the report's formatting, and spdlog's",
    "libfmt9": "its shared library",
    "nlohmann-json3-dev": "JSON in the report and the estimator (header-only)",
    "libcli11-dev": "the tools' command lines (header-only)",
    "node-d3": "d3.min.js, inlined into the HTML report (passed by path: MEMTRACE_D3_JS)",
    "libunwind8": "native stacks (libmemtrace.so dlopens libunwind.so.8)",
    "pkgconf": "pkg-config, which finds libdw (CMake's pkg_check_modules)",
    "pkgconf-bin": "pkgconf's binary",
    "libpkgconf3": "pkgconf's library",
}
LIBRARY_DIR = "usr/lib/x86_64-linux-gnu"  # Debian's multiarch folder, inside the prefix

# The targets the steps run. tests/gpu and overhead.py need libmemtrace.so and memtrace-report;
# gpu_compare.py needs memtrace-estimate. The tests' own targets (GTest) stay out: the GPU image
# has no GTest, and tests/gpu is pytest over these three.
TARGETS = ["memtrace", "memtrace-report", "memtrace-estimate"]
# --dry builds what the carried packages go into (memtrace-report links libdw, libelf,
# spdlog, fmt, nlohmann-json, CLI11 and inlines d3): memtrace-estimate adds only LibTorch,
# from the torch package (not a carried one), and its LibTorch-heavy files cost CI's two cores
# minutes.
DRY_TARGETS = ["memtrace", "memtrace-report"]

# Seconds each step may take at most (the run's --budget, when given, caps them all). Measured
# on the H200 (docs/gpu-record-h200.md): configure 22 s, libmemtrace.so + memtrace-report
# 16-18 s, memtrace-estimate 30 s; each limit is about three times what is expected.
TIMEOUTS = {"environment": 60, "configure": 120, "build": 300, "tests/gpu": 240,
            "gpu_compare": 240, "overhead": 240}
# gpu_compare.py's batch sizes: each (model, export, semantics, batch) is a fresh process (about
# 4 s where torch imports in 2), 28 per batch size; its default 1,3 doubles the run.
COMPARE_BATCHES = "1"
HOOK_TIMEOUT = 120  # a hook's default; a line "# timeout: N" in its first lines says another
GPU_STEPS = ["tests/gpu", "gpu_compare", "overhead", "hooks"]  # after the build, in this order
POLL_SECONDS = 2.0  # how often a running step's table is read back into the report


@dataclass
class Step:
    """One step's outcome, as gpu-check.md and gpu-check.json show it."""
    name: str
    status: str = "running"  # running, passed, failed, skipped, timed out, not run
    seconds: float = 0.0
    detail: str = ""  # one line: why it failed or skipped
    table: str = ""  # Markdown, shown under the step
    data: object = None  # the step's JSON, where it writes one
    log: str = ""  # its output (stdout and stderr)


@dataclass
class Report:
    """gpu-check.md, gpu-check.json and gpu-check.log in --out, rewritten whole (write, then
    rename) each time a step changes, so whatever stops the run, the files hold every table
    measured until then."""
    out: Path
    started: float = field(default_factory=time.monotonic)
    header: dict = field(default_factory=dict)
    steps: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name):
        step = Step(name)
        with self.lock:
            self.steps.append(step)
        return step

    def write(self):
        with self.lock:
            self._write("gpu-check.md", self.markdown())
            self._write("gpu-check.json", json.dumps(
                {"header": self.header, "elapsed_seconds": round(self.elapsed(), 1),
                 "steps": [{k: v for k, v in vars(s).items() if k != "log"} for s in self.steps]},
                indent=1))
            self._write("gpu-check.log", "".join(
                f"===== {s.name} ({s.status}, {s.seconds:.0f} s)\n{s.log}\n" for s in self.steps))

    def _write(self, name, text):
        partial = self.out / (name + ".partial")
        partial.write_text(text)
        os.replace(partial, self.out / name)

    def elapsed(self):
        return time.monotonic() - self.started

    def markdown(self):
        lines = ["# memtrace GPU check", ""]
        lines += [f"- {key}: {value}" for key, value in self.header.items()]
        lines += [f"- elapsed: {self.elapsed():.0f} s", "",
                  "| step | status | seconds | detail |", "|---|---|---:|---|"]
        lines += [f"| {s.name} | {s.status} | {s.seconds:.0f} | {s.detail} |" for s in self.steps]
        for step in self.steps:
            if step.table:
                lines += ["", f"## {step.name}", "", step.table.rstrip()]
        return "\n".join(lines) + "\n"


def say(report, text):
    print(f"[{report.elapsed():5.0f} s] {text}", flush=True)


def one_line(text):
    """The last non-empty line of a process's output: what it said last, usually why."""
    lines = [line.strip(" !") for line in text.splitlines() if line.strip(" !")]
    return lines[-1][:300] if lines else "no output"


def run_step(report, step, command, *, timeout, env, cwd, table=None, outcome=None):
    """Runs `command` as a process group of its own, killed (TERM, then KILL) after `timeout`
    seconds; its output goes to the step's log. While it runs, `table(step)` is called every
    POLL_SECONDS and the report rewritten, so a long step shows what it has measured so far.
    `outcome(step, returncode)` sets the status; by default 0 passed, 77 skipped, else failed."""
    started = time.monotonic()
    log_path = Path(env["GPU_CHECK_WORK"]) / "logs" / (re.sub(r"\W", "_", step.name) + ".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(c) for c in command], cwd=cwd, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        returncode = None
        while returncode is None and time.monotonic() - started < timeout:
            try:
                returncode = process.wait(min(POLL_SECONDS, timeout - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                pass
            step.seconds = time.monotonic() - started
            step.log = log_path.read_text(errors="replace")
            if table:
                table(step)
            report.write()
        if returncode is None:  # the whole group: pytest's and gpu_compare's workers too
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    step.seconds = time.monotonic() - started
    step.log = log_path.read_text(errors="replace")
    if table:
        table(step)
    if returncode is None:
        step.status, step.detail = "timed out", f"killed after {timeout:.0f} s"
    elif outcome:
        outcome(step, returncode)
    else:
        step.status = {0: "passed", SKIPPED: "skipped"}.get(returncode, "failed")
        if step.status == "skipped":
            step.detail = one_line(step.log)
        elif step.status == "failed":
            step.detail = f"exit {returncode}: {one_line(step.log)}"
    report.write()
    say(report, f"{step.name}: {step.status} ({step.seconds:.0f} s) {step.detail}")
    return step.status == "passed"


def in_process_step(report, name, function):
    """A step run here (unpacking, checking paths): its exception's message is the detail."""
    step = report.add(name)
    started = time.monotonic()
    try:
        step.detail = function() or ""
        step.status = "passed"
    except (OSError, subprocess.CalledProcessError, ValueError) as error:
        said = getattr(error, "stderr", None)
        step.status = "failed"
        step.detail = (str(error) + (f": {one_line(said)}" if said else "")).replace("\n", " ")
    step.seconds = time.monotonic() - started
    report.write()
    say(report, f"{name}: {step.status} {step.detail}")
    return step.status == "passed"


# ---- the offline build recipe ----------------------------------------------------------------

def fetch_deps(destination):
    """apt-get download of DEBIAN_PACKAGES (this machine's Debian 12 candidates) into
    `destination`, replacing what was there; apt-get update once if the lists are stale."""
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    for old in destination.glob("*.deb"):
        old.unlink()
    # Downloading as root into a folder the _apt user cannot write is fine: no sandbox wanted.
    command = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", *DEBIAN_PACKAGES]
    result = subprocess.run(command, cwd=destination, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, check=False)
        result = subprocess.run(command, cwd=destination, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"check.py: apt-get download failed: {one_line(result.stderr)}")
    debs = sorted(destination.glob("*.deb"))
    size = sum(deb.stat().st_size for deb in debs)
    print(f"check.py: {len(debs)} Debian packages, {size / 2**20:.1f} MiB, in {destination}")


def unpack_deps(deps, prefix):
    """dpkg -x every carried .deb into `prefix`, and a pkg-config wrapper that sees only it."""
    debs = sorted(Path(deps).glob("*.deb"))
    if not debs:
        raise ValueError(f"no .deb in {deps}: run `python3 tools/gpu/check.py --fetch-deps` on "
                         f"the development machine and carry {DEPS}")
    names = {}
    for deb in debs:
        package, version = subprocess.run(
            ["dpkg-deb", "--show", "--showformat=${Package} ${Version}", str(deb)],
            capture_output=True, text=True, check=True).stdout.split()
        names[package] = version
    missing = sorted(set(DEBIAN_PACKAGES) - set(names))
    if missing:
        raise ValueError(f"{deps} lacks {', '.join(missing)}: fetch them again (--fetch-deps)")
    if prefix.exists():
        shutil.rmtree(prefix)
    prefix.mkdir(parents=True)
    for deb in debs:
        subprocess.run(["dpkg", "-x", str(deb), str(prefix)], check=True, capture_output=True,
                       text=True)
    # pkgconf looks only in the prefix (PKG_CONFIG_LIBDIR), and prefixes every path it prints
    # with it (PKG_CONFIG_SYSROOT_DIR): libdw.pc says -I/usr/include, the build gets the
    # prefix's. Its own library (libpkgconf.so.3) is in the prefix too.
    wrapper = prefix / "pkg-config"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"PKG_CONFIG_LIBDIR='{prefix}/{LIBRARY_DIR}/pkgconfig:{prefix}/usr/share/pkgconfig' \\\n"
        f"PKG_CONFIG_SYSROOT_DIR='{prefix}' \\\n"
        f"LD_LIBRARY_PATH='{prefix}/{LIBRARY_DIR}' \\\n"
        f"exec '{prefix}/usr/bin/pkgconf' \"$@\"\n")
    wrapper.chmod(0o755)
    return ", ".join(f"{name} {version}" for name, version in sorted(names.items()))


def configure_command(prefix, build, ignore_system):
    command = [
        "cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
        "-DMEMTRACE_BUILD_TESTS=OFF", "-DMEMTRACE_BUILD_BENCH=OFF",
        f"-DCMAKE_PREFIX_PATH={prefix}/usr", f"-DPKG_CONFIG_EXECUTABLE={prefix}/pkg-config",
        f"-DMEMTRACE_D3_JS={prefix}/usr/share/nodejs/d3/dist/d3.min.js",
        f"-DMEMTRACE_D3_LICENSE={prefix}/usr/share/doc/node-d3/copyright",
        f"-DPython3_EXECUTABLE={sys.executable}"]
    if shutil.which("ninja"):
        command += ["-G", "Ninja"]
    if ignore_system:
        # --dry: this machine has the same packages installed in /usr; ignoring that prefix
        # makes a package missing from the carried ones fail here, as it would there.
        command.append("-DCMAKE_IGNORE_PREFIX_PATH=/usr")
    return command


def check_prefix_used(prefix, build):
    """The build took every carried dependency from the prefix, at configure and at run time:
    the cache's package folders, libdw's, d3's, and the libraries the built tools load."""
    cache = {}
    for line in (build / "CMakeCache.txt").read_text().splitlines():
        key, _, value = line.partition("=")
        if ":" in key:
            cache[key.split(":")[0]] = value
    wanted = ["spdlog_DIR", "fmt_DIR", "nlohmann_json_DIR", "CLI11_DIR", "pkgcfg_lib_LIBDW_dw",
              "LIBDW_INCLUDE_DIRS", "MEMTRACE_D3_JS", "PKG_CONFIG_EXECUTABLE"]
    outside = [f"{key}={cache.get(key, '(unset)')}" for key in wanted
               if not cache.get(key, "").startswith(str(prefix))]
    loaded = subprocess.run(["ldd", str(build / "bin" / "memtrace-report")], capture_output=True,
                            text=True, check=True, env=run_environment(prefix, build)).stdout
    for library in ("libdw.so.1", "libelf.so.1", "libspdlog.so", "libfmt.so"):
        line = next((line for line in loaded.splitlines() if library in line), "")
        if str(prefix) not in line:
            outside.append(f"memtrace-report loads {line.strip() or library + ' (not found)'}")
    if outside:
        raise ValueError("not from the prefix: " + "; ".join(outside))
    return f"{len(wanted)} cache entries and 4 libraries of memtrace-report are the prefix's"


def run_environment(prefix, build, work=None):
    """What every step runs with: the prefix's libraries (libunwind.so.8, which libmemtrace.so
    dlopens, among them), the build, unbuffered Python, and no memtrace setting of the caller."""
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("MEMTRACE_")
                   and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    environment.update(
        LD_LIBRARY_PATH=os.pathsep.join(filter(None, [f"{prefix}/{LIBRARY_DIR}",
                                                      os.environ.get("LD_LIBRARY_PATH")])),
        MEMTRACE_BUILD_DIR=str(build), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    if work:
        environment["GPU_CHECK_WORK"] = str(work)
    return environment


# ---- the steps' tables -----------------------------------------------------------------------

def pytest_table(junit):
    """tests/gpu's outcome per test, from pytest's JUnit XML."""
    def table(step):
        if not junit.is_file():
            return
        rows = []
        for case in ElementTree.parse(junit).iter("testcase"):
            verdict, message = "passed", ""
            for kind in ("failure", "error", "skipped"):
                found = case.find(kind)
                if found is not None:
                    verdict = {"failure": "FAILED", "error": "ERROR"}.get(kind, kind)
                    message = one_line(found.get("message") or found.text or "")
                    break
            name = case.get("name")
            rows.append(f"| {name} | {verdict} | {float(case.get('time', 0)):.1f} "
                        f"| {message.replace('|', '/')} |")
        step.table = "\n".join(["| test | outcome | seconds | message |", "|---|---|---:|---|",
                                *rows])
    return table


def tests_gpu_outcome(step, returncode):
    """pytest.exit(returncode=77) in tests/gpu/conftest.py: no GPU, with the reason."""
    if returncode == SKIPPED:
        step.status = "skipped"
        step.detail = re.sub(r"^(_pytest\.outcomes\.)?Exit: ", "", one_line(step.log))
    else:
        step.status = "passed" if returncode == 0 else "failed"
        step.detail = "" if returncode == 0 else f"exit {returncode}: {one_line(step.log)}"


def compare_table(step):
    """gpu_compare.py prints its Markdown table row by row: the rows so far, and its summary."""
    lines = step.log.splitlines()
    kept = [line for line in lines if line.startswith(("|", "device:", "largest error"))]
    step.table = "\n".join(kept)


def compare_outcome(step, returncode):
    """gpu_compare.py exits 0 without a GPU, saying so: a skip here, never a pass."""
    rows = [line for line in step.log.splitlines() if line.startswith("| ") and "---" not in line]
    if returncode == 0 and len(rows) <= 1:  # the header alone, or no table at all
        step.status, step.detail = "skipped", one_line(step.log)
    else:
        step.status = "passed" if returncode == 0 else "failed"
        step.detail = "" if returncode == 0 else f"exit {returncode}: {one_line(step.log)}"


def file_table(markdown_path, json_path):
    """A step that writes its own table (overhead.py, the hooks): read back as it goes."""
    def table(step):
        if markdown_path.is_file():
            step.table = markdown_path.read_text()
        if json_path.is_file():
            try:
                step.data = json.loads(json_path.read_text())
            except ValueError:
                step.data = None
    return table


def hook_timeout(hook):
    for line in hook.read_text(errors="replace").splitlines()[:10]:
        found = re.match(r"#\s*timeout:\s*(\d+)", line)
        if found:
            return int(found.group(1))
    return HOOK_TIMEOUT


# ---- the run ---------------------------------------------------------------------------------

def run(arguments):
    out = Path(arguments.out).resolve()
    work = Path(arguments.work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + arguments.budget
    report = Report(out)
    build = ROOT / "build"
    prefix = work / "prefix"
    environment = run_environment(prefix, build, work)
    targets = DRY_TARGETS if arguments.dry_inner else TARGETS
    cache = build / "CMakeCache.txt"
    if cache.is_file() and f"PKG_CONFIG_EXECUTABLE:FILEPATH={prefix}/pkg-config" not in (
            cache.read_text()):
        # The check configures build/ its own way (Release, no tests; the mem_tracer package
        # of a checkout looks there): it never overwrites a developer's configuration.
        print(f"check.py: {build} is configured otherwise (not by a GPU check with --work "
              f"{work}): move it away, or run in a fresh copy", file=sys.stderr)
        return 2
    budget = f"{arguments.budget:g} s" if arguments.budget != float("inf") else "none"
    report.header = {"command": " ".join(sys.argv), "tree": str(ROOT), "budget": budget}
    report.write()

    def left(limit):
        """A step's timeout: its own limit, or what is left of the budget if less. Without a
        GPU (--dry) only the budget limits: the limits are sized for the GPU machine's 16
        cores, and the build here may share 2."""
        if arguments.dry_inner:
            limit = arguments.budget
        return max(0.0, min(limit, deadline - time.monotonic()))

    def process_step(name, command, limit, **options):
        step = report.add(name)
        if left(limit) < 5:
            step.status, step.detail = "not run", "the run's budget is spent"
            report.write()
            return False
        return run_step(report, step, command, timeout=left(limit), env=environment, cwd=ROOT,
                        **options)

    process_step("environment", [sys.executable, __file__, "--probe"], TIMEOUTS["environment"],
                 table=lambda step: report.header.update(probe_lines(step.log)))
    built = (in_process_step(report, "unpack", lambda: unpack_deps(ROOT / DEPS, prefix))
             and process_step("configure", configure_command(prefix, build, arguments.dry_inner),
                              TIMEOUTS["configure"])
             and process_step("build", ["cmake", "--build", build, "-j", str(os.cpu_count()),
                                        "--target", *targets], TIMEOUTS["build"])
             and in_process_step(report, "prefix", lambda: check_prefix_used(prefix, build)))
    if not built:
        say(report, "the build failed: no GPU step runs")
        return finish(report, arguments)

    # tests/gpu and gpu_compare.py check correctness (peaks against PyTorch's counters, each
    # in processes of their own), so they share the machine; the overhead table is timed
    # alone, after them.
    junit = work / "tests-gpu.xml"
    correctness = [
        ("tests/gpu", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       f"--junitxml={junit}", "tests/gpu"],
         {"table": pytest_table(junit), "outcome": tests_gpu_outcome}),
        ("gpu_compare", [sys.executable, "tests/estimator/gpu_compare.py", "--build", build,
                         "--batches", COMPARE_BATCHES],
         {"table": compare_table, "outcome": compare_outcome}),
    ]
    correctness = [entry for entry in correctness if entry[0] in arguments.steps]
    with concurrent.futures.ThreadPoolExecutor(max(1, len(correctness))) as pool:
        for future in [pool.submit(process_step, name, command, TIMEOUTS[name], **options)
                       for name, command, options in correctness]:
            future.result()

    overhead = [sys.executable, "tools/gpu/overhead.py", "--build", build,
                "--markdown", work / "overhead.md", "--json", work / "overhead.json"]
    if arguments.dry_inner:  # the script's processes and tables, on a miniature model
        overhead += ["--device", "cpu", "--modes", "untraced,untraced-again", "--batches", "1",
                     "--tokens", "8", "--warmup", "1", "--blocks", "1", "--forwards", "1"]
    if "overhead" in arguments.steps:
        process_step("overhead", overhead, TIMEOUTS["overhead"],
                     table=file_table(work / "overhead.md", work / "overhead.json"))

    for hook in sorted(HOOKS.glob("*.sh")) if "hooks" in arguments.steps else []:
        table, data = work / f"{hook.stem}.md", work / f"{hook.stem}.json"
        environment.update(GPU_CHECK_TABLE=str(table), GPU_CHECK_JSON=str(data))
        process_step(f"hook {hook.name}", [hook], hook_timeout(hook), table=file_table(table, data))
    return finish(report, arguments)


def finish(report, arguments):
    """Prints gpu-check.md (last, so that whatever keeps only the end of the output has it)
    and the verdict."""
    report.write()
    print(report.markdown(), flush=True)
    gpu_steps = [s for s in report.steps if s.name in GPU_STEPS or s.name.startswith("hook ")]
    build_steps = [s for s in report.steps if s not in gpu_steps]
    build_ok = bool(gpu_steps) and all(s.status == "passed" for s in build_steps)
    if arguments.dry_inner:
        # The CPU smoke of overhead.py (--device cpu) must pass; every other GPU step must
        # skip, and say why.
        clean = all(s.status == "skipped" and s.detail for s in gpu_steps if s.name != "overhead")
        overhead_ok = all(s.status == "passed" for s in gpu_steps if s.name == "overhead")
        verdict = build_ok and clean and overhead_ok
        say(report, "dry run " + ("passed: built from the carried packages; every GPU step "
                                  "skipped with its reason" if verdict else "FAILED"))
    else:
        verdict = build_ok and all(s.status == "passed" for s in gpu_steps)
        say(report, "GPU check " + ("passed" if verdict else "FAILED"))
    return 0 if verdict else 1


def probe():
    """The machine, as the environment step reports it."""
    import platform

    facts = {"python": platform.python_version()}
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            facts["device"] = torch.cuda.get_device_name()
            facts["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        else:
            facts["device"] = "none visible to PyTorch"
    except ImportError:
        facts["torch"] = "not installed"
    try:
        import transformers

        facts["transformers"] = transformers.__version__
    except ImportError:
        facts["transformers"] = "not installed"
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False)
        facts["driver"] = smi.stdout.strip() or one_line(smi.stderr)
    facts["cores"] = os.cpu_count()
    print(json.dumps(facts))


def probe_lines(log):
    try:
        return json.loads(log.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


# ---- --dry: the same run, from a copy of what travels to the GPU machine ---------------------

def travelling_files():
    """What travels to the GPU machine: tracked files and untracked ones git does not ignore
    (plus .gpu-deps/)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=False)
    if listed.returncode != 0:
        raise SystemExit(f"check.py --dry: {ROOT} is not a git checkout, and what travels to the "
                         "GPU machine is what git tracks or does not ignore")
    return sorted({name for name in listed.stdout.decode().split("\0") if name})


# --dry adds this hook to its copy (the checkout has none yet): it proves the hook contract
# (run in order, a table of its own shown under its step, 77 read as a skip with the last line
# as the reason) the way a GPU step without a GPU must behave.
DRY_HOOK = """#!/bin/sh
# timeout: 30
printf '| hook | table |\\n|---|---|\\n| dry-run probe | written |\\n' >"$GPU_CHECK_TABLE"
echo '{"probe": true}' >"$GPU_CHECK_JSON"
echo "no GPU: the dry run's probe hook skips"
exit 77
"""


OUTPUTS = {"gpu-check.md", "gpu-check.json", "gpu-check.log"}


def unexpected_outputs(out):
    """What --out holds besides the check's three files (a partial write left behind, a
    step's scratch written in the wrong place): a run leaves exactly those three."""
    files = {str(f.relative_to(out)) for f in out.rglob("*") if f.is_file()}
    return [f"{name} is in {out}: a run leaves only {', '.join(sorted(OUTPUTS))}"
            for name in sorted(files - OUTPUTS)] + \
        [f"{name} is missing from {out}" for name in sorted(OUTPUTS - files)]


def dry(arguments):
    started = time.monotonic()
    work = Path(arguments.work).resolve()
    tree = work / "tree"
    deps = ROOT / DEPS
    if not any(deps.glob("*.deb")):
        deps = work / "deps"
        if not any(deps.glob("*.deb")):
            fetch_deps(deps)
    for old in (tree, work / "out"):
        if old.exists():
            shutil.rmtree(old)
    size = 0
    for name in travelling_files():
        source = ROOT / name
        if not source.exists() and not source.is_symlink():  # deleted, not yet committed
            continue
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
        size += source.lstat().st_size
    shutil.copytree(deps, tree / DEPS)
    size += sum(f.stat().st_size for f in (tree / DEPS).iterdir())
    print(f"check.py --dry: {size / 2**20:.1f} MiB would travel, copied to {tree}", flush=True)
    if arguments.max_tree_mib is not None and size > arguments.max_tree_mib * 2**20:
        print(f"check.py --dry: the tree is over --max-tree-mib {arguments.max_tree_mib:g}",
              file=sys.stderr)
        return 1
    hook = tree / HOOKS.relative_to(ROOT) / "00-dry-probe.sh"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(DRY_HOOK)
    hook.chmod(0o755)
    command = [sys.executable, tree / "tools" / "gpu" / "check.py", "--out", work / "out",
               "--work", work / "run", "--dry-inner", "--budget", str(arguments.budget)]
    # No GPU, even on a machine that has one: the dry run checks the recipe and the skips.
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    status = subprocess.run([str(c) for c in command], cwd=tree, env=environment,
                            check=False).returncode
    problems = unexpected_outputs(work / "out")
    shown = (work / "out" / "gpu-check.md").read_text()
    if "| dry-run probe | written |" not in shown:
        problems.append("the probe hook's table is not in gpu-check.md")
    for problem in problems:
        print(f"check.py --dry: {problem}", file=sys.stderr)
    print(f"check.py --dry: {time.monotonic() - started:.0f} s; tables in {work / 'out'}")
    return 1 if status or problems else 0


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--fetch-deps", action="store_true",
                        help=f"download the Debian packages into {DEPS}/ (here, before a run)")
    action.add_argument("--dry", action="store_true",
                        help="on this machine: build from a copy of what travels, skip the GPU")
    action.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(ROOT / "build" / "gpu-check"),
                        help="where the tables go (default: build/gpu-check)")
    parser.add_argument("--work", help="scratch space (default: /tmp/memtrace-gpu-check; "
                        "--dry: build/gpu-check-dry)")
    parser.add_argument("--budget", type=float,
                        help="seconds the whole run may take: give a little less than what "
                        "the machine allows a command, so that the tables are written before "
                        "it is stopped (default: no limit but each step's own; --dry: 1800)")
    parser.add_argument("--max-tree-mib", type=float,
                        help="--dry: fail when what travels (the tree and .gpu-deps) is larger "
                        "than this, where the copy to the GPU machine has a limit")
    parser.add_argument("--steps", default=",".join(GPU_STEPS),
                        help="the GPU steps to run, comma-separated, after the build (default: "
                        "all: %(default)s); a rerun on a warm machine can take fewer")
    # --dry's run in its copy: DRY_TARGETS, /usr ignored, no per-step limits, the overhead
    # script on a miniature model on the CPU, and every other GPU step expected to skip.
    parser.add_argument("--dry-inner", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    arguments.work = arguments.work or str(ROOT / "build" / "gpu-check-dry" if arguments.dry
                                           else "/tmp/memtrace-gpu-check")
    arguments.budget = arguments.budget or (1800 if arguments.dry else float("inf"))
    arguments.steps = arguments.steps.split(",")
    unknown = sorted(set(arguments.steps) - set(GPU_STEPS))
    if unknown:
        parser.error(f"--steps: unknown {', '.join(unknown)} (known: {', '.join(GPU_STEPS)})")
    return arguments


def main():
    arguments = parse_arguments()
    if arguments.probe:
        return probe()
    if arguments.fetch_deps:
        return fetch_deps(ROOT / DEPS)
    if arguments.dry:
        return dry(arguments)
    return run(arguments)


if __name__ == "__main__":
    sys.exit(main())
