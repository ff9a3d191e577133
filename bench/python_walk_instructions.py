"""Instructions per event of the Python walk (callgrind: the same count on a busy machine as on
an idle one), the walk alone: memtrace::python::captureStack, inclusive, per allocation. The
allocation loop (bench/workload.cpp) runs 30 Python frames deep, called with the GIL released
(ctypes.CDLL, as PyTorch's ops are) and with it held (ctypes.PyDLL).

    python3 bench/python_walk_instructions.py BUILD [PYTHON]

Prints one JSON line per GIL state: instructions per event in the walk, and in the whole
record path (memtrace::recordAlloc, inclusive)."""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD = Path(sys.argv[1]).resolve()
PYTHON = sys.argv[2] if len(sys.argv) > 2 else sys.executable
EVENTS = 20000
LOOP = f"""
import ctypes, sys
workload = (ctypes.CDLL if sys.argv[2] == "released" else ctypes.PyDLL)(sys.argv[1])
workload.bench_hooked.argtypes = (ctypes.c_long, ctypes.c_long)
memtrace = ctypes.PyDLL(None)
def at_depth(depth):
    if depth <= 1:
        return workload.bench_hooked({EVENTS}, 4096)
    return at_depth(depth - 1)
memtrace.memtrace_start(sys.argv[3].encode())
at_depth(30)
memtrace.memtrace_close()
"""


def inclusive(output, function):
    """The inclusive instruction count callgrind_annotate gives `function`."""
    for line in output.splitlines():
        if function in line and "[" in line:
            return int(re.match(r"\s*([\d,]+)", line).group(1).replace(",", ""))
    return 0


def main():
    workload = BUILD / "bench" / "libmemtrace_bench_workload.so"
    with tempfile.TemporaryDirectory() as work:
        for gil in ("released", "held"):
            out = Path(work) / f"callgrind-{gil}.out"
            env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
            env.update(LD_PRELOAD=str(BUILD / "allocator" / "libmemtrace.so"), MEMTRACE_AUTOSTART="0",
                       MEMTRACE_STACKS="python",
                       LD_LIBRARY_PATH=str(BUILD / "simulator" / "lib"),
                       MEMTRACE_GPU_PROFILE=str(BUILD / "simulator" / "profiles" / "h200.json"))
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                            "--toggle-collect=*recordAlloc*", PYTHON, "-c", LOOP, workload, gil,
                            Path(work) / "trace.bin"],
                           env=env, check=True, capture_output=True)
            annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", out],
                                       capture_output=True, text=True, check=True).stdout
            record = inclusive(annotated, "recordAlloc")
            walk = inclusive(annotated, "python::captureStack")
            print(json.dumps({"gil": gil, "python": PYTHON, "events": EVENTS,
                              "walk_instructions_per_event": round(walk / EVENTS, 1),
                              "record_instructions_per_event": round(record / EVENTS, 1)}))


main()
