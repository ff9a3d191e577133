"""A plain-torch program that reads device values the four common ways, each on a line the
test finds by its marker comment (test_simulated_traces.py), after a small MLP's forward."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10)).cuda()
x = torch.randn(32, 256, device="cuda")
with torch.no_grad():
    logits = model(x)
loss = logits.sum().item()  # read: item
values = logits[0].tolist()  # read: tolist
indices = torch.nonzero(logits > 0)  # read: nonzero
kept = logits[logits > 0]  # read: mask
print("read", loss, len(values), tuple(indices.shape), tuple(kept.shape))
