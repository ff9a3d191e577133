"""An ImageNet-style training loop written in a function, as pytorch/examples' imagenet/main.py
writes train(): the batch in the function's locals, an unnamed root model called as
`output = model(images)`, a small convolutional network standing for ResNet-50. At its end it
prints PyTorch's own peaks (torch.cuda.memory_stats()) as one JSON line: traced by `memtrace
run` they must be the untraced run's to the byte (issue 48: naming the model by reading the
caller's f_locals kept the first batch alive until train() returned)."""
import json
import time

import torch
from torch import nn

PEAKS = ("requested_bytes.all.peak", "allocated_bytes.all.peak", "reserved_bytes.all.peak")


class Net(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


def train(train_loader, model, criterion, optimizer, device):
    model.train()
    for images, target in train_loader:
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main():
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = Net().to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    # 32 images of 3x112x112 float32 a batch: 4,816,896 bytes each.
    train_loader = [(torch.randn(32, 3, 112, 112), torch.randint(0, 1000, (32,)))
                    for _ in range(3)]
    train(train_loader, model, criterion, optimizer, device)
    stats = torch.cuda.memory_stats()
    print(json.dumps({name: stats[name] for name in PEAKS}))
    # The untraced run ends right after a backward: autograd's device thread may still need the
    # GIL, and a process that ends at once can abort in PyTorch's teardown (Note [Letting
    # autograd's threads finish] in python/mem_tracer/_run.py).
    time.sleep(0.05)


if __name__ == "__main__":
    main()
