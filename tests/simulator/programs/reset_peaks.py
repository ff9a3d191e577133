"""A program whose PyTorch peaks differ from its trace's, by its own doing: it frees a 64 MiB
tensor, resets PyTorch's peaks (torch.cuda.reset_peak_memory_stats()), then makes a 1 MiB one.
PyTorch's requested_bytes.all.peak is then 1 MiB, the trace's peak 64 MiB; the reserved peak
(64 MiB, the segment PyTorch keeps cached) stays the same in both (Note [PyTorch's counters
beside the trace] in python/mem_tracer/cli.py)."""
import torch

big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
del big
torch.cuda.reset_peak_memory_stats()
small = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
