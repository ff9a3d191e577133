"""What the Python tests share: where the build put things, how to run them, and how to read a
trace back. (Imported by name; tests/conftest.py only provides the fixture.)"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("MEMTRACE_BUILD_DIR", ROOT / "build")).resolve()
# The profile of the simulated GPU the tests' programs run on (MEMTRACE_TEST_GPU=h200), or None:
# then every program `run` starts runs on that simulated card (mem_tracer.simulated_gpu), as
# tests/gpu does in `make test` (ctest gpu.simulated) on a machine without a GPU.
SIMULATED_GPU = os.environ.get("MEMTRACE_TEST_GPU") or None


# The CPythons the package reads frames of: the tests that read them run under each, and CI
# must not pass by finding fewer.
SUPPORTED_PYTHONS = ((3, 10), (3, 11), (3, 12), (3, 13))


def installed_pythons():
    """{(major, minor): path} of every CPython 3 installed here (pyenv's, then PATH's)."""
    found = {}
    candidates = sorted(Path("/root/.pyenv/versions").glob("3.*/bin/python3.*"))
    candidates += [Path(p) for p in sorted(Path("/usr/bin").glob("python3.*"))]
    for candidate in candidates:
        match = re.fullmatch(r"python3\.(\d+)", candidate.name)
        if match and (3, int(match.group(1))) not in found:
            found[(3, int(match.group(1)))] = str(candidate)
    found.setdefault(sys.version_info[:2], sys.executable)
    return found


class Build:
    """Paths of the built artifacts the tests run."""

    root = ROOT
    dir = BUILD
    library = BUILD / "allocator" / "libmemtrace.so"
    report = BUILD / "bin" / "memtrace-report"
    # The simulated GPU's libraries (simulator/): the one fake CUDA every test runs on.
    simulator = BUILD / "simulator" / "lib"
    runtime = simulator / "libcudart.so.13"
    driver = simulator / "libcuda.so.1"
    # What the test scripts load (ctypes.CDLL): the simulated runtime, with the calls the tests
    # make besides CUDA's (tests/preload/programs/cuda_calls.cpp) over it.
    cuda = BUILD / "tests" / "preload" / "lib" / "libcudacalls.so"
    programs = BUILD / "tests" / "preload" / "bin"
    workload = BUILD / "tests" / "preload" / "lib" / "libworkload.so"

    @classmethod
    def program(cls, name):
        return cls.programs / name


def card_environment(suite_card=True):
    """The simulated card the test programs and scripts run on, unless a test says otherwise: an
    H200's profile with two devices (programs use device 1), its memory as the profile's. Under
    MEMTRACE_TEST_GPU (`suite_card`), simulated_environment says which card instead (nothing
    here)."""
    if suite_card and SIMULATED_GPU:
        return {}
    return {"MEMTRACE_GPU_PROFILE": str(BUILD / "simulator" / "profiles" / "h200.json"),
            "MEMTRACE_GPU_COUNT": "2"}


def run(command, env=None, check=True, timeout=60, own_card=False, **kwargs):
    """Runs a command with a clean memtrace environment plus `env`, on the tests' simulated
    card (card_environment). `own_card`: the command puts its program on simulated cards of its
    own (`memtrace run --gpu`, `python -m mem_tracer.simulated_gpu`, the calibration), so the
    suite's card (MEMTRACE_TEST_GPU) is not put under it."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("MEMTRACE_") and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    full_env["MEMTRACE_BUILD_DIR"] = str(BUILD)
    full_env.update(card_environment(suite_card=not own_card))
    full_env.update(env or {})
    if SIMULATED_GPU and not own_card:
        full_env = simulated_environment(full_env)
    result = subprocess.run([str(c) for c in command], env=full_env, capture_output=True,
                            text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}\nstdout:\n{result.stdout}\n"
                             f"stderr:\n{result.stderr}")
    return result


def simulated_environment(env, profile=None, **options):
    """`env` with the simulated GPU of `profile` (default: the tests' own) under it, after
    whatever LD_PRELOAD already holds (memtrace's library stays first)."""
    sys.path.insert(0, str(ROOT / "python"))
    from mem_tracer import simulated_gpu
    return simulated_gpu.environment(profile or SIMULATED_GPU or "h200", base=env, **options)


def preloaded(trace, **extra):
    """The environment that traces a program into `trace` under LD_PRELOAD, on the tests' card."""
    env = {"LD_PRELOAD": str(Build.library), "MEMTRACE_OUTPUT": str(trace), **card_environment()}
    env.update({k: str(v) for k, v in extra.items()})
    return env


_TOKEN = re.compile(r"(\w[\w-]*)=(\"(?:[^\"\\]|\\.)*\"|\[[^\]]*\]|\S+)|(\S+)")


