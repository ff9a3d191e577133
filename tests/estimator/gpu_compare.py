"""Compares memtrace-estimate with PyTorch's CUDA caching allocator on a real GPU.

For each test model (and full-size ResNet-50), each export, semantics and batch size, a fresh
process runs one forward pass on the GPU untraced, after torch.cuda.reset_peak_memory_stats(),
and reports torch.cuda.max_memory_allocated() and memory_stats()["requested_bytes.all.peak"];
the estimator predicts both (peak_allocated_bytes, peak_requested_bytes) with the device
profile that matches the GPU. Prints a Markdown table; exits 1 if any error is over the 3 %
budget. A fresh process per measurement, because the estimate is for the first forward of a
process (the cuBLAS workspace is allocated once per process).

The traces are made on the GPU (a trace made on the CPU holds device=cpu constants and
cannot run there). A row that fails (an export, the estimator, or the measuring worker) is
still a row: its error, the last line of what failed, stands in its cells, and it counts as
over the budget.

Without a CUDA device it says so and compares nothing (exit status 0, no table). It is not
part of ctest, so that a machine without a GPU never counts it as a passing test.

    python3 tests/estimator/gpu_compare.py [--build BUILD_DIR] [--batches 1,3]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import models  # noqa: E402

BUDGET = 0.03  # the accuracy budget on a GPU

FULL_SIZE = {
    "resnet50": (lambda: models.ResNetLike(layers=(3, 4, 6, 3), width=64, classes=1000),
                 lambda batch: torch.randn(batch, 3, 224, 224)),
}


def make(name):
    if name in FULL_SIZE:
        torch.manual_seed(0)
        return FULL_SIZE[name][0]().eval(), FULL_SIZE[name][1]
    return models.make_model(name), lambda batch: models.make_input(name, batch)


def worker(name, semantics, path, batch):
    """One measurement, in a process of its own; prints a JSON line."""
    _, make_input = make(name)
    example = make_input(batch).cuda()
    if semantics == "eager":
        module, _ = make(name)
        module = module.cuda()
    else:
        module = torch.jit.load(path, map_location="cuda")
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        output = module(example)
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    print(json.dumps({
        "baseline": baseline,
        "allocated": torch.cuda.max_memory_allocated(),
        "requested": stats["requested_bytes.all.peak"],
        "reserved": torch.cuda.max_memory_reserved(),
    }))
    del output


class RowError(Exception):
    """One row's failure, in a line."""


def last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def checked(command):
    """Runs a command; its stdout, or RowError with the last line of its stderr."""
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        program = Path(command[1] if command[0] == sys.executable else command[0]).name
        raise RowError(f"{program} exited {result.returncode}: "
                       f"{last_line(result.stderr or result.stdout)}")
    return result.stdout


def measured(name, semantics, path, batch):
    output = checked([sys.executable, __file__, "--worker", name, semantics, path, str(batch)])
    return json.loads(output.strip().splitlines()[-1])


def predicted(binary, path, example, batches, semantics, profile):
    output = checked([binary, path, "--input", models.input_argument(example), "--batch",
                      ",".join(map(str, batches)), "--semantics", semantics, "--device", profile,
                      "--format", "json"])
    return {point["batch"]: point["summary"] for point in json.loads(output)["sweep"]}


def export(module, make_input, directory, name):
    """{"scripted": path or RowError, "traced": path or RowError}; the trace is made on the GPU."""
    paths = {}
    for kind in ("scripted", "traced"):
        path = os.path.join(directory, f"{name}_{kind}.pt")
        try:
            if kind == "scripted":
                torch.jit.script(module).save(path)
            else:
                with torch.no_grad():
                    torch.jit.trace(module.cuda(), make_input(1).cuda(),
                                    check_trace=False).save(path)
                module.cpu()
            paths[kind] = path
        except Exception as error:  # noqa: BLE001 - the row says why
            paths[kind] = RowError(f"{kind}: {last_line(str(error)) or type(error).__name__}")
    return paths


FIELDS = (("allocated", "peak_allocated_bytes"), ("requested", "peak_requested_bytes"),
          ("reserved", "peak_reserved_bytes"))


def row(name, export_kind, batch, semantics, guess, truth):
    """A table row and its largest error (inf for a row that failed)."""
    cells = [name, export_kind, str(batch), semantics]
    if isinstance(guess, Exception) or isinstance(truth, Exception):
        error = guess if isinstance(guess, Exception) else truth
        return "| " + " | ".join(cells + [f"error: {error}"] + [""] * 8) + " |", float("inf")
    worst = 0.0
    for key, field in FIELDS:
        error = 100.0 * (guess[field] - truth[key]) / truth[key]
        if key != "reserved":  # reserved is shown, not held to the budget
            worst = max(worst, abs(error))
        cells += [f"{guess[field]:,}", f"{truth[key]:,}", f"{error:+.2f} %"]
    return "| " + " | ".join(cells) + " |", worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(HERE.parents[1] / "build"))
    parser.add_argument("--batches", default="1,3")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        name, semantics, path, batch = arguments.worker
        return worker(name, semantics, path, int(batch))
    if not torch.cuda.is_available():
        print("no CUDA device: nothing compared (run this where a GPU is available)")
        return 0
    major, _ = torch.cuda.get_device_capability()
    profile = "cuda-sm90" if major >= 9 else "cuda"
    binary = str(Path(arguments.build) / "bin" / "memtrace-estimate")
    batches = [int(batch) for batch in arguments.batches.split(",")]
    print(f"device: {torch.cuda.get_device_name()} (profile {profile}), torch {torch.__version__}")
    print("| model | export | batch | semantics | predicted allocated | measured allocated | error "
          "| predicted requested | measured requested | error | predicted reserved "
          "| measured reserved | error |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as directory:
        for name in [*models.MODELS, *FULL_SIZE]:
            module, make_input = make(name)
            for export_kind, path in export(module, make_input, directory, name).items():
                for semantics in ("eager", "torchscript"):
                    try:
                        if isinstance(path, Exception):
                            raise path
                        guesses = predicted(binary, path, make_input(1), batches, semantics,
                                            profile)
                    except RowError as error:
                        guesses = {batch: error for batch in batches}
                    for batch in batches:
                        try:
                            truth = path if isinstance(path, Exception) else measured(
                                name, semantics, path, batch)
                        except RowError as error:
                            truth = error
                        text, error = row(name, export_kind, batch, semantics, guesses[batch], truth)
                        print(text, flush=True)
                        worst = max(worst, error)
    print(f"\nlargest error: {worst:.2f} % (budget {100 * BUDGET:.0f} %; reserved not counted)")
    return 1 if worst > 100 * BUDGET else 0


if __name__ == "__main__":
    sys.exit(main())
