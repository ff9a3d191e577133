"""Three training steps of a small model whose forward, on a card, runs kernels with no host kernel
of their own: in fp32 cuDNN's batch norm and the memory-efficient attention
scaled_dot_product_attention picks, in bf16 cuDNN's attention and a batch norm that saves fp32
statistics (Note [Backward through the host's stand-ins] in
python/mem_tracer/simulated_gpu/values.py runs the host's math beside them, forward and backward),
on the device the first argument names; the second says `bf16`, `flash` (bf16 with cuDNN's attention
turned off: flash attention) or `dropout` (fp32, its attention with dropout); for
tests/simulator/test_values.py. Prints one JSON line: each step's loss, and the sum of the weights
after the last step."""
import json
import sys

import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def __init__(self, channels=16, heads=2, dropout=0.0):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, 10)

    def forward(self, x):
        x = F.relu(self.norm(self.conv(x)))  # batch, channels, 8, 8
        x = x.flatten(2).transpose(1, 2)  # batch, 64 positions, channels
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        x = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout)
        return self.out(x.transpose(1, 2).flatten(2).mean(dim=1))


device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
torch.manual_seed(0)
variant = sys.argv[2] if len(sys.argv) > 2 else "fp32"
dtype = torch.bfloat16 if variant in ("bf16", "flash") else torch.float32
if variant == "flash":
    torch.backends.cuda.enable_cudnn_sdp(False)
model = Model(dropout=0.1 if variant == "dropout" else 0.0).to(device, dtype)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
images = torch.randn(8, 3, 8, 8).to(device, dtype)
labels = torch.randint(0, 10, (8,)).to(device)
losses = []
for _ in range(3):
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(round(loss.item(), 4))
weights = sum(float(p.detach().sum()) for p in model.parameters())
print(json.dumps({"losses": losses, "weights": round(weights, 3)}))
