"""The estimator's zoo GPT-2 (tests/estimator/zoo.py, gpt2-sdpa) on the simulated card, traced
or predicted, for test_module_cells.py: its inference (under no_grad) and three training steps
(AdamW, the loop TrainingStep assumes by default: `out = model(...); loss = f(out, y)`, then
backward, the optimizer's step and zero_grad(set_to_none=True)).

    python module_cells.py trace DIR      (PyTorch's CUDA build, on the simulated card:
                                          DIR/inference.bin, DIR/training.bin)
    python module_cells.py predict DIR    (DIR/inference.json, DIR/training.json: estimate()
                                          for cuda-sm90, the simulated H200's profile)

The model is called through Caller, as tests/simulator/scripts/zoo_lines.py does (the trace
names it `model`, the estimate its modules from Caller down). Between the two traces the
cuBLAS workspaces are given back, so that each takes them as a fresh process would, as the
estimate assumes."""
import gc
import os
import sys
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "estimator"))
from zoo_lines import Caller, on_the_card  # noqa: E402

import mem_tracer  # noqa: E402
import zoo  # noqa: E402

NAME, BATCH, STEPS = "gpt2-sdpa", 2, 3


def built(training):
    entry = zoo.ZOO[NAME]
    model = entry.build()
    model.train(training)
    torch.manual_seed(1)
    inputs = dict(entry.inputs(BATCH))
    return Caller(model, entry.positional), inputs


def loss_of(output, targets):
    return nn.functional.cross_entropy(output.logits.flatten(0, 1).float(), targets.flatten())


def targets_of(inputs):
    return inputs["input_ids"].clone()


def trace(directory):
    on_the_card()  # the card's known values: GPT-2's position ids as a real GPU has them
    caller, inputs = built(training=False)
    caller = caller.cuda()
    inputs = {key: value.cuda() for key, value in inputs.items()}
    with mem_tracer.trace(os.path.join(directory, "inference.bin"), model=caller), torch.no_grad():
        caller(**inputs)
    caller = inputs = None
    gc.collect()
    torch._C._cuda_clearCublasWorkspaces()

    caller, inputs = built(training=True)
    caller = caller.cuda()
    inputs = {key: value.cuda() for key, value in inputs.items()}
    targets = targets_of(inputs)
    optimizer = torch.optim.AdamW(caller.parameters())
    with mem_tracer.trace(os.path.join(directory, "training.bin"), model=caller):
        for _ in range(STEPS):
            out = caller(**inputs)
            loss = loss_of(out, targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def predict(directory):
    caller, inputs = built(training=False)
    with torch.no_grad():
        mem_tracer.estimate(caller, inputs, device="cuda-sm90", method="record",
                            output=os.path.join(directory, "inference.json"))
    caller, inputs = built(training=True)
    step = mem_tracer.TrainingStep(optimizer=torch.optim.AdamW(caller.parameters()),
                                   loss_fn=loss_of, targets=(targets_of(inputs),))
    mem_tracer.estimate(caller, inputs, training=step, device="cuda-sm90",
                        output=os.path.join(directory, "training.json"))


if __name__ == "__main__":
    {"trace": trace, "predict": predict}[sys.argv[1]](sys.argv[2])
