"""mem_tracer.start_tracing() without model=, the model inside a wrapper that holds it as its one
child `module` (as DistributedDataParallel does): one training step traced. The modules are named
by how the script calls the wrapper (`wrapped`), the wrapper passed over (Note [Module paths as
the user names them] in python/mem_tracer/_modules.py)."""
import sys
import time
from collections import OrderedDict

import mem_tracer
import torch


class Wrapper(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)


net = torch.nn.Sequential(OrderedDict(up=torch.nn.Linear(1000, 3001), act=torch.nn.ReLU(),
                                      down=torch.nn.Linear(3001, 10))).cuda()
wrapped = Wrapper(net)
x = torch.randn(257, 1000, device="cuda")
mem_tracer.start_tracing(sys.argv[1])
loss = wrapped(x).square().mean()
loss.backward()
mem_tracer.stop_tracing()
# Autograd's device thread may still need the GIL after backward() returned: a process that ends
# at once can abort in PyTorch's teardown (Note [Letting autograd's threads finish] in
# python/mem_tracer/_run.py).
time.sleep(0.05)
