"""Four blocks under activation checkpointing, trained for 2 steps with Adam, for
tests/simulator/test_library_loop.py: the peak is in backward, where a block's forward is
recomputed (its activations, then their gradients), with the parameters, their gradients and
Adam's state live. argv: "reentrant" or "nonreentrant" (torch.utils.checkpoint's use_reentrant),
then "foreach" or "fused" (Adam's implementation)."""
import sys

import torch
from torch.utils.checkpoint import checkpoint

reentrant, implementation = sys.argv[1] == "reentrant", sys.argv[2]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(256, 1024)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(1024, 256)

    def forward(self, x):
        return x + self.down(self.act(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(4))
        self.head = torch.nn.Linear(256, 1)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=reentrant)
        return self.head(x).square().mean()


net = Net().cuda()
optimizer = torch.optim.Adam(net.parameters(), foreach=implementation == "foreach",
                             fused=implementation == "fused")
# Re-entrant checkpointing needs an input that requires grad to run backward through a block.
x = torch.randn(4096, 256, device="cuda", requires_grad=reentrant)
for _ in range(2):
    optimizer.zero_grad()
    net(x).backward()
    optimizer.step()
print("trained")
