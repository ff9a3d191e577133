"""Compares memtrace-estimate with PyTorch's CUDA caching allocator on a real GPU.

For each test model (and full-size ResNet-50), each export, semantics and batch size, a fresh
process runs one forward pass on the GPU untraced, after torch.cuda.reset_peak_memory_stats(),
and reports torch.cuda.max_memory_allocated() and memory_stats()["requested_bytes.all.peak"];
the estimator predicts both (peak_allocated_bytes, peak_requested_bytes) with the device
profile that matches the GPU. Prints a Markdown table; exits 1 if any error is over the 3 %
budget. A fresh process per measurement, because the estimate is for the first forward of a
process (the cuBLAS workspace is allocated once per process).

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


def measured(name, semantics, path, batch):
    result = subprocess.run(
        [sys.executable, __file__, "--worker", name, semantics, path, str(batch)],
        capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def predicted(binary, path, example, batches, semantics, profile):
    result = subprocess.run(
        [binary, path, "--input", models.input_argument(example), "--batch",
         ",".join(map(str, batches)), "--semantics", semantics, "--device", profile,
         "--format", "json"],
        capture_output=True, text=True, check=True)
    return {point["batch"]: point["summary"] for point in json.loads(result.stdout)["sweep"]}


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
          "| predicted requested | measured requested | error |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as directory:
        for name in [*models.MODELS, *FULL_SIZE]:
            module, make_input = make(name)
            paths = {"scripted": os.path.join(directory, f"{name}_scripted.pt"),
                     "traced": os.path.join(directory, f"{name}_traced.pt")}
            torch.jit.script(module).save(paths["scripted"])
            with torch.no_grad():
                torch.jit.trace(module, make_input(1), check_trace=False).save(paths["traced"])
            for export, path in paths.items():
                for semantics in ("eager", "torchscript"):
                    guesses = predicted(binary, path, make_input(1), batches, semantics, profile)
                    for batch in batches:
                        truth = measured(name, semantics, path, batch)
                        guess = guesses[batch]
                        errors = []
                        for key, field in (("allocated", "peak_allocated_bytes"),
                                           ("requested", "peak_requested_bytes")):
                            errors.append(100.0 * (guess[field] - truth[key]) / truth[key])
                        worst = max(worst, *map(abs, errors))
                        print(f"| {name} | {export} | {batch} | {semantics} "
                              f"| {guess['peak_allocated_bytes']:,} | {truth['allocated']:,} "
                              f"| {errors[0]:+.2f} % | {guess['peak_requested_bytes']:,} "
                              f"| {truth['requested']:,} | {errors[1]:+.2f} % |")
    print(f"\nlargest error: {worst:.2f} % (budget {100 * BUDGET:.0f} %)")
    return 1 if worst > 100 * BUDGET else 0


if __name__ == "__main__":
    sys.exit(main())
