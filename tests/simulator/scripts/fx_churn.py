"""torch.fx's generated forwards, made and dropped by the thousand: each symbolic_trace() of a
fresh module compiles a new forward (file "<eval_with_key>.N"), and the next one often gets the
dead one's address (Note [Code objects that die], tracer/recorder/python_stack.cpp). Runs on the
simulated GPU with PyTorch's CUDA build.

    python fx_churn.py COUNT

Prints, per module, the generated forward's file and the lines it has: "<file>|l1,l2,..."."""
import gc
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.linear(x)) * 2


x = torch.randn(8, 64, device="cuda")
for i in range(int(sys.argv[1])):
    traced = torch.fx.symbolic_trace(Net(64).cuda())
    code = traced.forward.__code__
    traced(x)
    lines = sorted({line for _, _, line in code.co_lines() if line})
    print(f"{code.co_filename}|{','.join(map(str, lines))}")
    del traced, code
    gc.collect()  # the module's class and forward are in a cycle: freed now, not later
