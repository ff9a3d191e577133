"""The estimator, on this CPU, against inference measured on a real GPU: every "inference" row of
truth-h200.json (an H200, torch 2.11.0+cu130, transformers 5.17.0, measured on 2026-11-26 at
commit 776ae1c; docs/gpu-record-h200.md says how).

    python3 tests/estimator/gpu_truth.py [--build BUILD_DIR]      # the table of docs/accuracy.md

Each row is a model the JSON names, built here from its published configuration with random
weights (nothing downloads): GPT-2 small (transformers' GPT2LMHeadModel(GPT2Config()), traced
with use_cache=False), BERT-base (BertModel(BertConfig())) and ResNet-50 (models.ResNetLike with
torchvision's resnet50 layout: torchvision is not needed); the weights in the row's dtype, as
`model.to(dtype)` on the CPU makes them. The trace is made on the CPU at batch 1 and estimated
at the row's batch with the cuda-sm90 profile, for the torch the GPU ran (`--torch 2.11`), and
compared with the row's first forward in a fresh process (`first_forward`): max_allocated,
max_requested and max_reserved. The weights the estimator counts are checked against the
row's own (`weights_bytes`, `allocated_before_forward`): a model built differently from the
measured one is said, not compared.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))
import models  # noqa: E402

TRUTH = HERE / "truth-h200.json"
PROFILE = "cuda-sm90"
BUDGET = 0.03  # the accuracy budget on a GPU
FIELDS = (("max_allocated", "peak_allocated_bytes"), ("max_requested", "peak_requested_bytes"),
          ("max_reserved", "peak_reserved_bytes"))


def truth():
    document = json.loads(TRUTH.read_text())
    return document["env"], document["inference"]


def torch_release(env):
    """"2.11" of the GPU's "2.11.0+cu130"."""
    return ".".join(env["torch"].split("+")[0].split(".")[:2])


def build(name, dtype):
    """(model in `dtype`, example input at batch 1), as the row names them."""
    torch.manual_seed(0)
    if name in ("gpt2", "bert"):
        import transformers

        if name == "gpt2":
            model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
            vocabulary = model.config.vocab_size
        else:
            model = transformers.BertModel(transformers.BertConfig())
            vocabulary = model.config.vocab_size
        example = torch.randint(0, vocabulary, (1, 128))
    elif name == "resnet50":
        model = models.ResNetLike(layers=(3, 4, 6, 3), width=64, classes=1000)
        example = torch.randn(1, 3, 224, 224, dtype=dtype)
    else:
        raise ValueError(f"{TRUTH.name} names a model this script does not build: {name}")
    return model.to(dtype).eval(), example


def export(name, dtype, path):
    """Traces the model at batch 1 on the CPU, as mem_tracer.estimate traces it."""
    from mem_tracer.estimator.estimate import trace_model

    model, example = build(name, dtype)
    keywords = {"use_cache": False} if name == "gpt2" else {}
    traced, _, _ = trace_model(model, (example,), keywords)
    traced.save(str(path))


def predict(binary, path, row, release):
    """The estimator's summary at the row's batch (the trace is at batch 1)."""
    spec = row["estimator_input"]
    result = subprocess.run(
        [str(binary), str(path), "--input", spec, "--batch", str(row["batch"]), "--device",
         PROFILE, "--torch", release, "--format", "json"],
        capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"memtrace-estimate on {path.name}: {result.stderr.strip()}")
    return json.loads(result.stdout)["sweep"][0]["summary"]


def compare(binary, directory):
    """One dict per row: the row, the prediction and the errors (%), in the JSON's order."""
    env, rows = truth()
    release = torch_release(env)
    dtypes = {"fp32": torch.float32, "fp16": torch.float16}
    exported = {}
    results = []
    for row in rows:
        key = (row["model"], row["dtype"])
        if key not in exported:
            exported[key] = Path(directory) / f"{row['model']}-{row['dtype']}.pt"
            export(row["model"], dtypes[row["dtype"]], exported[key])
        summary = predict(binary, exported[key], row, release)
        errors = {measured: 100.0 * (summary[field] - row["first_forward"][measured])
                  / row["first_forward"][measured] for measured, field in FIELDS}
        results.append({"row": row, "summary": summary, "errors": errors})
    return env, results


def mib(size):
    return f"{size / 2**20:,.2f}"


def table(env, results):
    """The Markdown table of docs/accuracy.md."""
    lines = [f"Measured on an {env['device']} (torch {env['torch']}, cuDNN {env['cudnn']}); "
             f"predicted here with `--device {PROFILE} --torch {torch_release(env)}`, MiB:", "",
             "| model | dtype | batch | max_allocated | predicted | error | max_requested "
             "| predicted | error | max_reserved | predicted | error |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for result in results:
        row, summary, errors = result["row"], result["summary"], result["errors"]
        cells = [row["model"], row["dtype"], str(row["batch"])]
        for measured, field in FIELDS:
            cells += [mib(row["first_forward"][measured]), mib(summary[field]),
                      f"{errors[measured]:+.2f} %"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(HERE.parents[1] / "build"))
    arguments = parser.parse_args()
    binary = Path(arguments.build) / "bin" / "memtrace-estimate"
    with tempfile.TemporaryDirectory(prefix="gpu-truth-") as directory:
        env, results = compare(binary, directory)
    print(table(env, results))
    worst = max(max(abs(result["errors"]["max_allocated"]),
                    abs(result["errors"]["max_requested"])) for result in results)
    print(f"\nlargest error of max_allocated and max_requested: {worst:.2f} % "
          f"(budget {100 * BUDGET:.0f} %)")
    return 1 if worst > 100 * BUDGET else 0


if __name__ == "__main__":
    sys.exit(main())
