"""The training steps measured on an H200 (truth-h200.json, "training": docs/gpu-record-h200.md
says how), predicted on this machine's CPU with the `cuda-sm90` profile, the model on the CPU as
a user starts. Imported by test_gpu_training_truth.py; run alone it prints the Markdown table
of docs/accuracy.md ("On a GPU", training):

    python3 tests/estimator/gpu_training_truth.py [--build BUILD_DIR]

What the measured program did, as its figures show it: the model built from transformers'
default config (GPT2LMHeadModel, BertModel), fp32, 128 tokens a row; each of two steps ran
`out = model(ids)[0]` (the logits, the last hidden state: a tensor, since the loss is
`out.float().sum()`), the loss, backward, `optimizer.step()`, `zero_grad(set_to_none=True)`,
and dropped `out` and the loss when the step ended (before step 2 the allocator held 68 MiB
above the weights and the optimizer state: GPT-2's logits, 98 MiB, were not among them; at
the optimizer's peak they were): loop="until-step-end". The optimizer: AdamW with its
defaults (foreach on CUDA), or AdamW(foreach=False).
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
sys.path.insert(0, str(REPOSITORY / "python"))
import mem_tracer  # noqa: E402

TRUTH = HERE / "truth-h200.json"
TOLERANCE = 0.03
SEQUENCE = 128


class FirstOutput(torch.nn.Module):
    """`model(ids)[0]`: what the measured loop named `out`."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids)[0]


def build(name):
    import transformers
    torch.manual_seed(0)
    if name == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
    elif name == "bert":
        model = transformers.BertModel(transformers.BertConfig())
    else:
        raise ValueError(f"no model {name!r} in the GPU truth")
    return FirstOutput(model).train()


def rows():
    return json.loads(TRUTH.read_text())["training"]


def predict(row):
    """The estimate for one measured row (its "config": model/optimizer/autocast/bBATCH)."""
    name, optimizer, autocast, batch = row["config"].split("/")
    assert autocast == "none", row["config"]
    model = build(name)
    ids = torch.randint(0, model.model.config.vocab_size, (int(batch[1:]), SEQUENCE))
    settings = {"foreach": False} if optimizer == "adamw-loop" else {}
    return mem_tracer.estimate(model, (ids,), training=True, device="cuda-sm90",
                               optimizer=torch.optim.AdamW(model.parameters(), **settings),
                               loop="until-step-end")


def error(estimate, row):
    return (estimate.peak_allocated_bytes - row["max_allocated"]) / row["max_allocated"]


def markdown(results):
    mib = lambda size: f"{size / 2**20:,.2f}"  # noqa: E731
    lines = ["| configuration | optimizer | measured max_memory_allocated (MiB), phase "
             "| predicted (MiB), phase | error |",
             "|---|---|---:|---:|---:|"]
    for row, estimate in results:
        lines.append(f"| {row['config']} | {row['optimizer']} ({estimate.optimizer_implementation}) "
                     f"| {mib(row['max_allocated'])}, {row['peak_phase']} "
                     f"| {mib(estimate.peak_allocated_bytes)}, {estimate.training_peak_phase} "
                     f"| {100 * error(estimate, row):+.2f} % |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.environ.get("MEMTRACE_BUILD_DIR",
                                                          str(REPOSITORY / "build")))
    arguments = parser.parse_args()
    os.environ["MEMTRACE_BIN_DIR"] = str(Path(arguments.build) / "bin")
    print(markdown([(row, predict(row)) for row in rows()]))
    print(f"\ntorch {torch.__version__}")


if __name__ == "__main__":
    main()
