"""The three-line flow of mem_tracer, with allocations made through memtrace's pluggable
entry points (what PyTorch calls under switch_allocator()) against the simulated GPU's runtime.
Lines tagged `# ALLOC:<name>` are where the test expects the allocations attributed.

    python flow.py LIBCUDART TRACE REPORT_TXT"""
import ctypes
import json
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # the CUDA runtime, as PyTorch loads it

import mem_tracer  # noqa: E402
from mem_tracer import _native  # noqa: E402

memtrace = _native.allocator()
weights = memtrace.memtrace_alloc(64 << 20, 0, None)  # ALLOC:weights (before tracing: untraced)


def layer(x_bytes):
    hidden = memtrace.memtrace_alloc(4 * x_bytes, 0, None)  # ALLOC:hidden
    out = memtrace.memtrace_alloc(x_bytes, 0, None)  # ALLOC:out
    memtrace.memtrace_free(hidden, 4 * x_bytes, 0, None)
    return out


def model(x_bytes):
    outputs = [layer(x_bytes) for _ in range(3)]
    logits = memtrace.memtrace_alloc(10 << 20, 0, None)  # ALLOC:logits
    return outputs, logits


trace = mem_tracer.start_tracing(sys.argv[2])
mem_tracer.annotate("start")
with mem_tracer.phase("forward"):
    outputs, logits = model(2 << 20)
mem_tracer.stop_tracing()
with open(sys.argv[3], "w") as report:
    mem_tracer.report_stats(top=10, file=report)
print(json.dumps({"trace": str(trace), "peak": mem_tracer.max_memory_allocated(),
                  "current": mem_tracer.memory_allocated(),
                  "data": mem_tracer.report_data(top=0)}))
