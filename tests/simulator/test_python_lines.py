"""Python lines under PyTorch's CUDA build on the simulated GPU (simulator/; no GPU needed), where
real torch ops release the GIL around each allocation and autograd runs backward on the
device's own thread, as on a GPU. Runs under the interpreter of the venv with the CUDA build of
torch (ctest entry `simulated`, skipped without it).

- Code objects made and dropped by the thousand (torch.fx's generated forwards): each allocation
  named by its own generated forward (Note [Code objects that die],
  tracer/recorder/python_stack.cpp).
- Backward inside backward, two backwards at once, an exception inside backward: each allocation
  named by the innermost line of the script that caused it, under a bare LD_PRELOAD (nothing of
  memtrace imported: Note [Interposing autograd's engine], allocator/autograd_hooks.cpp) and
  through the package's switch_allocator() (Note [Stacks lent to threads without Python],
  tracer/recorder/lent_stacks.cpp)."""
import os
import re
import sys
from pathlib import Path

import pytest

from memtrace_testing import ROOT, Build, allocation_stacks, parse_records, run

sys.path.insert(0, str(ROOT / "python"))
from mem_tracer import simulated_gpu  # noqa: E402

SCRIPTS = Path(__file__).parent / "scripts"


def tagged_lines(script):
    """{name: line} of the lines a script marks `# LINE:name`."""
    return {match.group(1): number
            for number, text in enumerate(script.read_text().splitlines(), start=1)
            for match in [re.search(r"# LINE:(\w+)", text)] if match}


