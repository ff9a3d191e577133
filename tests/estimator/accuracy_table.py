"""Prints the CPU ground-truth table of docs/accuracy.md: the predicted activation peak of each
semantics against the peak the live-storage tracker measures, for the test models (scripted
and traced, batches 1 and 3) and for full-size ResNet-50 and GPT-2 small.

    python3 tests/estimator/accuracy_table.py [--build BUILD_DIR] [--quick]

--quick leaves out the two full-size models (about a minute on 2 cores).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402
from memory_tracker import measure  # noqa: E402

FULL_SIZE = {
    # name: (constructor, input maker, batches)
    "resnet50": (
        lambda: models.ResNetLike(layers=(3, 4, 6, 3), width=64, classes=1000),
        lambda batch: torch.randn(batch, 3, 224, 224),
        (1, 2),
    ),
    "gpt2-small": (
        lambda: models.GPT2Like(vocabulary=50257, embedding=768, heads=12, layers=12, context=1024),
        lambda batch: torch.randint(0, 50257, (batch, 1024)),
        (1,),
    ),
}


def predict(binary, path, example, batches, semantics):
    result = subprocess.run(
        [binary, path, "--input", models.input_argument(example), "--batch",
         ",".join(map(str, batches)), "--semantics", semantics, "--format", "json"],
        capture_output=True, text=True, check=True)
    sweep = json.loads(result.stdout)["sweep"]
    return {point["batch"]: point["summary"]["activation_peak_requested_bytes"] for point in sweep}


def rows_for(binary, name, model, make_input, batches, directory):
    model = model.eval()
    rows = []
    paths = {}
    paths["scripted"] = os.path.join(directory, f"{name}_scripted.pt")
    torch.jit.script(model).save(paths["scripted"])
    paths["traced"] = os.path.join(directory, f"{name}_traced.pt")
    with torch.no_grad():
        torch.jit.trace(model, make_input(1), check_trace=False).save(paths["traced"])
    eager = {batch: measure(model, make_input(batch)).peak for batch in batches}
    for export, path in paths.items():
        loaded = torch.jit.load(path)
        interpreted = {}
        for batch in batches:
            for _ in range(3):  # let the profiling executor settle
                measure(loaded, make_input(batch))
            interpreted[batch] = measure(loaded, make_input(batch)).peak
        for semantics, truth in (("eager", eager), ("torchscript", interpreted)):
            predicted = predict(binary, path, make_input(1), batches, semantics)
            for batch in batches:
                rows.append((name, export, batch, semantics, predicted[batch], truth[batch]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(Path(__file__).resolve().parents[2] / "build"))
    parser.add_argument("--quick", action="store_true")
    arguments = parser.parse_args()
    binary = str(Path(arguments.build) / "bin" / "memtrace-estimate")
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for name in models.MODELS:
            rows += rows_for(binary, name, models.make_model(name),
                             lambda batch, name=name: models.make_input(name, batch), (1, 3),
                             directory)
        if not arguments.quick:
            for name, (make_model, make_input, batches) in FULL_SIZE.items():
                torch.manual_seed(0)
                rows += rows_for(binary, name, make_model(), make_input, batches, directory)
    print("| model | export | batch | semantics | predicted (bytes) | measured (bytes) | error |")
    print("|---|---|---:|---|---:|---:|---:|")
    worst = 0.0
    for name, export, batch, semantics, predicted, measured in rows:
        error = 100.0 * (predicted - measured) / measured
        worst = max(worst, abs(error))
        print(f"| {name} | {export} | {batch} | {semantics} | {predicted:,} | {measured:,} | "
              f"{error:+.2f} % |")
    print(f"\nlargest error: {worst:.2f} % over {len(rows)} comparisons")


if __name__ == "__main__":
    main()
