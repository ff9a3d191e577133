"""What the host's values (--values cpu) count of its random draws, for
tests/simulator/test_values.py (Note [Values drawn on the host] in
python/mem_tracer/simulated_gpu/values.py): the program installs the values mode itself, runs the
case its argument names on the simulated card, and prints one JSON line: the ops that drew at
random and the reads of what they drew.
- `dropout`: two AdamW steps of a model with dropout; nothing reads what dropout drew (the
  program reads how many labels it has, a value no draw decided).
- `sized`: a tensor sized by `int(torch.rand(()) * 8) + 1`: one read, which sizes it.
- `sized_from_the_cpu`: the same, drawn by the program's generator and moved to the card (as
  VITS's durations): no draw on the host's stream, one read of the program's draw.
- `sdpa`: scaled_dot_product_attention with dropout_p 0, forward and backward: its kernels carry
  the tag nondeterministic_seeded, but draw nothing."""
import json
import os
import sys

import torch
from mem_tracer.simulated_gpu import values
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
# Made before the mode, as the referee makes its model and inputs: their draws are not counted.
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
images, labels = torch.randn(8, 16), torch.randint(0, 4, (8,))
if not values.install("cpu"):
    sys.exit("not on the simulated card")
case = sys.argv[1]
if case == "dropout":
    model = model.cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    images, labels = images.cuda(), labels.cuda()
    assert int((labels >= 0).sum()) == 8
    for _ in range(2):
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
elif case == "sized":
    length = int(torch.rand((), device="cuda") * 8) + 1
    torch.zeros(length, 4, device="cuda")
elif case == "sized_from_the_cpu":
    length = int(torch.rand(()).cuda() * 8) + 1
    torch.zeros(length, 4, device="cuda")
elif case == "sdpa":
    q, k, v = (torch.randn(2, 2, 16, 8).cuda().requires_grad_() for _ in range(3))
    F.scaled_dot_product_attention(q, k, v, dropout_p=0.0).sum().backward()
else:
    sys.exit(f"no case {case}")
torch.cuda.synchronize()
host = values.installed().host
print(json.dumps({"random_draws": host.random_draws, "random_reads": host.random_reads,
                  "program_random_reads": host.program_random_reads, "ops": host.ops}),
      flush=True)
# Out at once: at an ordinary exit after a backward on the simulated card the process aborts at
# times ("terminate called without an active exception", with or without the values mode's
# counts), which is not what this program checks.
os._exit(0)