def on_the_simulated_gpu(command, trace, how="preload", timeout=300):
    """Runs `command` (a script and its arguments) on a simulated H200, traced into `trace`: under
    a bare LD_PRELOAD (`preload`), by `memtrace run` (`run`: LD_PRELOAD and the package's
    training hooks), or with nothing preloaded but the simulator (`switch`: the script loads
    memtrace itself)."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("MEMTRACE_") and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    base["PYTHONPATH"] = str(ROOT / "python")
    if how == "preload":
        base.update(LD_PRELOAD=str(Build.library), MEMTRACE_OUTPUT=str(trace))
    env = simulated_gpu.environment("h200", base=base)
    if how == "run":
        command = ["-m", "mem_tracer", "run", "--output", trace, *command]
    return run([sys.executable, *map(str, command)], env, timeout=timeout)


def script_frames(frames, script):
    """The frames of `frames` (outermost first) in `script`, innermost first, as line numbers."""
    return [line for file, line, _ in reversed(frames) if file == str(script)]


def test_every_fx_generated_forward_names_its_own_allocations(build, tmp_path):
    trace = tmp_path / "fx.bin"
    result = on_the_simulated_gpu([SCRIPTS / "fx_churn.py", 300], trace)
    generated = [line.split("|") for line in result.stdout.splitlines()]
    assert len(generated) == 300 and len({file for file, _ in generated}) == 300
    # Each module's forward makes three allocations (linear, relu, * 2), each named by its own
    # generated file and one of its lines; in the order the modules ran.
    # (The linear's innermost frame is nn.Linear's forward, called by the generated one.)
    named = [generated_frames[-1] for generated_frames in
             ([frame for frame in frames if frame[0].startswith("<eval_with_key>")]
              for _, _, frames in allocation_stacks(trace)) if generated_frames]
    # At least one allocation per operation of each module (linear, relu, * 2; the first matmul
    # also makes cuBLAS's workspace), named by the generated files in the order the modules ran,
    # each at one of its file's lines: a forward named after an earlier one breaks the order.
    assert len(named) >= 3 * 300
    order = [named[0][0]] + [after[0] for before, after in zip(named, named[1:])
                             if after[0] != before[0]]
    assert order == [file for file, _ in generated]
    lines_of = {file: set(map(int, lines.split(","))) for file, lines in generated}
    wrong = [frame for frame in named if frame[1] not in lines_of[frame[0]] or frame[2] != "forward"]
    assert not wrong, wrong[:5]

def traced_backward(tmp_path, case, how):
    """Runs scripts/backward.py CASE HOW: its allocations as (thread, size, script lines
    innermost first), and its tagged lines."""
    trace = tmp_path / f"{case}-{how}.bin"
    script = SCRIPTS / "backward.py"
    result = on_the_simulated_gpu([script, case, how, trace], trace, how)
    assert "done" in result.stdout.splitlines()
    # No warning of memtrace's; `run` says it compacted the trace (Note [memtrace run compacts
    # the trace] in python/mem_tracer/cli.py), and nothing else.
    said = [line for line in result.stderr.splitlines() if "memtrace:" in line]
    compacted = [line for line in said if line.startswith("== memtrace: trace compacted: ")]
    assert said == compacted and len(compacted) == (how == "run"), result.stderr
    allocations = [(thread, size, script_frames(frames, script))
                   for thread, size, frames in allocation_stacks(trace)]
    return allocations, tagged_lines(script)


HOWS = ["preload", "run", "switch"]


@pytest.mark.parametrize("how", HOWS)
def test_reentrant_checkpoint_names_the_backward_line(build, tmp_path, how):
    allocations, line = traced_backward(tmp_path, "checkpoint", how)
    # Every allocation has a line of the script; backward's (those under loss.backward()) are
    # named by it, or by the block's forward the checkpoint recomputes inside it.
    assert all(lines for _, _, lines in allocations), [a for a in allocations if not a[2]][:5]
    backward = [lines for _, _, lines in allocations if line["ck_backward"] in lines]
    recomputed = [lines for lines in backward if lines[0] != line["ck_backward"]]
    assert backward and recomputed
    assert all(lines[0] == line["ck_backward"] or
               (lines[0] in (line["up"], line["down"]) and lines[1] == line["ck_backward"])
               for lines in backward), backward
    # The device thread made them, not the thread that called backward.
    main_thread = allocations[0][0]
    assert {thread for thread, _, lines in allocations if line["ck_backward"] in lines} - {main_thread}
    # Nothing else names backward: the forward's allocations have the forward's lines only.
    forward = [lines for _, _, lines in allocations if line["ck_forward"] in lines]
    assert forward and all(line["ck_backward"] not in lines for lines in forward)
    if how == "run":
        # The recomputations are part of backward: one forward, one backward, one end (before:
        # each recomputation was a forward of its own, each inner backward's end the step's).
        phases = [r["phase"] for r in parse_records(tmp_path / "checkpoint-run.bin")
                  if r["record"] == "training-phase"]
        assert phases == ["forward", "backward", "none"], phases


@pytest.mark.parametrize("how", HOWS)
def test_grad_inside_a_custom_backward(build, tmp_path, how):
    allocations, line = traced_backward(tmp_path, "grad_in_backward", how)
    assert all(lines for _, _, lines in allocations), [a for a in allocations if not a[2]][:5]
    innermost = {lines[0] for _, _, lines in allocations if line["gb_backward"] in lines}
    # The inner forward and grad() are named by their own lines, then loss.backward()'s; the rest
    # of the outer backward (after the inner grad() returned) by loss.backward() again.
    assert innermost >= {line["inner_forward"], line["inner_grad"], line["gb_backward"]}, innermost
    assert innermost <= {line["inner_forward"], line["inner_grad"], line["combine"],
                         line["gb_backward"]}, innermost
    inner = [lines for _, _, lines in allocations if lines[0] == line["inner_grad"]]
    assert all(lines[-2] == line["gb_backward"] for lines in inner)


@pytest.mark.parametrize("how", HOWS)
def test_two_threads_in_backward_at_once(build, tmp_path, how):
    allocations, line = traced_backward(tmp_path, "threads", how)
    assert all(lines for _, _, lines in allocations), [a for a in allocations if not a[2]][:5]
    # Every tensor of thread a's model has a byte size that is a multiple of 7 * 512, and none of
    # thread b's is (and the other way round, with 11): each backward's allocations must be
    # named by their own thread's backward line.
    named = {"a": [], "b": []}
    for _, size, lines in allocations:
        for which in named:
            if line[f"backward_{which}"] in lines:
                named[which].append(size)
    assert len(named["a"]) > 30 and len(named["b"]) > 30
    wrong = ([size for size in named["a"] if size % (11 * 512) == 0 and size % (7 * 512)] +
             [size for size in named["b"] if size % (7 * 512) == 0 and size % (11 * 512)])
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("how", HOWS)
def test_an_exception_inside_backward_leaves_no_lend_behind(build, tmp_path, how):
    allocations, line = traced_backward(tmp_path, "exception", how)
    assert all(lines for _, _, lines in allocations), [a for a in allocations if not a[2]][:5]
    failing = [i for i, (_, _, lines) in enumerate(allocations) if line["ex_failing"] in lines]
    after = [i for i, (_, _, lines) in enumerate(allocations) if line["ex_backward"] in lines]
    assert failing and after and max(failing) < min(after)
    # The backward after the failed one is named by its own line, never by the failed one's.
    assert all(line["ex_failing"] not in lines for _, _, lines in allocations[max(failing) + 1:])


@pytest.mark.parametrize("how", HOWS)
def test_python_frames_of_the_device_thread_before_the_lent_ones(build, tmp_path, how):
    # A custom Function's backward is Python run by autograd's device thread: its allocations are
    # named by its own frames, then by the lend of the thread waiting in loss.backward(). The loop
    # makes the device thread's walks stop at a frame met again, with the reused outer frames left
    # in place (Note [The reused tail read in place], tracer/recorder/python_stack.h) or moved (the
    # helper's calls, a frame deeper), before each borrow appends the lend (lent_stacks.cpp).
    allocations, line = traced_backward(tmp_path, "python_backward", how)
    assert all(lines for _, _, lines in allocations), [a for a in allocations if not a[2]][:5]
    main_thread = allocations[0][0]
    # The script's frames outside python_backward(): those of the input's allocation past its line.
    inputs = [lines for _, _, lines in allocations if lines[0] == line["pb_input"]]
    assert len(inputs) == 1, inputs
    outer = inputs[0][1:]
    added = [(thread, lines) for thread, _, lines in allocations if lines[0] == line["pb_add"]]
    helped = [(thread, lines) for thread, _, lines in allocations if lines[0] == line["pb_helper"]]
    # 3 backwards of 8 additions and 4 helper calls each, every one a new tensor.
    assert len(added) == 24 and len(helped) == 12, (len(added), len(helped))
    assert all(lines == [line["pb_add"], line["pb_backward"], *outer] for _, lines in added), added
    assert all(lines == [line["pb_helper"], line["pb_call"], line["pb_backward"], *outer]
               for _, lines in helped), helped
    assert main_thread not in {thread for thread, _ in added + helped}
