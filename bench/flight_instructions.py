"""Instructions per event of the record path (callgrind: the same count on a busy machine as on
an idle one) under the flight recorder against the default mode (issue 33's budget: the flight
recorder costs no more per event than the default mode of before it). Counted inclusive in
memtrace::recordAlloc and memtrace::recordFree, so a compaction of the flight file, which runs
inside an allocation's record, is counted in the events it is spread over (the kernel's copy of
the file, copy_file_range, is not an instruction callgrind sees: its wall time is in
bench/long_run.py's figures).

    python3 bench/flight_instructions.py BUILD [BASE_BUILD] [PAIRS]

BASE_BUILD is a build of the commit to compare with (its default mode: a buffered trace). The
loop (bench/workload.cpp, PAIRS allocation+free pairs, four live at a time) runs 30 Python
frames deep with the GIL released, as PyTorch's ops call the allocator, with MEMTRACE_STACKS
python (the default) and none. Prints one JSON line per build, mode and stack setting."""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = """
import ctypes, sys
workload = ctypes.CDLL(sys.argv[1])
workload.bench_hooked.argtypes = (ctypes.c_long, ctypes.c_long)
memtrace = ctypes.PyDLL(None)
def at_depth(depth):
    if depth <= 1:
        return workload.bench_hooked(int(sys.argv[3]), 4096)
    return at_depth(depth - 1)
memtrace.memtrace_start(sys.argv[2].encode())
at_depth(30)
memtrace.memtrace_close()
"""


def inclusive(output, function):
    """The inclusive instruction count callgrind_annotate gives `function`."""
    total = 0
    for line in output.splitlines():
        if function in line and "[" in line:
            total = max(total, int(re.match(r"\s*([\d,]+)", line).group(1).replace(",", "")))
    return total


def measure(build, mode, stacks, pairs, window, work):
    out = Path(work) / f"callgrind-{mode}-{stacks}.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update(LD_PRELOAD=str(build / "allocator" / "libmemtrace.so"), MEMTRACE_AUTOSTART="0",
               MEMTRACE_STACKS=stacks, MEMTRACE_MODE=mode,
               LD_LIBRARY_PATH=str(build / "simulator" / "lib"),
               MEMTRACE_GPU_PROFILE=str(build / "simulator" / "profiles" / "h200.json"))
    if window:
        env["MEMTRACE_FLIGHT_EVENTS"] = str(window)
    trace = Path(work) / "trace.bin"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    "--toggle-collect=*recordAlloc*", "--toggle-collect=*recordFree*",
                    sys.executable, "-c", LOOP, build / "bench" / "libmemtrace_bench_workload.so",
                    trace, str(pairs)], env=env, check=True, capture_output=True)
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", out],
                               capture_output=True, text=True, check=True).stdout
    events = 2 * pairs
    record = inclusive(annotated, "recordAlloc") + inclusive(annotated, "recordFree")
    size = trace.stat().st_size
    trace.unlink()
    return {"build": str(build), "mode": mode, "window": window, "stacks": stacks,
            "events": events, "instructions_per_event": round(record / events, 1),
            "file_bytes": size}


def main():
    build = Path(sys.argv[1]).resolve()
    base = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 and sys.argv[2] != "-" else None
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 60000
    runs = []
    if base:
        runs += [(base, "full", None)]
    # The flight recorder with its default window (no compaction in this short loop) and with
    # a window small enough that it compacts several times during it.
    runs += [(build, "full", None), (build, "flight", None), (build, "flight", 4000)]
    with tempfile.TemporaryDirectory() as work:
        for stacks in ("python", "none"):
            for where, mode, window in runs:
                print(json.dumps(measure(where, mode, stacks, pairs, window, work)), flush=True)


main()
