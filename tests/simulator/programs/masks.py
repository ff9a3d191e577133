"""Outputs sized by a mask, for tests/simulator/test_values.py (Note [Values where they decide
the path] in python/mem_tracer/simulated_gpu/values.py): a known mask keeps what it holds, one no
kernel computed keeps everything. Each line prints `name shape`."""
import torch

x = torch.nn.Linear(16, 16).cuda()(torch.randn(8, 16, device="cuda"))  # no kernel computes it
known = torch.tensor([True, False, True, True, False, False, True, False], device="cuda")
print("known_mask", list(x[known].shape))  # KNOWN
print("mask", list(x[x > 0].shape))  # EVERYTHING
print("nonzero", list((x > 0).nonzero().shape))  # EVERYTHING
print("masked_select", list(x.masked_select(x > 0).shape))  # EVERYTHING
print("unique", list(torch.unique(x.argmax(dim=1)).shape))  # EVERYTHING
print("where", list(torch.where(x[:, 0] > 0)[0].shape))  # EVERYTHING
