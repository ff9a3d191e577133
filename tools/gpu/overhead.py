#!/usr/bin/env python3
"""The overhead table of docs/gpu-record-h200.md, measured again: what each way of tracing costs
GPT-2 small inference on a GPU, as a ratio to the untraced forward in the same run.

    python3 tools/gpu/overhead.py [--build BUILD] [--markdown OUT.md] [--json OUT.json]
                                  [--batches 1,8] [--modes untraced,async,...]

GPT-2 small (transformers' GPT2LMHeadModel from its default config, random weights: nothing
is downloaded), fp32, 128 tokens, under torch.no_grad(). Each mode is a fresh process that
builds the model on the GPU, then for each batch size runs --warmup forwards and times
--blocks blocks of --forwards forwards (torch.cuda.synchronize() around each block); the
figure is the median block's milliseconds per forward. The modes run one after the other,
nothing else on the GPU, untraced first and again last (the difference between the two is the
noise of the run). The tables are rewritten after each mode, so a run cut short keeps what it
measured. Exits 77 with one line on stderr where PyTorch sees no CUDA device (nothing is
measured), 1 if a mode failed or timed out.

--device cpu times the untraced modes of a miniature GPT-2 on the CPU instead: it checks this
script's processes and tables where there is no GPU (tools/gpu/check.py --dry); its figures say
nothing of a GPU."""
import argparse
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = 77  # what ctest and tools/gpu/check.py read as "skipped", as tests/gpu exits

# (name, what the table calls it, how its process is set up). "preload" runs the worker under
# LD_PRELOAD=libmemtrace.so with MEMTRACE_STACKS set to the value; "environment" only sets
# variables; "in_process" is done by the worker itself before the model touches CUDA.
MODES = [
    ("untraced", "untraced", {}),
    ("async", "`backend:cudaMallocAsync`, untraced",
     {"environment": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}}),
    ("preload-none", "LD_PRELOAD, `MEMTRACE_STACKS=none`", {"preload": "none"}),
    ("preload-python", "LD_PRELOAD, `MEMTRACE_STACKS=python` (the default)", {"preload": "python"}),
    ("preload-native", "LD_PRELOAD, `MEMTRACE_STACKS=native`", {"preload": "native"}),
    # Where the cost is (issue 22, part 6): the hooks alone, counting but writing nothing (as the
    # pluggable allocator before start_tracing()), and the default mode writing to memory.
    ("preload-loaded", "LD_PRELOAD, `MEMTRACE_AUTOSTART=0` (hooks only, no file)",
     {"preload": "python", "environment": {"MEMTRACE_AUTOSTART": "0"}}),
    ("preload-python-shm", "LD_PRELOAD, `MEMTRACE_STACKS=python`, the trace in /dev/shm",
     {"preload": "python", "trace_dir": "/dev/shm"}),
    ("switch", "`switch_allocator()` + `start_tracing()`", {"in_process": "switch"}),
    ("history-python", '`_record_memory_history(stacks="python")`',
     {"in_process": "history-python"}),
    ("history-all", '`_record_memory_history(stacks="all")`', {"in_process": "history-all"}),
    ("untraced-again", "untraced again (the noise)", {}),
]
MODE_NAMES = [name for name, _, _ in MODES]
CPU_MODES = ("untraced", "untraced-again")  # what --device cpu can time
# --device cpu's model: GPT-2 small's 124 M weights take a loaded 2-core machine tens of
# seconds to initialize, twice; this one a fraction of a second, through the same code.
MINIATURE = {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000}


