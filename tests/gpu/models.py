"""Small models for the GPU tests, in plain torch.nn, and a driver that runs one in a mode:

    python models.py MODE MODEL OUT.json [TRACE]

MODE: untraced (PyTorch's own allocator), pluggable (memtrace as PyTorch's allocator),
preload (run under LD_PRELOAD=libmemtrace.so). Writes what PyTorch's counters said."""
import ctypes
import json
import os
import sys

import torch
from torch import nn


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1, stride=2), nn.BatchNorm2d(128), nn.ReLU())
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        x = self.features(x)
        return self.head(x.mean(dim=(2, 3)))


class SmallTransformer(nn.Module):
    def __init__(self, vocabulary=1000, width=256, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.out = nn.Linear(width, vocabulary)

    def forward(self, tokens):
        return self.out(self.encoder(self.embed(tokens)))


def build(name):
    torch.manual_seed(0)
    if name == "cnn":
        return SmallCnn(), (torch.randn(8, 3, 64, 64),)
    return SmallTransformer(), (torch.randint(0, 1000, (4, 128)),)


def main():
    mode, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
    trace = sys.argv[4] if len(sys.argv) > 4 else None
    library = None
    if mode == "pluggable":
        library_path = os.environ["MEMTRACE_LIBRARY"]
        allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path, "memtrace_alloc",
                                                             "memtrace_free")
        torch.cuda.memory.change_current_allocator(allocator)
        library = ctypes.CDLL(library_path)
        library.memtrace_start.argtypes = (ctypes.c_char_p,)
        library.memtrace_peak_bytes.restype = ctypes.c_uint64
        assert library.memtrace_start(trace.encode()) == 0
    model, inputs = build(name)
    model = model.cuda().eval()
    inputs = tuple(x.cuda() for x in inputs)
    with torch.no_grad():
        for _ in range(2):
            output = model(*inputs)
            del output
    torch.cuda.synchronize()
    result = {}
    if mode == "pluggable":
        library.memtrace_close()
        result["library_peak"] = library.memtrace_peak_bytes(-1)
    else:
        stats = torch.cuda.memory_stats()
        result["requested_peak"] = stats["requested_bytes.all.peak"]
        result["allocated_peak"] = stats["allocated_bytes.all.peak"]
    with open(out, "w") as file:
        json.dump(result, file)


if __name__ == "__main__":
    main()
