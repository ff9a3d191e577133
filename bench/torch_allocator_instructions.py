"""Instructions per tensor (one allocation and its free) of PyTorch's own allocator, traced by
memtrace from inside it (Note [PyTorch's own allocator] in tracer/format/records.h), against the
untraced program, the cudaMallocAsync backend memtrace used to set (traced by its hooks), and
PyTorch's `_record_memory_history(stacks="python")`: callgrind counts every instruction of the
process (the same count on a busy machine as on an idle one), and the marginal count between two
loop lengths leaves out startup, torch's import and the first segment.

    python3 bench/torch_allocator_instructions.py BUILD_DIR [SHORT LONG]

Runs on memtrace's simulated H200 under the venv with torch's CUDA build (BUILD_DIR/venv-torch-
cuda), so the caching allocator's host code is PyTorch's own. The loop is `torch.empty(256,
device="cuda")` freed at once, three Python frames deep: the cost of the op is PyTorch's (its
dispatch, its allocator), and what memtrace adds is the difference to the untraced row. Prints
one JSON line a mode and a Markdown table."""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
SHORT, LONG = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (500, 2500)
PYTHON = BUILD / "venv-torch-cuda" / "bin" / "python"

LOOP = """
import sys, torch
history = sys.argv[2] == "history"
x = torch.empty(256, device="cuda")  # CUDA, the allocator and its first segment
if history:
    torch.cuda.memory._record_memory_history(stacks="python")
def step():
    t = torch.empty(256, device="cuda")
    del t
def loop(n):
    for _ in range(n):
        step()
loop(int(sys.argv[1]))
"""

# (name, what the table calls it, environment, loop argument)
MODES = [
    ("untraced", "untraced (PyTorch's caching allocator)", {}, "plain"),
    ("tracker", "memtrace, inside PyTorch's allocator (the default), Python stacks",
     {"preload": "python"}, "plain"),
    ("tracker-none", "memtrace, inside PyTorch's allocator, no stacks", {"preload": "none"}, "plain"),
    ("async-untraced", "`backend:cudaMallocAsync`, untraced",
     {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, "plain"),
    ("async-traced", "memtrace's former default: `backend:cudaMallocAsync` traced, Python stacks",
     {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync", "preload": "python"}, "plain"),
    ("history", '`_record_memory_history(stacks="python")`', {}, "history"),
]


def instructions(mode_env, argument, pairs, work):
    sys.path.insert(0, str(ROOT / "python"))
    from mem_tracer import simulated_gpu
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMTRACE_") and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    env.update({k: v for k, v in mode_env.items() if k != "preload"})
    if "preload" in mode_env:
        env.update(LD_PRELOAD=str(BUILD / "allocator" / "libmemtrace.so"),
                   MEMTRACE_STACKS=mode_env["preload"],
                   MEMTRACE_OUTPUT=str(Path(work) / "trace-%p.bin"))
    env = simulated_gpu.environment("h200", base=env)
    out = Path(work) / f"callgrind-{pairs}-{len(os.listdir(work))}.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    "--trace-children=no", str(PYTHON), "-c", LOOP, str(pairs), argument],
                   env=env, check=True, capture_output=True, timeout=3000)
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no total in {out}")


def main():
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, label, mode_env, argument in MODES:
            short = instructions(mode_env, argument, SHORT, work)
            long = instructions(mode_env, argument, LONG, work)
            per_pair = (long - short) / (LONG - SHORT)
            rows.append((name, label, per_pair))
            print(json.dumps({"mode": name, "short": short, "long": long,
                              "per_tensor": round(per_pair)}), flush=True)
    base = {name: per for name, _, per in rows}
    print("\n| mode | instructions per tensor (alloc + free) | over untraced |")
    print("|---|---:|---:|")
    for name, label, per in rows:
        reference = base["async-untraced"] if name.startswith("async") else base["untraced"]
        print(f"| {label} | {per:,.0f} | {per - reference:+,.0f} |")


if __name__ == "__main__":
    main()
