"""The three-line example on real CUDA, for tests/gpu/test_package_gpu.py:

    python three_lines.py MODE MODEL OUT.json TRACE

MODE: untraced (PyTorch's own allocator) or traced (mem_tracer.switch_allocator())."""
import json
import sys

import torch

from models import build

mode, name, out, trace = sys.argv[1:5]
if mode == "traced":
    import mem_tracer

    mem_tracer.switch_allocator()
    mem_tracer.start_tracing(trace)
model, inputs = build(name)
model = model.cuda().eval()
inputs = tuple(x.cuda() for x in inputs)
with torch.no_grad():
    model(*inputs)
torch.cuda.synchronize()
result = {}
if mode == "traced":
    mem_tracer.stop_tracing()
    result["max_memory_allocated"] = mem_tracer.max_memory_allocated()
    with open(trace + ".txt", "w") as report:
        mem_tracer.report_stats(file=report)
else:
    result["requested_peak"] = torch.cuda.memory_stats()["requested_bytes.all.peak"]
with open(out, "w") as file:
    json.dump(result, file)
