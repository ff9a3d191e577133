"""Runs a program (argv[1], its arguments after it) as `python PROGRAM ...` runs it, then prints
every counter of PyTorch's caching allocator (torch.cuda.memory_stats() of each device the
program used) as one JSON line: tests/simulator/test_unchanged.py runs it traced and untraced
and compares the two (issue 48: the program as it is)."""
import json
import os
import runpy
import sys
import time

program = sys.argv[1]
sys.argv = sys.argv[1:]
if os.environ.get("MEMTRACE_TEST_VALUES"):
    # The simulated card's values as `memtrace run --gpu --values V` has them (the runner of
    # an untraced program, `python -m mem_tracer.simulated_gpu`, has none): the same program
    # on the same card, traced or not.
    from mem_tracer.simulated_gpu import values as simulated_values
    assert simulated_values.install(os.environ["MEMTRACE_TEST_VALUES"]), "not on the card"
runpy.run_path(program, run_name="__main__")

import torch  # the program imported it; this only reads its counters

counters = {}
if torch.cuda.is_initialized():
    for device in range(torch.cuda.device_count()):
        counters[str(device)] = torch.cuda.memory_stats(device)
print(json.dumps(counters, sort_keys=True))
# Note [Letting autograd's threads finish] in python/mem_tracer/_run.py: a process that ends
# right after a backward can abort in PyTorch's teardown.
time.sleep(0.05)
