"""mem_tracer.start_tracing() in a process nobody preloaded while another thread keeps making
and freeing tensors (Note [Attaching from the package] in python/mem_tracer/tracing.py): a
tensor of PyTorch's snapshot freed before it is recorded must not stay live in the trace, one
made after the attach must not count twice. Prints PyTorch's counters as one JSON line."""
import json
import sys
import threading
import time

import torch

# Many live blocks, so that reading what PyTorch holds takes a while; the other thread's
# tensors are among them, with sizes of their own. It frees the `doomed` ones as it goes, and
# makes no other tensor of their sizes: a phantom left by a free that came between PyTorch's
# snapshot and its recording stays live (no later allocation at its address replaces it).
kept = [torch.empty(256 + i, device="cuda") for i in range(3000)]
doomed = [torch.empty(100_003 + i, device="cuda") for i in range(1000)]
churned = [torch.empty(300_007, device="cuda") for _ in range(64)]
stop = threading.Event()
steps = [0]


def churn():
    i = 0
    while not stop.is_set():
        churned[i % len(churned)] = torch.empty(300_007 + i % 997, device="cuda")  # frees one
        if i % 4 == 0 and doomed:
            doomed.pop()
        i += 1
        steps[0] = i


# The GIL handed over as often as it can be, so that the other thread frees tensors at any
# point of the attach the interpreter lets it.
sys.setswitchinterval(1e-6)
thread = threading.Thread(target=churn)
thread.start()
while steps[0] < 400:
    time.sleep(0.001)

import mem_tracer  # noqa: E402  (as a notebook imports it, late)

before = steps[0]
mem_tracer.start_tracing(sys.argv[1], modules=False)
during = steps[0] - before
time.sleep(0.05)
stop.set()
thread.join()
torch.cuda.synchronize()
# Before anything is freed at exit: the recorder's live bytes are PyTorch's requested bytes
# when no tensor is missing or left live by the attach.
library = mem_tracer._native.library()
recorded = library.memtrace_current_bytes(0)
mem_tracer.stop_tracing()
stats = torch.cuda.memory_stats()
print(json.dumps({"requested_current": stats["requested_bytes.all.current"],
                  "recorded_current": recorded, "doomed_left": len(doomed),
                  "steps": steps[0], "steps_during_start": during}))