def worker(arguments):
    """One mode in this process: prints one JSON line with the figures."""
    mode = arguments.worker
    setup = {name: spec for name, _, spec in MODES}[mode]
    in_process = setup.get("in_process")
    import torch

    device = torch.device(arguments.device)
    if in_process == "switch":
        import mem_tracer

        mem_tracer.switch_allocator()
        mem_tracer.start_tracing(arguments.trace)
    elif in_process in ("history-python", "history-all"):
        torch.cuda.memory._record_memory_history(stacks=in_process.removeprefix("history-"))

    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config() if device.type == "cuda" else GPT2Config(**MINIATURE)
    with device:  # built where it runs: quicker than initializing 124 M weights on the CPU
        model = GPT2LMHeadModel(config).eval()
    vocabulary = model.config.vocab_size
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    result = {"mode": mode, "batches": {}}
    with torch.no_grad():
        for batch in arguments.batch_sizes:
            tokens = torch.randint(0, vocabulary, (batch, arguments.tokens), device=device)
            for _ in range(arguments.warmup):
                model(tokens)
            figures = {}
            if device.type == "cuda" and mode == "untraced":
                # The workload's size: allocations PyTorch's caching allocator is asked for in
                # one warm forward (the shared record counted 270 at batch 1 and 8).
                before = torch.cuda.memory_stats()["allocation.all.allocated"]
                model(tokens)
                figures["allocations_per_forward"] = (
                    torch.cuda.memory_stats()["allocation.all.allocated"] - before)
            blocks = []
            for _ in range(arguments.blocks):
                synchronize()
                start = time.perf_counter()
                for _ in range(arguments.forwards):
                    model(tokens)
                synchronize()
                blocks.append(1000.0 * (time.perf_counter() - start) / arguments.forwards)
            figures["blocks_ms"] = blocks
            figures["ms_per_forward"] = statistics.median(blocks)
            result["batches"][str(batch)] = figures
    if in_process == "switch":
        mem_tracer.stop_tracing()
    elif in_process in ("history-python", "history-all"):
        torch.cuda.memory._record_memory_history(enabled=None)
    if device.type == "cuda":
        result["device"] = torch.cuda.get_device_name()
    print(json.dumps(result), flush=True)


def named_share(report, trace):
    """The share of the bytes live at the trace's peak that memtrace-report puts on a Python
    line: the first promise of issue 22, which the default mode did not keep on the GPU."""
    if not trace.is_file():
        return None
    result = subprocess.run([str(report), str(trace), "--format", "json", "--top", "0"],
                            capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        return None
    rows = json.loads(result.stdout)["live"]["rows"]
    traced = sum(row["bytes"] for row in rows if row["kind"] != "untraced")
    named = sum(row["bytes"] for row in rows if row["kind"] == "python")
    return named / traced if traced else None


def measure(arguments, name, spec, trace):
    """Runs one mode's worker in a fresh process; its figures, or why there are none."""
    library = Path(arguments.build) / "allocator" / "libmemtrace.so"
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("MEMTRACE_")
                   and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    environment.update(spec.get("environment", {}))
    environment.update(MEMTRACE_LIBRARY=str(library),
                       MEMTRACE_BIN_DIR=str(Path(arguments.build) / "bin"),
                       PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "python"),
                                                                environment.get("PYTHONPATH")])))
    if "trace_dir" in spec and Path(spec["trace_dir"]).is_dir():
        trace = Path(spec["trace_dir"]) / trace.name
    if "preload" in spec:
        environment.update(LD_PRELOAD=str(library), MEMTRACE_OUTPUT=str(trace),
                           MEMTRACE_STACKS=spec["preload"])
    command = [sys.executable, __file__, "--worker", name, "--modes", name, "--trace", str(trace),
               "--device", arguments.device, "--batches", arguments.batches,
               "--tokens", str(arguments.tokens), "--warmup", str(arguments.warmup),
               "--blocks", str(arguments.blocks), "--forwards", str(arguments.forwards)]
    try:
        result = subprocess.run(command, env=environment, capture_output=True, text=True,
                                timeout=arguments.mode_timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"mode": name, "error": f"timed out after {arguments.mode_timeout} s"}
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        said = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return {"mode": name, "error": f"exited {result.returncode}: {said}"}
    figures = json.loads(lines[-1])
    if spec.get("preload") == "python" or spec.get("in_process") == "switch":  # Python stacks
        figures["python_line_share"] = named_share(Path(arguments.build) / "bin" /
                                                   "memtrace-report", trace)
    if "trace_dir" in spec:
        trace.unlink(missing_ok=True)  # not in the run's temporary folder
    return figures


