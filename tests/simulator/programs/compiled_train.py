"""A model compiled with torch.compile (inductor), trained for two steps in a function
(tests/simulator/test_unchanged.py)."""
import torch
from torch import nn


def train(compiled, optimizer, x):
    for _ in range(2):
        loss = compiled(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 2048), nn.GELU(), nn.Linear(2048, 256)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(torch.compile(model), optimizer, torch.randn(1024, 256, device="cuda"))


if __name__ == "__main__":
    main()
