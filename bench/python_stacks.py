"""The cost of recording an allocation+free with a Python stack 10 and 30 frames deep,
against the untraced call in the same run. Run under LD_PRELOAD=libmemtrace.so with
MEMTRACE_AUTOSTART=0 (bench/run.py does).

The allocation loop runs in C (bench/workload.cpp), called through ctypes.CDLL, which releases
the GIL around the call as PyTorch's bindings do around every op (gil "released"), and through
ctypes.PyDLL, which keeps it held (gil "held": a free from a tensor's dealloc). Two shapes of
stack:
  same      every allocation from the same Python stack (a loop)
  varying   the innermost frame alternates between 8 lines (a forward pass through layers)
Prints one JSON object per case."""
import ctypes
import json
import os
import statistics
import sys
import time

from trace_chunks import chunk_bytes  # bench/trace_chunks.py, beside this script

PAIRS = 20000
REPEATS = 7

WORKLOADS = {"released": ctypes.CDLL(sys.argv[1]), "held": ctypes.PyDLL(sys.argv[1])}
for library in WORKLOADS.values():
    for name in ("bench_hooked", "bench_direct"):
        getattr(library, name).restype = ctypes.c_uint64
        getattr(library, name).argtypes = (ctypes.c_long, ctypes.c_long)
workload = WORKLOADS["released"]
memtrace = ctypes.PyDLL(None)  # the preloaded libmemtrace.so's C API
memtrace.memtrace_start.argtypes = (ctypes.c_char_p,)


def at_depth(depth, fn, *args):
    """Calls fn(*args) `depth` Python frames below this one."""
    if depth <= 1:
        return fn(*args)
    return at_depth(depth - 1, fn, *args)


def varying(pairs, size):
    """PAIRS allocation pairs from 8 different lines, in chunks."""
    total, chunk = 0, pairs // 64
    for _ in range(8):
        total += workload.bench_hooked(chunk, size)  # line A
        total += workload.bench_hooked(chunk, size)  # line B
        total += workload.bench_hooked(chunk, size)  # line C
        total += workload.bench_hooked(chunk, size)  # line D
        total += workload.bench_hooked(chunk, size)  # line E
        total += workload.bench_hooked(chunk, size)  # line F
        total += workload.bench_hooked(chunk, size)  # line G
        total += workload.bench_hooked(chunk, size)  # line H
    return total




def measure(fn):
    times = [fn() / PAIRS for _ in range(REPEATS)]
    return statistics.median(times)


def main():
    global workload
    path = os.path.join(os.environ.get("MEMTRACE_BENCH_DIR", "/tmp"), f"memtrace-pybench-{os.getpid()}.bin")
    os.environ["MEMTRACE_STACKS"] = "python"
    results = []
    for gil, workload in WORKLOADS.items():
        for depth in (10, 30):
            direct = measure(lambda depth=depth, workload=workload: at_depth(depth, workload.bench_direct, PAIRS, 4096))
            assert memtrace.memtrace_start(path.encode()) == 0
            # Past the file's first flush period, which is written through (Note [When records
            # reach the file]): the buffered path every later event takes is what is measured.
            time.sleep(0.11)
            same = measure(lambda depth=depth, workload=workload: at_depth(depth, workload.bench_hooked, PAIRS, 4096))
            changing = measure(lambda depth=depth: at_depth(depth, varying, PAIRS, 4096))
            memtrace.memtrace_flush()
            size = chunk_bytes(path)
            memtrace.memtrace_close()
            os.remove(path)
            events = 2 * PAIRS * REPEATS * 2
            for shape, hooked in (("same", same), ("varying", changing)):
                results.append({"gil": gil, "python_depth": depth, "stack": shape,
                                "direct_ns_per_pair": round(direct, 1),
                                "traced_ns_per_pair": round(hooked, 1),
                                "record_ns_per_event": round((hooked - direct) / 2, 1),
                                "bytes_per_event": round(size / events, 2)})
    for result in results:
        print(json.dumps(result))


main()
