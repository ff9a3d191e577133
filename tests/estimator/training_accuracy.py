"""The training-step estimate (mem_tracer.estimate(training=True)) against the CPU ground truth
(training_truth.py), on the test models and the real-model zoo in train mode.

    python3 tests/estimator/training_accuracy.py [--build BUILD_DIR] [--quick] [--only NAME,...]

Each row: one model, an optimizer (SGD with momentum, AdamW), a precision (fp32, or bf16
under torch.autocast), with or without activation checkpointing of the model's blocks
(mem_tracer.checkpoint_modules, as plan() applies it), at batch 2. The predicted training
peak and each of its six categories are compared with the truth's. Prints a Markdown table.
A row whose recording or truth fails is a row with its one-line error.
"""

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPOSITORY / "python"))
import models  # noqa: E402
import zoo  # noqa: E402
from training_truth import measure_step  # noqa: E402

import mem_tracer  # noqa: E402
from mem_tracer._modules import module_blocks  # noqa: E402
from mem_tracer.estimator.step_graph import CATEGORIES  # noqa: E402

TOLERANCE = 0.03
BATCH = 2
OPTIMIZERS = {
    "sgd": lambda parameters: torch.optim.SGD(parameters, lr=0.01, momentum=0.9),
    "adamw": lambda parameters: torch.optim.AdamW(parameters, lr=1e-3),
}
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


@dataclass
class Row:
    model: str
    optimizer: str
    precision: str
    checkpointed: bool
    predicted: int | None = None
    measured: int | None = None
    error_pct: float | None = None
    worst_category: str = ""
    worst_category_pct: float = 0.0
    phase: str = ""
    status: str = "error"
    message: str = ""
    categories: dict = field(default_factory=dict)


def cases():
    """(name, make model, (args, kwargs) at a batch) of every model in the table."""
    for name in models.MODELS:
        yield (f"{name} (models.py)", lambda name=name: models.MODELS[name][0](),
               lambda batch, name=name: ((models.make_input(name, batch),), {}))
    for name, entry in zoo.ZOO.items():
        if name == "transformer-encoder-eval":
            continue  # trained, it is the train row
        yield name, entry.build, entry.example


def measure_row(name, make, example, optimizer_name, precision, checkpointed):
    row = Row(name, optimizer_name, precision, checkpointed)
    try:
        torch.manual_seed(0)
        model = make().train()
        args, kwargs = example(BATCH)
        optimizer = OPTIMIZERS[optimizer_name](model.parameters())
        blocks = module_blocks(model) if checkpointed else []
        prepare = (lambda copy: mem_tracer.checkpoint_modules(copy, blocks)) if blocks else None
        if checkpointed and not blocks:
            row.status, row.message = "n/a", "no blocks to checkpoint"
            return row
        autocast = PRECISIONS[precision]
    except Exception as error:  # noqa: BLE001 - a failing row is a row
        row.message = f"setup: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
        return row
    try:
        truth = measure_step(model, args, kwargs, optimizer=optimizer, autocast=autocast,
                             prepare=prepare)
    except Exception as error:  # noqa: BLE001 - the model cannot train this way
        truth = error
    try:
        from mem_tracer.estimator import step_graph
        from mem_tracer.estimator.estimate import _record_and_estimate
        from mem_tracer.estimator.training_step import RecordedStep, TrainingStep
        import tempfile
        with tempfile.TemporaryDirectory() as work:
            step = RecordedStep.of(TrainingStep(optimizer=optimizer, autocast=autocast))
            document = _record_and_estimate(model, list(args), kwargs, "cpu", step,
                                            Path(work), Path(work) / "estimate.json",
                                            prepare=prepare)
        del step_graph
    except Exception as error:  # noqa: BLE001
        row.status = "refused"
        row.message = str(error).splitlines()[0][:300]
        if isinstance(truth, Exception):
            # Both say the step cannot run: they agree.
            row.status = "cannot run"
            row.message += f"; ground truth: {type(truth).__name__}: {str(truth).splitlines()[0][:150]}"
        return row
    if isinstance(truth, Exception):
        row.message = (f"the estimate gave a figure, the ground truth failed: "
                       f"{type(truth).__name__}: {str(truth).splitlines()[0][:200]}")
        return row
    summary = document["summary"]
    row.predicted = summary["training_peak_bytes"]
    row.measured = truth.peak
    row.phase = f"{document['step']['peak_phase']} / {truth.phase}"
    row.error_pct = 100.0 * (row.predicted - row.measured) / row.measured
    worst = ("", 0.0)
    for category in CATEGORIES:
        predicted = summary["training_breakdown"][category]
        measured = truth.categories[category]
        row.categories[category] = (predicted, measured)
        # Each category within 3 % of the step's peak (a category of a few bytes is not held
        # to 3 % of itself).
        off = 100.0 * abs(predicted - measured) / max(measured, 1)
        relative_to_peak = 100.0 * abs(predicted - measured) / row.measured
        if relative_to_peak > 100 * TOLERANCE or (measured and off > worst[1]):
            worst = max(worst, (category, off), key=lambda pair: pair[1])
    row.worst_category, row.worst_category_pct = worst
    ok_total = abs(row.error_pct) <= 100 * TOLERANCE
    ok_categories = all(abs(p - m) <= TOLERANCE * max(m, 1) or abs(p - m) <= TOLERANCE * row.measured
                        for p, m in row.categories.values())
    row.status = "ok" if ok_total and ok_categories else "off"
    return row


