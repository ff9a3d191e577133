"""A small mixture of experts (8 experts, top-2 routing, as Mixtral routes) run forward on
the device the first argument names, for tests/simulator/test_values.py: on the simulated
card under `--values cpu` its router's choices, and so each expert's load, are a CPU run's;
under known values its topk's indices are each token's first two experts (Note [Top-k keeps
k] in python/mem_tracer/simulated_gpu/values.py). Prints one JSON line: each expert's tokens, the
output's sum and, on a card, the bytes PyTorch's allocator held when the loop over experts
began and at the forward's peak (a second forward, after the first made cuBLAS's workspaces)."""
import json
import sys

import torch
from torch import nn


class MixtureOfExperts(nn.Module):
    def __init__(self, dim=64, experts=8, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            for _ in range(experts))
        self.before_loop = None

    def forward(self, x):
        weights, chosen = torch.topk(self.router(x).softmax(dim=-1), self.top_k, dim=-1)
        out = torch.zeros_like(x)
        loads = []
        if x.is_cuda:
            self.before_loop = torch.cuda.memory_allocated()
        for number, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == number)  # the tokens routed to this expert
            loads.append(token.numel())
            out.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        return out, loads


device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
torch.manual_seed(0)
model = MixtureOfExperts().to(device)
tokens = torch.randn(512, 64).to(device)
with torch.no_grad():
    model(tokens)
    if device != "cpu":
        torch.cuda.reset_peak_memory_stats()
    out, loads = model(tokens)
said = {"loads": loads, "sum": round(out.sum().item(), 3)}
if device != "cpu":
    said.update(before_loop=model.before_loop, peak=torch.cuda.max_memory_allocated())
print(json.dumps(said))
