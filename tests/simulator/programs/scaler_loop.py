"""A plain training loop with a GradScaler, for tests/simulator/test_library_loop.py:
scripts/parallel_step.py's 3-Linear MLP (21 M parameters), AdamW, three steps written as
mem_tracer.TrainingStep's default loop writes them (`out = model(x); loss = loss_of(out)`,
backward through `scaler.scale(loss)`, `scaler.step(optimizer)`, `scaler.update()`,
zero_grad(set_to_none=True)).

    python scaler_loop.py                 (on a CUDA device: `memtrace run --gpu h100 ...`)
    python scaler_loop.py predict OUTPUT  (mem_tracer.estimate of the same step for cuda-sm90,
                                           its JSON to OUTPUT)"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import parallel_step  # noqa: E402


def loss_of(output):
    return output.sum()


def train():
    network = parallel_step.model().cuda().train()
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    x = parallel_step.example(device="cuda")
    for _ in range(3):
        out = network(x)
        loss = loss_of(out)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    print("trained")


def predict(output):
    import mem_tracer
    model = parallel_step.model().train()
    step = mem_tracer.TrainingStep(optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
                                   loss_fn=loss_of, scaler=True)
    estimate = mem_tracer.estimate(model, (parallel_step.example(),), training=step,
                                   device="cuda-sm90")
    Path(output).write_text(json.dumps(estimate.raw))


if __name__ == "__main__":
    if sys.argv[1:2] == ["predict"]:
        predict(sys.argv[2])
    else:
        train()
