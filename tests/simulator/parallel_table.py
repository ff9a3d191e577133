"""The table of docs/simulated-gpu.md, "A torchrun job on simulated cards": DDP and FSDP2 jobs of
scripts/parallel_step.py on simulated H100s (one a rank), untraced, under PyTorch's default
caching allocator, over NCCL (simulated) and over gloo with CUDA tensors; each rank's
max_memory_allocated() and requested and reserved peaks of the third step beside
mem_tracer.estimate(..., parallel=..., device="cuda-sm90").

    build/venv-torch-cuda/bin/python tests/simulator/parallel_table.py   # about 6 min on 2 cores

Prints a Markdown table, a row a rank. test_parallel_jobs.py checks some of its rows in
`make test`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE / "scripts"))
sys.path.insert(0, str(ROOT / "python"))
import parallel_step  # noqa: E402

TORCHRUN = Path(sys.executable).parent / "torchrun"
# (strategy, world size, backend, pause between steps in seconds); "ddp-view" is DDP with
# gradient_as_bucket_view=True.
JOBS = [("ddp", 2, "nccl", 0), ("ddp", 2, "nccl", 1), ("ddp", 4, "nccl", 0), ("ddp", 4, "nccl", 1),
        ("ddp-view", 2, "nccl", 0), ("ddp-view", 2, "nccl", 1),
        ("fsdp", 2, "nccl", 0), ("fsdp", 4, "nccl", 0),
        ("ddp", 2, "gloo", 0), ("fsdp", 2, "gloo", 0), ("fsdp", 4, "gloo", 0)]
LABELS = {"ddp": "DDP", "ddp-view": "DDP, gradient_as_bucket_view", "fsdp": "FSDP2"}


def predicted(strategy, world_size):
    import torch

    import mem_tracer
    from mem_tracer.estimator import parallel
    model = parallel_step.model().train()
    job = (parallel.FSDP(modules=("0", "2", "4")) if strategy == "fsdp"
           else parallel.DDP(gradient_as_bucket_view=strategy == "ddp-view"))
    step = mem_tracer.TrainingStep(optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
                                   parallel=job, world_size=world_size)
    return mem_tracer.estimate(model, (parallel_step.example(),), training=step,
                               device="cuda-sm90")


def measured(strategy, world_size, backend, pause):
    """What each rank of the job said, in rank order."""
    with tempfile.TemporaryDirectory() as work:
        said = Path(work) / "said"
        result = subprocess.run(
            [sys.executable, "-m", "mem_tracer.simulated_gpu", "h100", "--devices",
             str(world_size), "--", str(TORCHRUN), "--standalone", "--nproc-per-node",
             str(world_size), str(HERE / "scripts" / "parallel_step.py"),
             strategy.removesuffix("-view"), str(said), "--backend", backend, "--pause",
             str(pause), *(["--bucket-view"] if strategy == "ddp-view" else [])],
            capture_output=True, text=True, timeout=900,
            env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
        if result.returncode != 0:
            raise RuntimeError(f"the {strategy} job failed: {result.stderr[-3000:]}")
        return [json.loads(Path(f"{said}-rank{rank}.json").read_text())
                for rank in range(world_size)]


def rows(strategy, world_size, backend, pause, estimate):
    lines = []
    held = estimate.parallel.held_by_nccl if backend == "nccl" else None
    for said in measured(strategy, world_size, backend, pause):
        rank = said["rank"]
        # Where the ranks differ (uneven shards), the last rank's own prediction.
        allocated = estimate.parallel.ranks_allocated.get(
            rank, estimate.parallel.ranks_allocated[0])
        error = 100.0 * (allocated - said["step_peak"]) / said["step_peak"]
        if said["step_peak"] == allocated:
            verdict = "exact"
        elif held is not None and said["step_peak"] == held.peak_allocated_bytes:
            verdict = "exact with the first bucket NCCL held"
        elif held is not None and allocated < said["step_peak"] < held.peak_allocated_bytes:
            verdict = "between the two"
        else:
            verdict = f"{error:+.2f} %"
        lines.append(
            f"| {LABELS[strategy]} | {backend} | {pause:g} s | {world_size} | {rank} "
            f"| {said['step_peak']:,} | {allocated:,} "
            f"| {'' if held is None else format(held.peak_allocated_bytes, ',')} | {verdict} "
            f"| {said['requested_peak']:,} / {estimate.peak_requested_bytes:,} "
            f"| {said['reserved_peak']:,} / {estimate.peak_reserved_bytes:,} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("nccl", "gloo"), help="only that backend's jobs")
    parser.add_argument("--only", help="only that job (ddp, ddp-view, fsdp)")
    arguments = parser.parse_args()
    import torch
    started = time.monotonic()
    estimates = {}
    print("| job | backend | pause | world | rank | max_memory_allocated() | predicted "
          "| predicted with the first bucket held | | requested: measured / predicted (rank 0) "
          "| reserved: measured / predicted (rank 0) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for strategy, world_size, backend, pause in JOBS:
        if arguments.backend not in (None, backend) or arguments.only not in (None, strategy):
            continue
        key = (strategy, world_size)
        if key not in estimates:
            estimates[key] = predicted(strategy, world_size)
        try:
            for line in rows(strategy, world_size, backend, pause, estimates[key]):
                print(line, flush=True)
        except RuntimeError as error:  # a job that failed is a row
            last = str(error).strip().splitlines()
            print(f"| {LABELS[strategy]} | {backend} | {pause:g} s | {world_size} | | failed: "
                  f"{last[-1][:200] if last else ''} | | | | | |", flush=True)
    print(f"\n{time.monotonic() - started:.0f} s; torch {torch.__version__}")


if __name__ == "__main__":
    main()
