"""What tracing costs where a GPU waits on the CPU (issue 32): GPT-2 small's fp32 forward, 128
tokens, batch 1 and 8, on a simulated H200, where the CPU side is all there is (no kernel
runs), so every nanosecond a hook adds shows. Each mode is a fresh process; rounds interleave
the modes; each process times FORWARDS forwards after WARMUP ones by its CPU time
(time.process_time: every thread's, the flusher's included) and by wall time.

    python3 bench/launch_bound.py [BUILD_DIR] [--rounds N] [--forwards N] [--json OUT]

Modes: untraced (PyTorch's caching allocator), untraced-async (PyTorch's cudaMallocAsync
backend, what LD_PRELOAD runs the program on), memtrace under LD_PRELOAD with
MEMTRACE_STACKS=none / python (the default) / native, mem_tracer.switch_allocator() +
start_tracing(), and PyTorch's own _record_memory_history(stacks="python") and ("all").
Prints per mode and batch the median over rounds of its cost per forward relative to the
untraced run of the same round, the spread of those ratios (min-max), and the noise floor: the
same spread for a second untraced process in each round (untraced-again)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = r'''
import json, os, sys, time
mode, batch, warmup, forwards, trace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if mode == "switch_allocator":
    import mem_tracer
    mem_tracer.switch_allocator()
import torch, transformers
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval().cuda()
ids = torch.randint(0, 50257, (batch, 128), device="cuda")
if mode == "switch_allocator":
    mem_tracer.start_tracing(trace)
elif mode.startswith("history"):
    torch.cuda.memory._record_memory_history(stacks="all" if mode == "history-all" else "python")
def forward():
    with torch.no_grad():
        model(ids, use_cache=False)
    torch.cuda.synchronize()
for _ in range(warmup):
    forward()
cpu, wall = time.process_time(), time.perf_counter()
for _ in range(forwards):
    forward()
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
if mode == "switch_allocator":
    mem_tracer.stop_tracing()
print(json.dumps({"cpu_ms": 1000 * cpu / forwards, "wall_ms": 1000 * wall / forwards}))
'''

MODES = ("untraced", "untraced-again", "untraced-async", "none", "python", "native",
         "switch_allocator", "history", "history-all")


def run(build, mode, batch, warmup, forwards, work):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMTRACE_") and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    env["PYTHONPATH"] = str(ROOT / "python")
    trace = str(work / f"{mode}-{batch}.bin")
    if mode in ("none", "python", "native"):
        env.update(LD_PRELOAD=str(build / "allocator" / "libmemtrace.so"), MEMTRACE_OUTPUT=trace,
                   MEMTRACE_STACKS=mode)
    if mode == "untraced-async":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    sys.path.insert(0, str(ROOT / "python"))
    from mem_tracer import simulated_gpu
    env = simulated_gpu.environment("h200", base=env)
    python = build / "venv-torch-cuda" / "bin" / "python"
    output = subprocess.run([str(python), "-c", WORKLOAD, mode, str(batch), str(warmup),
                             str(forwards), trace], env=env, capture_output=True, text=True,
                            check=True).stdout
    for path in work.glob("*.bin"):
        path.unlink()
    return json.loads(output.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", nargs="?", default=str(ROOT / "build"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--forwards", type=int, default=20)
    parser.add_argument("--json", default=None)
    arguments = parser.parse_args()
    build = Path(arguments.build).resolve()
    work = build / "bench-launch-bound"
    work.mkdir(exist_ok=True)
    results = {batch: {mode: [] for mode in MODES} for batch in (1, 8)}
    for round_index in range(arguments.rounds):
        for batch in (1, 8):
            for mode in MODES:
                results[batch][mode].append(run(build, mode, batch, arguments.warmup,
                                                arguments.forwards, work))
        print(f"round {round_index + 1} of {arguments.rounds} done", file=sys.stderr)
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(results, indent=1))
    for clock in ("cpu_ms", "wall_ms"):
        print(f"\n{clock.split('_')[0].upper()} time per forward, ratio to untraced in the same "
              f"round: median (min-max) over {arguments.rounds} rounds")
        print("| mode | batch 1 | batch 8 |")
        print("|---|---:|---:|")
        for mode in MODES:
            cells = []
            for batch in (1, 8):
                ratios = [r[clock] / base[clock] for r, base in
                          zip(results[batch][mode], results[batch]["untraced"])]
                cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
            base = statistics.median(r[clock] for r in results[1]["untraced"]), \
                statistics.median(r[clock] for r in results[8]["untraced"])
            label = mode if mode != "untraced" else f"untraced ({base[0]:.1f} / {base[1]:.1f} ms)"
            print(f"| {label} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
