"""What the program determines is known on the simulated card (Note [Known values on the
simulated card] in python/mem_tracer/simulated_gpu/values.py), for
tests/simulator/test_values.py: each check prints `name value`; the lines marked READ read a
value no kernel computed."""
import torch

weights = torch.nn.Linear(64, 64).cuda()
activations = weights(torch.randn(8, 64, device="cuda"))  # unknown: a kernel computes it
ids = torch.tensor([[5, 7, 0, 3], [1, 0, 0, 2]], device="cuda")  # torch.tensor: known
counts = torch.arange(10, device="cuda").reshape(2, 5)
grid = torch.tensor([[1, 2, 3], [2, 2, 2]], device="cuda")  # an image grid: t, h, w a row
placed = torch.zeros(2, 4, device="cuda")
placed[ids > 2] = torch.tensor([1.0, 2.0, 3.0], device="cuda")  # the mask's count, read inside
checks = {
    "item": (counts * 3 + 1).sum().item(),
    "full": bool(torch.full((4,), True, device="cuda").all()),
    "tolist": (ids + 1).tolist(),
    "cpu": counts[1].cpu().tolist(),
    "in_place": counts.add_(1).sum().item(),
    "view": counts.view(-1)[3].item(),
    "nonzero": ids.nonzero().shape[0],
    # Sized and checked by reads of the repeats inside the op (a Qwen-VL grid's h * w, t times).
    "repeat_interleave": torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0]).tolist(),
    "mask": counts[counts > 4].numel(),
    "index_put": placed.sum().item(),
    "where": torch.where(ids > 0, ids, -1).min().item(),
    "or_true": bool(((activations > 0)[:, 0] | torch.ones(8, dtype=torch.bool, device="cuda"))
                    .all()),
    "and_false": bool(((activations > 0)[:, 0] & torch.zeros(8, dtype=torch.bool, device="cuda"))
                      .any()),
    "zeros_like": torch.zeros_like(activations).sum().item(),
    "unknown": bool((activations > 0).any()),  # READ
}
for name, value in checks.items():
    print(name, value)
