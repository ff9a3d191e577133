"""The cost of the training hooks (mem_tracer/training.py) on a CPU training step of a small
transformer: the step with and without start_tracing(model=model), the budget being 5 %
(issue 13). On the CPU no tensor goes through memtrace, so what is measured is the hooks
alone: the optimizer's step hooks, the root module's forward hooks, the saved_tensors_hooks
pair (one call per tensor autograd saves), the grad_fn pre-hooks of every module's output
and the records they write (categories, phases, steps; each storage named by its host
address, so that every category call a GPU's run makes is made), plus the module attribution
that start_tracing() installs anyway (measured on its own too).

    python3 bench/training_hooks.py [BUILD_DIR]       (bench/run.py runs it)

Steps with and without the hooks alternate, one of each kind a round, and each traced step is
compared with the untraced step of its round: on a shared machine a noisy neighbour slows
steps close in time alike. Each overhead is the median of those paired differences, in CPU
time of the training thread. Prints one JSON object."""
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
os.environ.setdefault("MEMTRACE_LIBRARY", str(BUILD / "allocator" / "libmemtrace.so"))
sys.path.insert(0, str(ROOT / "python"))

import mem_tracer
import torch
from torch import nn

ROUNDS = 80

torch.manual_seed(0)
torch.set_num_threads(1)  # steadier on a shared machine; the hooks' cost does not scale with threads
layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.1, batch_first=True)
model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Linear(128, 128))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
x, y = torch.randn(8, 64, 128), torch.randn(8, 64, 128)


def step():
    # CPU time of this thread (torch runs on it alone: set_num_threads(1), and backward on the
    # CPU runs on the caller's thread): what other processes on a shared machine do changes
    # it far less than the wall time.
    start = time.thread_time()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.thread_time() - start


# What each kind of step runs under: None untraced, else start_tracing()'s arguments.
KINDS = {
    "untraced": None,
    # The hooks that decide categories, phases and steps, and nothing else.
    "categories": {"model": model, "modules": False},
    # start_tracing(): nn.Module attribution (forward) and the optimizer's hooks.
    "modules": {},
    # start_tracing(model=model): all of it, with the backward's module attribution.
    "training": {"model": model},
}


def main():
    # On the CPU no storage is memtrace's, so the package would name none to the recorder and
    # skip the calls that a GPU's run makes: each storage is named by its host address
    # instead, so that every category a GPU's run tells (one per saved tensor, per .grad, per
    # state tensor) is a call here too (the recorder ignores an address it has no allocation
    # at, after looking it up, as it would look up a real one).
    from mem_tracer import training
    training._set_address_resolver(lambda tensor: tensor.untyped_storage().data_ptr() or None)
    differences = {kind: [] for kind in KINDS if KINDS[kind] is not None}
    untraced_times = []
    with tempfile.TemporaryDirectory() as work, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "allocations do not go through memtrace": on purpose
        trace = Path(work) / "bench.bin"
        for _ in range(3):
            step()  # warm up
        kinds = list(KINDS.items())
        for round_number in range(ROUNDS):
            # One step of each kind, in turn (the order reversed every other round); each
            # traced step is compared with the untraced step of its own round.
            timed = {}
            for kind, arguments in kinds if round_number % 2 else reversed(kinds):
                if arguments is not None:
                    mem_tracer.start_tracing(trace, **arguments)
                timed[kind] = step()
                if arguments is not None:
                    mem_tracer.stop_tracing()
            untraced_times.append(timed["untraced"])
            for kind, values in differences.items():
                values.append(timed[kind] - timed["untraced"])
        records = trace.stat().st_size
    untraced = statistics.median(untraced_times)
    result = {"model": "2-layer TransformerEncoder d=128, batch 8x64, AdamW, 1 thread",
              "untraced_ms": untraced * 1e3, "trace_bytes": records}
    for kind, values in differences.items():
        extra = statistics.median(values)
        result[f"{kind}_ms"] = (untraced + extra) * 1e3
        result[f"{kind}_overhead_percent"] = 100 * extra / untraced
    print(json.dumps(result))


main()
