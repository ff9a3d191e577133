"""Allocates 64 MiB blocks until the device refuses one (torch.OutOfMemoryError), then says how
many it held; the test runs it on a simulated L4 of 1 GiB."""
import torch

blocks = []
try:
    while True:
        blocks.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))  # oom: here
except torch.OutOfMemoryError:
    print("blocks", len(blocks))
