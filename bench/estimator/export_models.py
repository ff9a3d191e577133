"""Writes the models memtrace-estimate-bench times, into the directory given:
ResNet-50 (torchvision's layout: bottlenecks 3-4-6-3, width 64, 1000 classes, 25.6 M parameters)
and GPT-2 small (12 layers, 768 wide, 12 heads, 50257-token vocabulary, 1024 context,
124 M parameters), each scripted and traced, with random weights.

    python3 bench/estimator/export_models.py DIR
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "estimator"))
import models  # noqa: E402


def main(directory):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    resnet = models.ResNetLike(layers=(3, 4, 6, 3), width=64, classes=1000).eval()
    gpt2 = models.GPT2Like(vocabulary=50257, embedding=768, heads=12, layers=12, context=1024).eval()
    for name, model, example in [
        ("resnet50", resnet, torch.randn(1, 3, 224, 224)),
        ("gpt2", gpt2, torch.randint(0, 50257, (1, 1024))),
    ]:
        torch.jit.script(model).save(str(directory / f"{name}_scripted.pt"))
        with torch.no_grad():
            torch.jit.trace(model, example, check_trace=False).save(str(directory / f"{name}_traced.pt"))
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main(sys.argv[1])