def markdown(arguments, results, context):
    """The table as docs/gpu-record-h200.md gives it: ms/forward untraced, ratios below."""
    labels = {name: label for name, label, _ in MODES}
    baseline = next((r for r in results if r["mode"] == "untraced" and "error" not in r), None)
    batches = [str(b) for b in arguments.batch_sizes]
    model = ("GPT-2 small" if arguments.device == "cuda"
             else f"A miniature GPT-2 on the CPU ({MINIATURE}: this script's check, no figure)")
    lines = [(f"{model} fp32, {arguments.tokens} tokens, warm forwards; median of "
              f"{arguments.blocks} blocks of {arguments.forwards} ({arguments.warmup} warm-up "
              f"forwards first); each mode a fresh process; {context}."), ""]
    counts = [str(baseline["batches"][b]["allocations_per_forward"]) for b in batches
              if baseline and "allocations_per_forward" in baseline["batches"][b]]
    if counts:
        lines += [(f"Allocations per forward (untraced, batch {', '.join(batches)}): "
                   f"{', '.join(counts)}."), ""]
    lines.append("| mode | " + " | ".join(f"batch {b}" for b in batches)
                 + " | live at peak on a Python line |")
    lines.append("|---|" + "---:|" * len(batches) + "---:|")
    for result in results:
        name = result["mode"]
        if "error" in result:
            cells = [result["error"]] + [""] * (len(batches) - 1)
        elif name == "untraced":
            cells = [f"{result['batches'][b]['ms_per_forward']:.2f} ms" for b in batches]
        else:
            cells = []
            for b in batches:
                ms = result["batches"][b]["ms_per_forward"]
                base = baseline["batches"][b]["ms_per_forward"] if baseline else None
                cells.append(f"{ms / base:.2f} ({ms:.2f} ms)" if base else f"{ms:.2f} ms")
        share = result.get("python_line_share")
        shown = "-" if share is None else f"{100 * share:.1f} %"
        lines.append(f"| {labels[name]} | " + " | ".join(cells) + f" | {shown} |")
    return "\n".join(lines) + "\n"


def write(path, text):
    """Whole or not at all: a reader (tools/gpu/check.py, polling) never sees half a file."""
    if not path:
        return
    partial = Path(str(path) + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(ROOT / "build"),
                        help="the build directory (libmemtrace.so, memtrace-report)")
    parser.add_argument("--markdown", help="the table, rewritten after each mode")
    parser.add_argument("--json", help="the figures, rewritten after each mode")
    parser.add_argument("--modes", default=",".join(MODE_NAMES),
                        help=f"comma-separated, in order (default: all: {','.join(MODE_NAMES)})")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--forwards", type=int, default=50)
    parser.add_argument("--mode-timeout", type=int, default=90,
                        help="seconds each mode's process may take")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--worker", choices=MODE_NAMES, help=argparse.SUPPRESS)
    parser.add_argument("--trace", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    try:
        arguments.batch_sizes = [int(b) for b in arguments.batches.split(",")]
    except ValueError:
        parser.error(f"--batches: comma-separated integers, not {arguments.batches!r}")
    arguments.mode_list = arguments.modes.split(",")
    unknown = [m for m in arguments.mode_list if m not in MODE_NAMES]
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(MODE_NAMES)})")
    if arguments.device == "cpu" and set(arguments.mode_list) - set(CPU_MODES):
        parser.error(f"--device cpu times only {' and '.join(CPU_MODES)}: the others need CUDA")
    return arguments


def main():
    arguments = parse_arguments()
    if arguments.worker:
        return worker(arguments)
    import torch

    if arguments.device == "cuda" and not torch.cuda.is_available():
        print(f"overhead.py: no CUDA device visible to PyTorch (torch {torch.__version__}): "
              "nothing measured", file=sys.stderr)
        return SKIPPED
    try:
        transformers = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        print("overhead.py: needs transformers (GPT-2 small): pip install transformers",
              file=sys.stderr)
        return 2
    build = Path(arguments.build)
    needed = [build / "allocator" / "libmemtrace.so", build / "bin" / "memtrace-report"]
    missing = [str(p) for p in needed if not p.is_file()] if arguments.device == "cuda" else []
    if missing:
        print(f"overhead.py: {', '.join(missing)} missing: build first (make build)",
              file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if arguments.device == "cuda" else "the CPU"
    context = (f"{name}, torch {torch.__version__}, transformers {transformers}, "
               f"Python {sys.version.split()[0]}; ratio to the first untraced mode of this run")
    specs = {mode: spec for mode, _, spec in MODES}
    results = []
    with tempfile.TemporaryDirectory(prefix="memtrace-overhead-") as directory:
        for mode in arguments.mode_list:
            started = time.monotonic()
            result = measure(arguments, mode, specs[mode], Path(directory) / f"{mode}.bin")
            result["seconds"] = round(time.monotonic() - started, 1)
            results.append(result)
            print(f"overhead.py: {mode}: "
                  + (result.get("error") or f"{result['seconds']} s"), file=sys.stderr, flush=True)
            write(arguments.markdown, markdown(arguments, results, context))
            write(arguments.json, json.dumps({"context": context, "results": results}, indent=1))
    print(markdown(arguments, results, context), end="")
    return 1 if any("error" in result for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
