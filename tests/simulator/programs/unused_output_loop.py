"""A training loop whose model returns an output the loss does not use (a detection or
segmentation model's auxiliary outputs, a language model's hidden states beside its logits): the
unused branch ends in ops that save their own output for backward (relu, softmax, tanh). Backward
never reaches those nodes, so what they saved dies with the unused output when the step's names
are rebound. A saved-tensors pack hook that returns the tensor itself closes a cycle (tensor ->
grad_fn -> the packed tensor) that Python's garbage collector does not see, and keeps every
step's unused outputs alive: memtrace's training hooks did (5.24 MiB more a step on maskformer's
loop). Traced by `memtrace run` the counters must be the untraced run's to the byte."""
import torch
from torch import nn


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(256, 512)
        self.head = nn.Linear(512, 10)
        self.aux = nn.Linear(512, 512)

    def forward(self, x):
        hidden = torch.relu(self.body(x))
        # The auxiliary branch: relu, softmax and tanh each save their own output.
        aux = torch.tanh(torch.softmax(torch.relu(self.aux(hidden)), dim=-1))
        return self.head(hidden), aux


def main():
    torch.manual_seed(0)
    model = TwoHeads().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(4):
        x = torch.randn(512, 256, device="cuda")
        logits, _aux = model(x)
        loss = logits.float().pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