def parse_records(trace):
    """`memtrace-report parse`, as a list of dicts: {'record': kind, fields..., 'words': [...]}.

    A leading '#N' becomes 'index', another leading bare word 'id'; later bare words
    (traced / untraced) are in 'words'."""
    output = run([Build.report, "parse", trace]).stdout
    records = []
    for line in output.splitlines():
        head, _, rest = line.partition(" ")
        record = {"record": head, "words": []}
        for number, match in enumerate(_TOKEN.finditer(rest)):
            key, value, word = match.groups()
            if word is not None:
                if number == 0 and word.startswith("#"):
                    record["index"] = int(word[1:])
                elif number == 0:
                    record["id"] = word
                else:
                    record["words"].append(word)
                continue
            if value.startswith('"'):
                value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            record[key] = value
        records.append(record)
    return records


def events(trace):
    """The alloc / free / failed-alloc records, with numbers as ints."""
    result = []
    for record in parse_records(trace):
        if record["record"] not in ("alloc", "free", "failed-alloc"):
            continue
        for key in ("t", "size", "pystack", "native"):
            if key in record and record[key] != "?":
                record[key] = int(record[key])
        if "address" in record:
            record["address"] = int(record["address"], 16)
        record["traced"] = "traced" in record["words"]
        result.append(record)
    return result


def allocation_stacks(trace):
    """Every allocation of the trace, in order, as (thread, size, frames): its Python stack
    as a list of (file, line, function), outermost first ([] when it has none)."""
    strings, frames, stacks, result, thread = {}, {}, {0: []}, [], None
    for line in run([Build.report, "parse", trace]).stdout.splitlines():
        if line.startswith("string "):
            _, number, text = line.split(" ", 2)
            strings[number] = json.loads(text)
    for record in parse_records(trace):
        kind = record["record"]
        if kind == "frame":
            frames[record["id"]] = (strings[record["file"]], int(record["line"]),
                                    strings[record["function"]])
        elif kind == "pystack":
            stacks[int(record["id"])] = stacks[int(record["parent"])] + [frames[record["frame"]]]
        elif kind == "context":
            thread = int(record["thread"])
        elif kind == "alloc":
            result.append((thread, int(record["size"]), stacks[int(record["pystack"])]))
    return result


def program_account(stdout):
    """What a program of tests/preload printed about itself (programs/account.h): its memory
    events [(kind, api, address, size)] in order, and its other lines by their first word
    ([words after it] for each line)."""
    events, other = [], {}
    for line in stdout.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "alloc":
            events.append(("alloc", parts[1], int(parts[2], 16), int(parts[3])))
        elif parts[0] == "free":
            events.append(("free", parts[1], int(parts[2], 16), None))
        elif parts[0] == "oom":
            events.append(("failed-alloc", parts[2] if len(parts) > 2 else "cudaMalloc", None,
                           int(parts[1])))
        else:
            other.setdefault(parts[0], []).append(parts[1:])
    return events, other


def recorded_events(trace):
    """The trace's memory events as [(kind, api, address, size, device)], each with the API and
    device of the context in force (a free's size is None, as in program_account)."""
    recorded, api, device = [], None, None
    for record in parse_records(trace):
        if record["record"] == "context":
            api, device = record["api"], int(record["device"])
        elif record["record"] in ("alloc", "free", "failed-alloc"):
            address = int(record["address"], 16) if "address" in record else None
            size = int(record["size"]) if record["record"] != "free" else None
            recorded.append((record["record"], api, address, size, device))
    return recorded


def live_and_peak(account_events):
    """The live bytes at the end and the peak of a program's account of its events."""
    live, peak, sizes = 0, 0, {}
    for kind, _, address, size in account_events:
        if kind == "alloc":
            sizes[address] = size
            live += size
            peak = max(peak, live)
        elif kind == "free":
            live -= sizes.pop(address)
    return live, peak


def report_json(trace, *args):
    """`memtrace-report --format json`, parsed."""
    return json.loads(run([Build.report, trace, "--format", "json", *args]).stdout)


def report_fails(args, *expected, timeout=30):
    """memtrace-report refuses `args`: exit 2, one line on stderr naming what is wrong (each of
    `expected` in it), nothing on stdout. Returns the line."""
    result = run([Build.report, *map(str, args)], check=False, timeout=timeout)
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memtrace-report: error: "), lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]


def progress_on_a_terminal(command):
    """Runs `command` with stderr on a pseudo-terminal and progress shown at once; returns
    what it wrote there."""
    import pty

    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env["MEMTRACE_PROGRESS_DELAY_MS"] = "0"
    process = subprocess.Popen([str(c) for c in command], stdout=subprocess.DEVNULL,
                               stderr=terminal, stdin=subprocess.DEVNULL, env=env)
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=120) == 0
    os.close(controller)
    return output.decode()
