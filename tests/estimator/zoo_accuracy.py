"""The estimator on the real-model zoo (zoo.py) against the CPU ground truth (memory_tracker.py).

    python3 tests/estimator/zoo_accuracy.py [--build BUILD_DIR] [--csv FILE] [--only NAME,...]

For every zoo model: export by torch.jit.script (where it scripts) and by
torch.jit.trace(strict=False) (mem_tracer.estimate's trace_model, which also takes keyword
inputs and ModelOutput results), then at batches 1 and 3 and both semantics compare the
predicted activation peak with the live-storage peak measured on the CPU: `eager` against the
nn.Module run by Python, `torchscript` against the exported module run by the interpreter.
Prints a Markdown table and writes a CSV. A row whose export, measurement or estimate fails is
a row with its one-line error; the run itself never stops on one.

Each row gets a status: `ok` (within the bar), `flagged` (off, but the estimator said the
figure is a lower bound and it is one, or made an assumption), `silent` (off with nothing said:
the estimator's bug), `refused` (the estimator exited with a clear error), `cannot run` (the
estimator refused and the ground truth failed too: both say the graph cannot run at these
shapes), `not scriptable`
(torch.jit.script does not take the model, as it takes no transformers model: the issue asks
for the scripted export "where it scripts", so this is no row to compare, and no failure),
`error` (the trace or the ground truth failed; not the estimator's verdict).
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPOSITORY / "python"))
import models  # noqa: E402
import zoo  # noqa: E402
from memory_tracker import measure_call  # noqa: E402
from mem_tracer.estimator import example_counts  # noqa: E402
from mem_tracer.estimator.estimate import trace_model  # noqa: E402

BATCHES = (1, 3)
SEMANTICS = ("eager", "torchscript")
TOLERANCE = 0.03  # the bar for real models


@dataclass
class Row:
    model: str
    export: str
    batch: int | None = None
    semantics: str | None = None
    predicted: int | None = None
    measured: int | None = None
    error_pct: float | None = None
    flags: list[str] = field(default_factory=list)
    # The eager figure's bracket, (low, high), when the estimator says it is approximate.
    bracket: tuple[int, int] | None = None
    status: str = "error"
    message: str = ""

    @property
    def key(self):
        return f"{self.model}/{self.export}/b{self.batch}/{self.semantics}"


def one_line(error):
    text = str(error).strip()
    line = text.splitlines()[-1] if isinstance(error, EstimatorError) else (
        text.splitlines()[0] if text else "")
    return f"{type(error).__name__}: {line}"[:300]


class EstimatorError(Exception):
    def __init__(self, message, internal):
        super().__init__(message)
        self.internal = internal  # exit status 1 (or a crash): the estimator's own bug


def device_arguments(binary):
    """`--device cpu` where the tool has a CPU profile; else the default (as test_accuracy)."""
    result = subprocess.run([binary, "--list-devices"], capture_output=True, text=True)
    names = {line.split(":")[0] for line in result.stdout.splitlines() if line.strip()}
    return ["--device", "cpu"] if "cpu" in names else []


def estimate(binary, path, tensors, semantics, device):
    command = [binary, str(path), *(a for t in tensors for a in ("--input", models.input_argument(t))),
               "--semantics", semantics, "--format", "json", *device]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
        raise EstimatorError(f"exit {result.returncode}: {message}", result.returncode != 2)
    return json.loads(result.stdout)


def flags_of(document):
    """What the estimator itself says about how far to trust the figure."""
    flags = []
    if document.get("lower_bound"):
        flags.append("lower bound")
    for op in document.get("unknown_ops", []):
        flags.append(f"unsized {op['op']} x{op.get('count', 1)}")
    kinds = {}
    for assumption in document.get("assumptions", []):
        kinds[assumption["kind"]] = kinds.get(assumption["kind"], 0) + 1
    flags += [f"assumed {kind} x{count}" for kind, count in kinds.items()]
    for warning in document.get("warnings", []):
        flags.append(f"warning {warning if isinstance(warning, str) else json.dumps(warning)}")
    return flags


def classify(row, document):
    measured, predicted = row.measured, row.predicted
    row.error_pct = 100.0 * (predicted - measured) / measured if measured else (
        0.0 if predicted == 0 else float("inf"))
    if abs(row.error_pct) <= 100 * TOLERANCE:
        row.status = "ok"
    elif document.get("assumptions") or (document.get("lower_bound") and predicted <= measured):
        row.status = "flagged"
    else:
        row.status = "silent"


def positional(args, kwargs):
    """The call's tensors in the order trace_model gives the traced forward."""
    return [*args, *(v for v in kwargs.values() if isinstance(v, torch.Tensor))]


def export(entry, kind, directory):
    """(path, inputs maker) of the saved TorchScript module."""
    model = entry.build()
    path = Path(directory) / f"{entry.name}_{kind}.pt"
    args, kwargs = entry.example(1)
    if kind == "scripted":
        torch.jit.script(model).save(str(path))
    else:
        traced, _, _ = trace_model(model, args, kwargs)
        traced.save(str(path))
    return path


def measured_peak(module, args, warm_up):
    for _ in range(warm_up):  # the profiling executor settles its plan over the first runs
        measure_call(module, args, {})
    return measure_call(module, args, {}).peak


