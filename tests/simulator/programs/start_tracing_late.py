"""mem_tracer.start_tracing() in a process nobody preloaded: the model is on the card before
tracing starts (a notebook's cells), then one training step is traced. Prints PyTorch's own
counters and the trace's path as one JSON line."""
import json
import sys
import time

import torch

model = torch.nn.Sequential(torch.nn.Linear(1000, 3001), torch.nn.ReLU(),
                            torch.nn.Linear(3001, 10)).cuda()
x = torch.randn(257, 1000, device="cuda")

import mem_tracer  # noqa: E402  (as a notebook imports it, late)

mem_tracer.start_tracing(sys.argv[1], model=model)
loss = model(x).square().mean()  # the traced forward
loss.backward()
mem_tracer.stop_tracing()
stats = torch.cuda.memory_stats()
library = mem_tracer._native.library()
print(json.dumps({"memtrace_reserved_peak": library.memtrace_peak_reserved_bytes(-1),
                  "memtrace_reserved": library.memtrace_reserved_bytes(0),
                  "reserved_current": stats["reserved_bytes.all.current"],
                  "requested_peak": stats["requested_bytes.all.peak"],
                  "requested_current": stats["requested_bytes.all.current"],
                  "reserved_peak": stats["reserved_bytes.all.peak"]}))
# Autograd's device thread lets go of the finished backward after backward() returned; an exit
# right after it can abort in PyTorch's teardown (Note [Letting autograd's threads finish] in
# python/mem_tracer/_run.py, which `memtrace run` sleeps for as this does).
time.sleep(0.05)
