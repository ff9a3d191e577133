"""Compiled code named by the user's source (Note [Generated code] in tracer/format/records.h):
a model compiled with torch.compile, run as a user runs it, `memtrace run program.py`, on the
simulated H200 with PyTorch's CUDA build (inductor and triton compile there; no kernel runs).
Every allocation a compiled graph makes is a line of the code inductor generated; by default
the report names it by the line of the model's forward that the graph's node came from, for
the forward's graph and the backward's, compiled now or found in inductor's cache, and for
mode="reduce-overhead" (CUDA graphs: their trees need PyTorch's caching allocator, which memtrace
leaves in place and records from inside); `--frame innermost` still names the generated line.

Three runs share one inductor cache (a folder of the test's): inference, traced the package's
way (switch_allocator(), trace(): PyTorch's pluggable allocator); then, under `memtrace run`, a
training step whose program first repeats the inference (inductor's cache then holds that
graph); and the CUDA graphs' run beside the first. What this assumes of the real platform:
nothing beyond what the other tests of the simulated device do; inductor generates the same
code for the card."""
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from memtrace_testing import ROOT, parse_records, report_json, run

PROGRAM = '''import contextlib
import sys

import torch
from torch import nn

mode = sys.argv[1]
if mode == "forward":  # the package's way in: PyTorch's pluggable allocator, trace()
    import mem_tracer
    mem_tracer.switch_allocator()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(256, 8192)
        self.down = nn.Linear(8192, 256)

    def forward(self, x):
        hidden = torch.relu(self.up(x))  # FORWARD
        return self.down(hidden) * 2  # FORWARD


model = MLP().cuda()
compiled = torch.compile(model, mode="reduce-overhead" if mode == "graphs" else "default")
x = torch.randn(16384, 256, device="cuda")
traced = mem_tracer.trace(sys.argv[2]) if mode == "forward" else contextlib.nullcontext()
with traced, torch.no_grad():
    for _ in range(3 if mode == "graphs" else 1):
        compiled(x)
if mode == "train":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        compiled(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
'''
FORWARD_LINES = {f"program.py:{number} (forward)"
                 for number, text in enumerate(PROGRAM.splitlines(), 1) if "# FORWARD" in text}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    work = tmp_path_factory.mktemp("compiled")
    program = work / "program.py"
    program.write_text(PROGRAM)
    cache = work / "inductor"

    def traced(mode, **env):
        trace = work / f"{mode}.bin"
        memtrace_run = [] if mode == "forward" else ["-m", "mem_tracer", "run", "-q", "-o", trace]
        run([sys.executable, *memtrace_run, program, mode, trace],
            {"PYTHONPATH": str(ROOT / "python"), "TORCHINDUCTOR_CACHE_DIR": str(cache), **env},
            timeout=600)
        return trace

    with ThreadPoolExecutor(2) as both:
        forward = both.submit(traced, "forward")
        graphs = both.submit(traced, "graphs")
        traces = {"forward": forward.result(), "graphs": graphs.result()}
    traces["train"] = traced("train")  # after "forward": its inference graph is in the cache
    return cache, traces


def rows_at_peak(trace, *options):
    return report_json(trace, "--top", "0", *options)["live"]["rows"]


def named_by_forward(rows):
    """The share of the rows' bytes named by a line of the model's forward."""
    named = sum(row["bytes"] for row in rows
                if re.sub(r".*/", "", row["location"]) in FORWARD_LINES)
    return named / sum(row["bytes"] for row in rows)


@pytest.mark.parametrize("mode", ["forward", "train", "graphs"])
def test_the_models_lines_name_what_the_compiled_graphs_allocate(traces, mode):
    cache, trace = traces[0], traces[1][mode]
    rows = rows_at_peak(trace)
    # Every row is a line of the program (none is inductor's code, or torch's), or what was live
    # before trace() began.
    assert all(row["location"].startswith(str(cache.parent / "program.py:"))
               or row["kind"] == "untraced" for row in rows), [row["location"] for row in rows]
    # What is not the forward's: the weights (model = ...) and the input (x = ...).
    assert named_by_forward(rows) >= 0.9, [(row["location"], row["bytes"]) for row in rows]


def test_the_generated_line_is_one_option_away(traces):
    cache, trace = traces[0], traces[1]["forward"]
    rows = rows_at_peak(trace, "--frame", "innermost")
    assert any(str(cache) in row["location"] and row["location"].endswith("(call)")
               for row in rows), [row["location"] for row in rows]


def test_a_graph_from_inductors_cache_is_named_too(traces):
    """The training step's program ran the inference graph the first run compiled: inductor
    loaded it from its cache, and its stretches were told as a new graph's are."""
    records = {mode: parse_records(trace) for mode, trace in traces[1].items()}

    def generated_files(mode):
        strings = {record["id"]: record["words"] for record in records[mode]
                   if record["record"] == "string"}
        return {strings[record["file"]][0].strip('"') for record in records[mode]
                if record["record"] == "generated-code"}

    inference = generated_files("forward")
    assert len(inference) == 1, inference
    assert inference < generated_files("train"), generated_files("train")
    # The CUDA graphs' partitions (Note [The line maps of graph partitions]).
    assert generated_files("graphs")
