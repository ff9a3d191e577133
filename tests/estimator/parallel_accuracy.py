"""One rank of a DDP or FSDP2 job predicted (mem_tracer.estimate(training=True, parallel=...,
world_size=N), recorded on one process with the fake process group) against every rank of the
real job on the CPU (parallel_truth.py: gloo, one process a rank, live storages counted).

    python3 tests/estimator/parallel_accuracy.py [--build BUILD_DIR] [--only MODEL,...] [--quick]
                                                 [--cuda]

Each job: a model (a small MLP whose last layer FSDP shards unevenly over 4 ranks, the CNN of
models.py with batch norm, GPT-2 of transformers from a small config), AdamW, batch 4 a rank,
world sizes 2 and 4; DDP with the default buckets and with bucket_cap_mb=0.05, each with
gradient_as_bucket_view off and on; FSDP2 (fully_shard on the model's blocks, then the root)
with reshard_after_forward True and False. A row a rank: the prediction for that rank (rank 0;
the last rank too when the shards are uneven, the ranks between bounded by the two) beside its
measured peak, and the categories. Prints a Markdown table; profile `cpu`.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPOSITORY / "python"))
from training_accuracy import summary  # noqa: E402

TOLERANCE = 0.03
BATCH = 4
MODELS = ("mlp", "resnet", "gpt2-sdpa")
CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "input", "temporary")
SMALL_BUCKET_MB = 0.05


def settings():
    """(strategy, settings) of every configuration of the table."""
    for bucket_cap_mb in (None, SMALL_BUCKET_MB):
        for as_view in (False, True):
            yield "ddp", {"bucket_cap_mb": bucket_cap_mb, "gradient_as_bucket_view": as_view}
    for reshard in (True, False):
        yield "fsdp", {"reshard_after_forward": reshard}


@dataclass
class Row:
    model: str
    strategy: str
    settings: dict
    world_size: int
    rank: int
    predicted: int | None = None  # None: between the recorded ranks' (bound)
    bound: tuple | None = None
    measured: int | None = None
    error_pct: float | None = None
    phase: str = ""
    categories: dict = field(default_factory=dict)
    communication: str = ""
    backend: int = 0  # the most gloo held at once in its collectives (not in `measured`)
    status: str = "error"
    message: str = ""


def _described(strategy, values):
    if strategy == "ddp":
        cap = values["bucket_cap_mb"]
        return (f"bucket_cap_mb={'default' if cap is None else cap}, "
                f"gradient_as_bucket_view={values['gradient_as_bucket_view']}")
    return f"reshard_after_forward={values['reshard_after_forward']}"


def predict(model_name, strategy, values, world_size):
    """mem_tracer's estimate for the job; and the FSDP modules it shards (the truth's)."""
    import mem_tracer
    from mem_tracer.estimator import parallel
    from parallel_truth import OPTIMIZERS, model_and_example

    model, args, kwargs = model_and_example(model_name, BATCH)
    optimizer = OPTIMIZERS["adamw"](model.parameters())
    job = (parallel.DDP(**values) if strategy == "ddp" else parallel.FSDP(**values))
    modules = parallel.sharded_modules(model, job) if strategy == "fsdp" else None
    estimate = mem_tracer.estimate(model, args, example_kwargs=kwargs, training=True,
                                   optimizer=optimizer, device="cpu", parallel=job,
                                   world_size=world_size)
    return estimate, modules


def rows_of(model_name, strategy, values, world_size, estimate, truths):
    rows = []
    recorded = estimate.parallel.ranks
    communication = ", ".join(f"{kind} {size:,} ({'/'.join(estimate.parallel.communication_categories[kind])})"
                              for kind, size in estimate.parallel.communication.items())
    for truth in truths:
        row = Row(model_name, strategy, values, world_size, truth["rank"],
                  communication=communication)
        rows.append(row)
        if "error" in truth:
            row.message = f"ground truth: {truth['error']}"
            continue
        row.measured = truth["peak"]
        row.backend = truth["backend_peak"]
        if estimate.parallel.uneven is None:  # every rank holds what rank 0 holds
            row.predicted = recorded[0]
        elif truth["rank"] in recorded:
            row.predicted = recorded[truth["rank"]]
        else:
            row.bound = (min(recorded.values()), max(recorded.values()))
        if row.predicted is not None:
            row.error_pct = 100.0 * (row.predicted - row.measured) / row.measured
            # The categories are the recorded rank's (rank 0's unless it is the last).
            breakdown = estimate.training_breakdown if truth["rank"] == 0 else None
            if breakdown is not None:
                row.categories = {name: (breakdown[name], truth["categories"][name])
                                  for name in CATEGORIES}
            row.phase = (f"{estimate.training_peak_phase} / {truth['phase']}"
                         if truth["rank"] == 0 else f"- / {truth['phase']}")
            ok = abs(row.error_pct) <= 100 * TOLERANCE and all(
                abs(p - m) <= TOLERANCE * row.measured for p, m in row.categories.values())
            row.status = "ok" if ok else "off"
        else:
            low, high = row.bound
            row.phase = f"- / {truth['phase']}"
            row.status = "within the bound" if low <= row.measured <= high else "off"
    return rows


def cases(model_names=MODELS, world_sizes=(2, 4)):
    """(model, strategy, settings, world size) of every job of the table."""
    return [(model_name, strategy, values, world_size) for model_name in model_names
            for world_size in world_sizes for strategy, values in settings()]


def run(jobs_to_run):
    """The rows of (model, strategy, settings, world size) jobs (the truths measured in one
    process of their own: the ranks are forked from a parent that runs no op)."""
    jobs, predictions = [], []
    for model_name, strategy, values, world_size in jobs_to_run:
        try:
            estimate, modules = predict(model_name, strategy, values, world_size)
        except Exception as error:  # noqa: BLE001 - a refused job is a row
            predictions.append((model_name, strategy, values, world_size, error))
            continue
        truth_settings = dict(values, **({"modules": modules} if modules is not None else {}))
        jobs.append({"model": model_name, "strategy": strategy, "world_size": world_size,
                     "settings": truth_settings, "optimizer": "adamw", "batch": BATCH})
        predictions.append((model_name, strategy, values, world_size, estimate))
    truths = measure(jobs)
    rows, answers = [], iter(truths)
    for model_name, strategy, values, world_size, estimate in predictions:
        if isinstance(estimate, Exception):
            row = Row(model_name, strategy, values, world_size, 0, status="refused",
                      message=str(estimate).splitlines()[0][:300])
            rows.append(row)
            continue
        rows += rows_of(model_name, strategy, values, world_size, estimate, next(answers))
    return rows


def measure(jobs):
    """parallel_truth.py's answers for `jobs`, in order."""
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "jobs.json"
        path.write_text(json.dumps(jobs))
        result = subprocess.run([sys.executable, str(HERE / "parallel_truth.py"), str(path)],
                                capture_output=True, text=True, check=False, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"parallel_truth.py failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def markdown(rows):
    lines = ["| model | job | settings | world | rank | predicted (bytes) | measured (bytes) "
             "| error | worst category | phase (predicted / measured) | gloo's own | status |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---|---:|---|"]
    for row in rows:
        number = (lambda value: "" if value is None else f"{value:,}")
        predicted = (number(row.predicted) if row.bound is None
                     else f"{row.bound[0]:,} to {row.bound[1]:,}")
        error = "" if row.error_pct is None else f"{row.error_pct:+.2f} %"
        worst = ""
        if row.categories:
            name, (p, m) = max(row.categories.items(), key=lambda item: abs(item[1][0] - item[1][1]))
            worst = "all exact" if p == m else f"{name} {p - m:+,} B"
        lines.append(f"| {row.model} | {row.strategy.upper()} | {_described(row.strategy, row.settings)} "
                     f"| {row.world_size} | {row.rank} | {predicted} | {number(row.measured)} | {error} "
                     f"| {worst} | {row.phase} | {row.backend:,} "
                     f"| {row.status}{': ' + row.message if row.message else ''} |")
    lines.append("")
    lines.append(summary(rows))
    return "\n".join(lines)


def communication_table(rows):
    """What the communication buffers were at each job's peak (rank 0), once a job."""
    lines = ["| model | job | settings | world | communication buffers at the peak: bytes (category) |",
             "|---|---|---|---:|---|"]
    for row in rows:
        if row.rank == 0 and row.status != "refused":
            lines.append(f"| {row.model} | {row.strategy.upper()} | "
                         f"{_described(row.strategy, row.settings)} | {row.world_size} | "
                         f"{row.communication} |")
    return "\n".join(lines)


def cuda_table(model_names, world_size=2):
    """The same jobs' rank 0 predicted with the `cuda` profile (nothing measured: no GPU here),
    beside the `cpu` profile's."""
    import mem_tracer
    from mem_tracer.estimator import parallel
    from parallel_truth import OPTIMIZERS, model_and_example

    lines = ["| model | job | settings | cpu: peak | cuda: storages' peak | cuda: "
             "max_memory_allocated() | cuda: max_memory_reserved() | AdamW on CUDA |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for model_name in model_names:
        for strategy, values in [("ddp", {"bucket_cap_mb": None, "gradient_as_bucket_view": False}),
                                 ("fsdp", {"reshard_after_forward": True})]:
            model, args, kwargs = model_and_example(model_name, BATCH)
            optimizer = OPTIMIZERS["adamw"](model.parameters())
            job = parallel.DDP(**values) if strategy == "ddp" else parallel.FSDP(**values)
            figures = {}
            for device in ("cpu", "cuda"):
                figures[device] = mem_tracer.estimate(
                    model, args, example_kwargs=kwargs, training=True, optimizer=optimizer,
                    device=device, parallel=job, world_size=world_size)
            cuda = figures["cuda"]
            lines.append(f"| {model_name} | {strategy.upper()} | {_described(strategy, values)} | "
                         f"{figures['cpu'].training_categories_peak_bytes:,} | "
                         f"{cuda.training_categories_peak_bytes:,} | "
                         f"{cuda.peak_allocated_bytes:,} | {cuda.peak_reserved_bytes:,} | "
                         f"{cuda.optimizer_implementation} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.environ.get("MEMTRACE_BUILD_DIR",
                                                          str(REPOSITORY / "build")))
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--quick", action="store_true", help="world size 2 only")
    parser.add_argument("--cuda", action="store_true",
                        help="also the cuda profile's prediction of some jobs (not measured)")
    arguments = parser.parse_args()
    os.environ.setdefault("MEMTRACE_BIN_DIR", str(Path(arguments.build) / "bin"))
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    started = time.monotonic()
    names = [name for name in arguments.only.split(",") if name] or list(MODELS)
    rows = run(cases(names, (2,) if arguments.quick else (2, 4)))
    print(markdown(rows))
    print()
    print(communication_table(rows))
    if arguments.cuda:
        print()
        print(cuda_table(names))
    print(f"\n{time.monotonic() - started:.0f} s; torch {torch.__version__}")


if __name__ == "__main__":
    main()
