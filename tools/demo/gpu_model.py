"""The demo on a GPU: a small transformer's inference in PyTorch, traced with LD_PRELOAD."""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = nn.Sequential(nn.Embedding(32000, 512), nn.TransformerEncoder(layer, 4),
                          nn.Linear(512, 32000)).cuda().eval()
    tokens = torch.randint(0, 32000, (8, 512), device="cuda")
    with torch.no_grad():
        logits = model(tokens)
    torch.cuda.synchronize()
    print(f"logits {tuple(logits.shape)}")


main()
