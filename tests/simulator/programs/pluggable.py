"""memtrace as PyTorch's pluggable allocator (libmemtrace.so loaded late, after torch and the
simulated libraries): the trace still says it was simulated, and names the read."""
import sys

import mem_tracer

mem_tracer.switch_allocator()
import torch  # noqa: E402

mem_tracer.start_tracing(sys.argv[1])
x = torch.ones(1000, device="cuda")
total = x.sum().item()  # read: item
mem_tracer.stop_tracing()
print("total", total)
