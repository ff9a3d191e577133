"""What only a GPU can show about memtrace's CUDA entry points (issue 24), in one call:

  lookup-facts      the real driver: does cuGetProcAddress hand out dlsym's functions?
  plain-cuda        CUDA C++ with the dynamic runtime and with the static one (nvcc's default,
                    and CuPy's): the trace against the program's own account
  torch-expandable  PyTorch with expandable_segments:True: the trace's peak and end against
                    max_memory_reserved() and memory_reserved() (physical memory = reserved)
  torch-graphs      a CUDA graph captured and replayed, with memtrace's default backend and with
                    PyTorch's own allocator (private pools): it runs, the trace ends cleanly
  torch-nccl        one-rank NCCL with NCCL_CUMEM_ENABLE=1: NCCL's cuMemCreate buffers traced
  cupy, jax         where installed: the trace against the framework's own counters

Each job is a process of its own with a timeout; its lines are appended to OUT/frameworks.md
as it ends (a run cut short keeps them) and its figures to OUT/frameworks.json. Every job
also says what the report's row "outside any allocation call" held against nvidia-smi.

    tools/gpu/frameworks_check.sh BUILD OUT [--dry-run] [--jobs a,b] [--python PYTHON]

--dry-run runs on a machine without a GPU: the C++ jobs against the simulated GPU's runtime and
driver of the build (simulator/lib, an H200's profile), the others only checked to compile. Exits 1 when a check failed."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))
from memtrace_testing import live_and_peak, program_account, recorded_events

GPU_JOBS = ["torch-expandable", "torch-graphs", "torch-nccl", "cupy", "jax"]
ALL_JOBS = ["lookup-facts", "plain-cuda"] + GPU_JOBS


class Check:
    def __init__(self, build, out, dry_run, python):
        self.build, self.out, self.dry_run, self.python = build, out, dry_run, python
        self.library = build / "allocator" / "libmemtrace.so"
        self.report_tool = build / "bin" / "memtrace-report"
        # The dry run's CUDA: the simulated GPU's libraries (simulator/), on an H200.
        self.test_lib = build / "simulator" / "lib"
        self.test_card = {"MEMTRACE_GPU_PROFILE": str(build / "simulator" / "profiles" / "h200.json")}
        self.failures = 0
        self.figures = {}
        self.cuda_include = next((p for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include",
                                              *sorted(Path("/usr/local").glob("cuda*/include"))]
                                  if (p / "cuda.h").exists()), None)

    def write(self, line):
        print(line, flush=True)
        with open(self.out / "frameworks.md", "a") as markdown:
            markdown.write(line + "\n")

    def result(self, job, ok, text, **figures):
        self.figures[job] = {"ok": ok, "text": text, **figures}
        (self.out / "frameworks.json").write_text(json.dumps(self.figures, indent=2))
        if ok is False:
            self.failures += 1
        self.write(f"| {job} | {'pass' if ok else 'FAIL' if ok is False else 'not run'} | {text} |")

    def run(self, command, env=None, timeout=180):
        full = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
        full.update(env or {})
        return subprocess.run([str(c) for c in command], env=full, capture_output=True, text=True,
                              check=False,
                              timeout=timeout)

    def preloaded(self, trace, **extra):
        env = {"LD_PRELOAD": str(self.library), "MEMTRACE_OUTPUT": str(trace)}
        if self.dry_run:
            env["LD_LIBRARY_PATH"] = str(self.test_lib)
            env.update(self.test_card)
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def report(self, trace):
        result = self.run([self.report_tool, trace, "--format", "json"])
        return json.loads(result.stdout) if result.returncode == 0 else None

    def outside_text(self, report, smi_used=None):
        outside = (report or {}).get("live", {}).get("outside_allocations")
        if not outside:
            return "no device memory reading"
        used = sum(d["used_bytes"] for d in outside["devices"])
        text = f"outside any allocation call {outside['bytes']} B (device used {used} B)"
        if smi_used is not None:
            text += f"; nvidia-smi for the process {smi_used} B"
        return text

    def compile(self, source, output, libraries):
        if not self.cuda_include or not shutil.which("g++"):
            return "no CUDA headers or g++"
        lib_dirs = [self.test_lib] if self.dry_run else [
            p for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64",
                        *Path("/usr/local").glob("cuda*/lib64")] if p.exists()]
        command = ["g++", "-O1", "-o", output, source, f"-I{self.cuda_include}",
                   *[f"-L{d}" for d in lib_dirs], *[f"-Wl,-rpath,{d}" for d in lib_dirs],
                   *libraries, "-ldl", "-lpthread", "-lrt"]
        result = self.run(command, timeout=120)
        return None if result.returncode == 0 else " / ".join(result.stderr.strip().splitlines()[-3:])

    # ---- the jobs ----

    def lookup_facts(self):
        binary = self.out / "lookup_facts"
        error = self.compile(HERE / "lookup_facts.cpp", binary, [])
        if error:
            return self.result("lookup-facts", None, f"not built: {error}")
        driver = self.test_lib / "libcuda.so.1" if self.dry_run else "libcuda.so.1"
        result = self.run([binary, driver], self.test_card if self.dry_run else None)
        facts = {w[0]: int(w[-1]) for w in program_account(result.stdout)[1].get("fact", [])}
        self.result("lookup-facts", result.returncode == 0 and bool(facts),
                    f"the same function as dlsym's: {sum(facts.values())} of {len(facts)}"
                    f" (differ: {', '.join(k for k, v in facts.items() if not v) or 'none'})"
                    if facts else f"exit {result.returncode}: {result.stderr[-300:]}", facts=facts)

    def plain_cuda(self):
        for linking, libraries in [("dynamic", ["-lcudart"]), ("static", ["-lcudart_static"])]:
            job = f"plain-cuda ({linking} runtime)"
            if self.dry_run and linking == "static":
                self.result(job, None, "the simulated runtime has no static form: GPU only")
                continue
            binary = self.out / f"plain_cuda_{linking}"
            error = self.compile(HERE / "plain_cuda.cpp", binary,
                                 libraries + ([] if self.dry_run else ["-lcuda"]))
            if error:
                self.result(job, None, f"not built: {error}")
                continue
            trace = self.out / f"plain_cuda_{linking}.bin"
            result = self.run([binary], self.preloaded(trace))
            account = program_account(result.stdout)[0]
            recorded = recorded_events(trace) if trace.exists() else []
            # The static runtime's calls reach only the driver hooks: same addresses and sizes,
            # the driver's API names.
            same = [(r[0], r[2], r[3]) for r in recorded] == [(a[0], a[2], a[3]) for a in account]
            apis = sorted({r[1] for r in recorded})
            report = self.report(trace) if trace.exists() else None
            peak = report["summary"]["peak_bytes"] if report else None
            self.result(job, result.returncode == 0 and same and peak == live_and_peak(account)[1],
                        f"{len(recorded)} events ({', '.join(apis)}) for the program's "
                        f"{len(account)}; peak {peak} B; {self.outside_text(report)}",
                        apis=apis, peak=peak)

    def framework(self, job):
        workload = HERE / "frameworks_workloads.py"
        if self.dry_run:
            compiled = self.run([self.python, "-m", "py_compile", workload])
            return self.result(job, None if compiled.returncode == 0 else False,
                               "dry run: needs a GPU (workload compiles)"
                               if compiled.returncode == 0 else compiled.stderr[-300:])
        module = {"torch-expandable": "torch", "torch-graphs": "torch", "torch-nccl": "torch",
                  "cupy": "cupy", "jax": "jax"}[job]
        if self.run([self.python, "-c", f"import {module}"]).returncode != 0:
            return self.result(job, None, f"{module} is not installed for {self.python}")
        runs = {"torch-expandable": [("", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})],
                "torch-graphs": [("PyTorch's caching allocator, its tensors", {}),
                                 ("its segments only", {"MEMTRACE_TORCH_TRACKER": "0"}),
                                 ("the program's cudaMallocAsync backend",
                                  {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})],
                "torch-nccl": [("", {"NCCL_CUMEM_ENABLE": "1"})],
                "cupy": [("", {})],
                "jax": [("platform allocator", {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}),
                        ("BFC allocator", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})]}[job]
        for label, extra in runs:
            name = f"{job} ({label})" if label else job
            trace = self.out / f"{job}-{len(self.figures)}.bin"
            started = time.monotonic()
            try:
                result = self.run([self.python, workload, job], self.preloaded(trace, **extra))
            except subprocess.TimeoutExpired:
                self.result(name, False, "timed out")
                continue
            lines = program_account(result.stdout)[1].get("counters", [])
            counters = json.loads(" ".join(lines[-1])) if lines else {}
            report = self.report(trace) if trace.exists() else None
            if result.returncode != 0 or not report:
                self.result(name, False, f"exit {result.returncode}: {result.stderr[-400:]}")
                continue
            summary = report["summary"]
            ok = summary["ended_cleanly"]
            if job == "torch-expandable":
                # Physical memory is what PyTorch reserves: the same peak and end.
                ok = ok and summary["level"] == "segment" and \
                    (summary["peak_bytes"], summary["end_bytes"]) == \
                    (counters["max_memory_reserved"], counters["memory_reserved"])
            self.result(name, ok,
                        f"peak {summary['peak_bytes']} B, end {summary['end_bytes']} B, level "
                        f"{summary['level']}, mapped at most {summary.get('mapped_peak_bytes')} B; "
                        f"framework: {json.dumps(counters)}; "
                        f"{self.outside_text(report, counters.get('nvidia_smi_used_bytes'))}; "
                        f"{time.monotonic() - started:.0f} s",
                        summary=summary, counters=counters)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--jobs", default=",".join(ALL_JOBS))
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.build.resolve(), args.out.resolve(), args.dry_run, args.python)
    check.write(f"\n## memtrace frameworks check ({'dry run, no GPU' if args.dry_run else 'GPU'}), "
                f"{time.strftime('%Y-%m-%d %H:%M')}\n\n| job | result | figures |\n|---|---|---|")
    for job in args.jobs.split(","):
        if job == "lookup-facts":
            check.lookup_facts()
        elif job == "plain-cuda":
            check.plain_cuda()
        elif job in GPU_JOBS:
            check.framework(job)
        else:
            raise SystemExit(f"unknown job {job}: one of {', '.join(ALL_JOBS)}")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
