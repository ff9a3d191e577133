"""The program as it is (issue 48): real programs run on the simulated card untraced and under
`memtrace run`, every counter of PyTorch's caching allocator (torch.cuda.memory_stats(): the
requested, allocated, active, reserved bytes and blocks, current and peak, segments, retries,
splits) equal to the byte. A tensor memtrace kept alive (a frame's locals, a batch), a changed
allocator setting, a segment memtrace made or freed, or an extra synchronization would each
change one of them. The simulated card stands for the real one here; what it assumes of it is
what tests/simulator/test_torch_allocator.py checks: PyTorch's own caching allocator runs
unmodified over the simulated cudaMalloc, so its counters are PyTorch's arithmetic over the
program's requests, the same on a card.

Run under the CUDA build's venv (CPython 3.11: simulator.unchanged), and under 3.10, 3.12 and
3.13 by the pythons tier (pythons.unchanged.<version>, label interpreters: make test-pythons;
docs/reliability.md has the last run); the naming that once kept a caller's locals alive is
checked on CPython 3.10 to 3.13 by tests/python/test_naming.py and test_naming_torch.py."""
import json
import sys
from pathlib import Path

import pytest
from memtrace_testing import ROOT, report_json, run

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
COUNTERS = PROGRAMS / "with_counters.py"


def counters(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def untraced_and_traced(tmp_path, program, *arguments, values="known", untraced_values=None):
    """The program's counters untraced on the simulated card (its values as `untraced_values`
    says: "known", or None for no values mode), and under `memtrace run --gpu --values
    VALUES`."""
    command = [COUNTERS, program, *arguments]

    def environment(run_name, **more):
        # Each run compiles from scratch: inductor's cache would spare the second run the
        # first's compilation (and its allocations).
        return {"PYTHONPATH": str(ROOT / "python"),
                "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{run_name}"), **more}
    # Each command puts the program on its own simulated card.
    mode = {"MEMTRACE_TEST_VALUES": untraced_values} if untraced_values else {}
    untraced = run([sys.executable, "-m", "mem_tracer.simulated_gpu", "h100", "--",
                    sys.executable, *map(str, command)], environment("untraced", **mode),
                   timeout=600, own_card=True)
    trace = tmp_path / "traced.bin"
    traced = run([sys.executable, "-m", "mem_tracer", "run", "--gpu", "h100", "--values",
                  values, "-q", "-o", str(trace), *map(str, command)],
                 environment("traced"), timeout=600, own_card=True)
    return counters(untraced.stdout), counters(traced.stdout), traced, trace


# Note [A dispatch mode sums gradients out of place]
# memtrace run --gpu's default values mode ("known", python/mem_tracer/simulated_gpu/values.py) is
# a TorchDispatchMode, and under any such mode (a mode that only calls the op does the same)
# PyTorch's autograd engine sums two gradients of one tensor (a residual's, q, k and v of one
# input) into a new tensor instead of into the first: every op's output has its Python object,
# which holds a reference, so the engine's in-place check (the tensor's only reference) fails.
# Backward then allocated one tensor more at each such sum: on transformers' GPT-2 loop below,
# 27 more allocations over 3 steps (10,973,184 bytes, none live at the peak). So backward runs
# outside the mode (Note [Backward outside the values mode] there), and this file checks it: a
# loop whose path no value decides allocates under the mode exactly as without it.

# The inactive_split counters count the free blocks a split left, which depends on the order
# in which threads free (autograd's device thread, the main one): two untraced runs of the
# Trainer's loop differ in them (709 and 713). Every other counter is compared.
TIMING = ("inactive_split.",)


# The same program untraced and traced, on the same simulated card: its values as `memtrace
# run --gpu` has them by default ("known": what the program determined is known, so a branch on
# an attention mask goes as on the card) in both, or no values mode in either ("zeros").
@pytest.mark.parametrize("values", ["known", "zeros"])
@pytest.mark.parametrize("program,arguments", [
    ("imagenet_loop.py", []),          # a batch in a function's locals, an unnamed root model
    ("dataloader_cnn.py", []),         # DataLoader with two workers, pinned memory
    ("compiled_train.py", []),         # torch.compile (inductor), each run compiling
    pytest.param("transformer_loop.py", [],  # transformers' GPT-2, AdamW, bf16, in a function
                 id="transformer_loop"),
    pytest.param("trainer_gpt2.py", ["OUT", "bf16", "checkpointing"],  # the Trainer's loop
                 id="trainer_gpt2"),
])
def test_every_counter_of_pytorchs_allocator_is_the_untraced_runs(tmp_path, program, arguments,
                                                                  values):
    arguments = [str(tmp_path / "out") if argument == "OUT" else argument
                 for argument in arguments]
    untraced, traced, result, trace = untraced_and_traced(
        tmp_path, PROGRAMS / program, *arguments, values=values,
        untraced_values=None if values == "zeros" else values)
    assert_same_counters(untraced, traced)
    # And the trace's figures are PyTorch's: `memtrace run` compared them and said nothing.
    assert "PyTorch's own counters" not in result.stderr, result.stderr
    summary = report_json(trace)["summary"]
    assert summary["peak_bytes"] == untraced["0"]["requested_bytes.all.peak"]
    assert summary["torch_allocated_peak_bytes"] == untraced["0"]["allocated_bytes.all.peak"]
    assert summary["torch_reserved_peak_bytes"] == untraced["0"]["reserved_bytes.all.peak"]


def test_an_output_the_loss_does_not_use_dies_as_untraced(tmp_path):
    # memtrace's training hooks learn what autograd saves through a saved-tensors pack hook
    # (python/mem_tracer/training.py, Note [What the training hooks save]); returning the tensor
    # itself kept, through a cycle autograd never breaks, every step's unused outputs alive.
    untraced, traced, result, _ = untraced_and_traced(
        tmp_path, PROGRAMS / "unused_output_loop.py", values="known", untraced_values="known")
    assert_same_counters(untraced, traced)
    assert "PyTorch's own counters" not in result.stderr, result.stderr


def assert_same_counters(untraced, traced):
    assert set(untraced) == {"0"}, untraced.keys()
    assert untraced["0"]["requested_bytes.all.peak"] > 1 << 20  # the program used the card
    different = {name: (untraced["0"].get(name), traced["0"].get(name))
                 for name in sorted(set(untraced["0"]) | set(traced["0"]))
                 if untraced["0"].get(name) != traced["0"].get(name)
                 and not name.startswith(TIMING)}
    assert different == {}, different


def test_the_values_mode_leaves_backward_as_without_it(tmp_path):
    # Note [A dispatch mode sums gradients out of place]: GPT-2's loop decides nothing by a
    # value, so under `memtrace run --gpu`'s default values mode it allocates exactly what it
    # allocates with no mode at all (before backward ran outside the mode: 27 allocations more).
    untraced, traced, _, _ = untraced_and_traced(tmp_path, PROGRAMS / "transformer_loop.py",
                                                 values="known", untraced_values=None)
    assert_same_counters(untraced, traced)
