"""nn.Module attribution: a small torch.nn model whose forward "allocates device memory"
through memtrace's pluggable entry points (torch here is the CPU build; the allocations stand
for the tensors a CUDA model would make)."""
import ctypes
import json
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)

import torch  # noqa: E402
from torch import nn  # noqa: E402

import mem_tracer  # noqa: E402
from mem_tracer import _native  # noqa: E402

memtrace = _native.allocator()
kept = []


def allocate(size):
    kept.append(memtrace.memtrace_alloc(size, 0, None))


class Attention(nn.Module):
    def forward(self, x):
        allocate(3 << 20)
        return x


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(4, 4)

    def forward(self, x):
        allocate(1 << 20)
        return self.up(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
        self.mlp = Mlp()

    def forward(self, x):
        return self.mlp(self.attn(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        allocate(7 << 20)
        return x


model = Model()
with mem_tracer.trace(sys.argv[2], model=model if sys.argv[3] == "named" else None):
    model(torch.zeros(2, 4))
    allocate(5 << 20)  # outside any module
rows = mem_tracer.report_data(top=0, group_by="module", trace=sys.argv[2])["live"]["rows"]
print(json.dumps({row["location"]: row["bytes"] for row in rows}))
