"""A long loop on the simulated card for the flight recorder (test_simulated_traces.py): every
iteration allocates, frees and reads a value back, so that the file is compacted many times;
the read of the last iteration is on the line the test finds by its marker comment."""
import sys

import torch

iterations = int(sys.argv[1])
kept = torch.zeros(1 << 20, device="cuda")  # 4 MiB live throughout
total = 0.0
for step in range(iterations):
    x = torch.ones(1024, device="cuda") * step
    total += x.sum().item()  # read: each step
print("steps", iterations, total)
