"""A convolutional network trained from a DataLoader with two worker processes and pinned
memory, in a function, as most vision training scripts are written (tests/simulator/
test_unchanged.py)."""
import torch
from torch import nn


class Images(torch.utils.data.Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        return torch.randn(3, 64, 64, generator=generator), index % 10


def train(loader, model, optimizer, device):
    model.train()
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Images(), batch_size=16, num_workers=2, pin_memory=True)
    for _ in range(2):
        train(loader, model, optimizer, device)


if __name__ == "__main__":
    main()
