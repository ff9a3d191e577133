"""The demo's model: a small GPT-style decoder in plain torch.nn, its inference traced on a GPU
(or the simulated one) and predicted on the CPU, in one report.

    python tools/demo/tiny_gpt.py trace [DIR]            (on a GPU or a simulated one, with a
                                                          CUDA build of torch: writes
                                                          DIR/tiny_gpt.bin)
    python3 tools/demo/tiny_gpt.py predict DEVICE [DIR]  (with the torch memtrace-estimate was
                                                          built against: writes
                                                          DIR/tiny_gpt.estimate.json and prints
                                                          the report of both)

DIR is the current directory by default; paths are used as given (the report prints them so).

Tracing: mem_tracer.switch_allocator(), the model on the device, one forward under no_grad."""
import math
import os
import sys

import torch
from torch import nn

import mem_tracer

BATCH, TOKENS, WIDTH, HEADS, LAYERS, VOCABULARY = 4, 256, 256, 4, 4, 8000


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = HEADS
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.register_buffer("causal", torch.ones(TOKENS, TOKENS, dtype=torch.bool).triu(1))

    def forward(self, x):
        batch, tokens, width = x.shape
        head_width = width // self.heads
        q, k, v = self.qkv(x).split(width, dim=2)
        q = q.view(batch, tokens, self.heads, head_width).transpose(1, 2)
        k = k.view(batch, tokens, self.heads, head_width).transpose(1, 2)
        v = v.view(batch, tokens, self.heads, head_width).transpose(1, 2)
        scores = (q @ k.transpose(2, 3)) / math.sqrt(head_width)
        scores = scores.masked_fill(self.causal[:tokens, :tokens], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(batch, tokens, width)
        return self.proj(context)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.attention = Attention()
        self.norm2 = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        hidden = torch.nn.functional.gelu(self.up(self.norm2(x)))
        return x + self.down(hidden)


class TinyGpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.head = nn.Linear(WIDTH, VOCABULARY)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def built():
    torch.manual_seed(0)
    return TinyGpt().eval(), torch.randint(0, VOCABULARY, (BATCH, TOKENS))


def trace(path):
    mem_tracer.switch_allocator()
    model, tokens = built()
    model, tokens = model.cuda(), tokens.cuda()
    with mem_tracer.trace(path, model=model), torch.no_grad():
        model(tokens)


def predict(path, device):
    model, tokens = built()
    # Recorded on fake tensors, estimate()'s default: nothing TorchScript, which torch
    # deprecates, runs on the demo's path (Note [Choosing the front end] in
    # mem_tracer/estimator/estimate.py).
    prediction = mem_tracer.estimate(model, (tokens,), budget="24GiB", device=device,
                                     output=os.path.join(os.path.dirname(path),
                                                         "tiny_gpt.estimate.json"))
    print(f"$ mem_tracer.estimate(model, (tokens,), device={device!r}): "
          f"{prediction.method_note}; "
          f"weights {prediction.weight_bytes / 2**20:.2f} MiB, activations at their peak "
          f"{prediction.activation_peak_bytes / 2**20:.2f} MiB; the largest batch for 24 GiB: "
          f"{prediction.largest_batch}\n")
    print("$ mem_tracer.report_stats(top=8, predict=prediction)")
    mem_tracer.report_stats(top=8, predict=prediction, trace=path)
    print("\n$ mem_tracer.report_data(group_by=\"module\"): live at the peak, by nn.Module")
    for row in mem_tracer.report_data(top=6, group_by="module", trace=path)["live"]["rows"]:
        print(f"  {row['bytes'] / 2**20:8.2f} MiB  {row['location']}")


if sys.argv[1:2] == ["trace"]:
    trace(os.path.join(sys.argv[2] if len(sys.argv) > 2 else ".", "tiny_gpt.bin"))
else:
    predict(os.path.join(sys.argv[3] if len(sys.argv) > 3 else ".", "tiny_gpt.bin"),
            sys.argv[2] if len(sys.argv) > 2 else "auto")