def run(names=None, quick=False):
    rows = []
    for name, make, example in cases():
        if names and name.split(" ")[0] not in names and name not in names:
            continue
        combinations = [("adamw", "fp32", False)] if quick else [
            (optimizer, precision, checkpointed)
            for optimizer in OPTIMIZERS for precision in PRECISIONS
            for checkpointed in (False, True)]
        for optimizer, precision, checkpointed in combinations:
            row = measure_row(name, make, example, optimizer, precision, checkpointed)
            if row.status != "n/a":
                rows.append(row)
    return rows


def markdown(rows):
    lines = ["| model | optimizer | precision | checkpointing | predicted (bytes) | measured (bytes) "
             "| error | worst category | phase (predicted / measured) | status |",
             "|---|---|---|---|---:|---:|---:|---|---|---|"]
    for row in rows:
        number = (lambda value: "" if value is None else f"{value:,}")
        error = "" if row.error_pct is None else f"{row.error_pct:+.2f} %"
        worst = (f"{row.worst_category} {row.worst_category_pct:+.1f} %" if row.worst_category
                 else "all exact" if row.categories and all(p == m for p, m in row.categories.values())
                 else "")
        lines.append(f"| {row.model} | {row.optimizer} | {row.precision} | "
                     f"{'yes' if row.checkpointed else 'no'} | {number(row.predicted)} | "
                     f"{number(row.measured)} | {error} | {worst} | {row.phase} | {row.status}"
                     f"{': ' + row.message if row.message else ''} |")
    lines.append("")
    lines.append(summary(rows))
    return "\n".join(lines)


def summary(rows):
    """The table's last line: how many rows of each status, the median and largest error."""
    counts = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    errors = [abs(row.error_pct) for row in rows if row.error_pct is not None]
    return (f"{len(rows)} rows: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + (f"; median error {statistics.median(errors):.2f} %, largest {max(errors):.2f} %"
               if errors else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.environ.get("MEMTRACE_BUILD_DIR",
                                                          str(REPOSITORY / "build")))
    parser.add_argument("--quick", action="store_true", help="AdamW, fp32, no checkpointing only")
    parser.add_argument("--only", default="", help="comma-separated model names")
    arguments = parser.parse_args()
    os.environ["MEMTRACE_BIN_DIR"] = str(Path(arguments.build) / "bin")
    started = time.monotonic()
    rows = run(set(filter(None, arguments.only.split(","))), arguments.quick)
    print(markdown(rows))
    print(f"\n{time.monotonic() - started:.0f} s; torch {torch.__version__}")


if __name__ == "__main__":
    main()