def counts_arguments(entry, batch, directory):
    """--example-counts for the batch's example, as mem_tracer.estimate passes them: how many
    elements each data-dependent selection (nonzero, boolean mask) picked on it."""
    args, kwargs = entry.example(batch)
    model = entry.build()
    try:
        counts = example_counts.record(lambda: model(*args, **kwargs))
    except Exception:  # noqa: BLE001 - those sizes stay unknown, and the estimate says so
        return []
    if not counts:
        return []
    path = Path(directory) / f"{entry.name}_b{batch}_counts.txt"
    example_counts.write(counts, path)
    return ["--example-counts", str(path)]


def rows_for(binary, entry, directory, device):
    rows = []
    eager = {}
    counts = {}
    for batch in BATCHES:
        counts[batch] = counts_arguments(entry, batch, directory)
        try:
            args, kwargs = entry.example(batch)
            eager[batch] = measure_call(entry.build(), args, kwargs).peak
        except Exception as error:  # noqa: BLE001 - a failing row is a row
            eager[batch] = error
    for kind in ("scripted", "traced"):
        try:
            path = export(entry, kind, directory)
        except Exception as error:  # noqa: BLE001
            if kind == "scripted":
                rows.append(Row(entry.name, kind, status="not scriptable",
                                message=f"torch.jit.script: {one_line(error)}"))
            else:
                rows.append(Row(entry.name, kind, message=f"export failed: {one_line(error)}"))
            continue
        loaded = torch.jit.load(str(path)).train(entry.train)
        for batch in BATCHES:
            tensors = positional(*entry.example(batch))
            try:
                interpreted = measured_peak(loaded, tensors, 3)
            except Exception as error:  # noqa: BLE001
                interpreted = error
            for semantics in SEMANTICS:
                row = Row(entry.name, kind, batch, semantics)
                rows.append(row)
                truth = eager[batch] if semantics == "eager" else interpreted
                try:
                    document = estimate(binary, path, tensors, semantics,
                                        [*device, *counts[batch]])
                    row.predicted = document["summary"]["activation_peak_requested_bytes"]
                    row.flags = flags_of(document)
                    if document.get("eager_approximate"):
                        approximate = document["eager_approximate"]
                        row.bracket = (approximate["activation_peak_low_bytes"],
                                       approximate["activation_peak_high_bytes"])
                except EstimatorError as error:
                    row.status = "crashed" if error.internal else "refused"
                    row.message = str(error)  # the estimator's one line, whole
                    if not error.internal and isinstance(truth, Exception):
                        # Both say this graph cannot run at these shapes: they agree.
                        row.status = "cannot run"
                        row.message += f"; ground truth: {one_line(truth)}"[:200]
                    continue
                except Exception as error:  # noqa: BLE001
                    row.message = f"estimate failed: {one_line(error)}"
                    continue
                if isinstance(truth, Exception):
                    row.message = f"ground truth failed: {one_line(truth)}"
                    continue
                row.measured = truth
                classify(row, document)
    return rows


def run_zoo(binary, names=None):
    device = device_arguments(binary)
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoo-") as directory:
        for name, entry in zoo.ZOO.items():
            if names and name not in names:
                continue
            try:
                rows += rows_for(binary, entry, directory, device)
            except Exception as error:  # noqa: BLE001 - never stop the table on one model
                rows.append(Row(name, "-", message=f"failed: {one_line(error)}"))
    return rows, device


def markdown(rows):
    lines = ["| model | export | batch | semantics | predicted (bytes) | measured (bytes) | error | "
             "status | estimator's flags / error |",
             "|---|---|---:|---|---:|---:|---:|---|---|"]

    def number(value):
        return "" if value is None else f"{value:,}"

    for row in rows:
        error = "" if row.error_pct is None else f"{row.error_pct:+.2f} %"
        bracket = [f"eager bracket {row.bracket[0]:,} to {row.bracket[1]:,}"] if row.bracket else []
        said = "; ".join(row.flags + bracket + ([row.message] if row.message else []))
        said = said.replace("|", "\\|")
        lines.append(f"| {row.model} | {row.export} | {row.batch or ''} | {row.semantics or ''} | "
                     f"{number(row.predicted)} | {number(row.measured)} | {error} | {row.status} | "
                     f"{said} |")
    counts = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    return "\n".join(lines) + f"\n\n{len(rows)} rows: {summary}"


def write_csv(rows, path):
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(asdict(rows[0]).keys()) if rows else ["model"])
        writer.writeheader()
        for row in rows:
            record = asdict(row)
            record["flags"] = "; ".join(row.flags)
            writer.writerow(record)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.environ.get("MEMTRACE_BUILD_DIR",
                                                          str(REPOSITORY / "build")))
    parser.add_argument("--csv", default=str(REPOSITORY / "docs" / "zoo_accuracy.csv"))
    parser.add_argument("--only", default="", help="comma-separated zoo names")
    arguments = parser.parse_args()
    binary = str(Path(arguments.build) / "bin" / "memtrace-estimate")
    started = time.monotonic()
    rows, device = run_zoo(binary, set(filter(None, arguments.only.split(","))))
    print(markdown(rows))
    print(f"\nprofile: {' '.join(device) or 'default (cuda)'}; "
          f"{time.monotonic() - started:.0f} s; torch {torch.__version__}")
    write_csv(rows, arguments.csv)


if __name__ == "__main__":
    main()
