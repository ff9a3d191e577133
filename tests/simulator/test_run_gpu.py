"""`memtrace run --gpu PROFILE`: the program on a simulated card, traced, and the verdict a
pipeline gates on (Note [Will it fit] in python/mem_tracer/cli.py): a Llama-style 7B bf16
training step fits an H100 80GB and not an L4, and either way on this machine's host memory."""
import json
import re
import sys
from pathlib import Path

from memtrace_testing import ROOT, report_json, run

HERE = Path(__file__).resolve().parent
STEP = HERE / "scripts" / "llama7b_step.py"
GiB = 1 << 30


def on_its_own_card(command, check=True):
    # Not on the tests' own simulated card: the command puts the program on its own.
    return run([sys.executable, *map(str, command)], {"PYTHONPATH": str(ROOT / "python")},
               check=check, timeout=600, own_card=True)


def memtrace_run(*arguments, check=True):
    return on_its_own_card(["-m", "mem_tracer", "run", *arguments], check=check)


def test_a_7b_training_step_fits_an_h100(tmp_path):
    trace = tmp_path / "h100.bin"
    result = memtrace_run("--gpu", "h100", "-q", "-o", trace, STEP)
    said = json.loads(result.stdout.strip().splitlines()[-1])
    assert 6.7e9 < said["parameters"] < 6.8e9
    # bf16 weights and gradients and AdamW's two bf16 moments: 8 bytes a parameter at least,
    # and under the card's 80 GiB.
    assert 8 * said["parameters"] < said["peak"] < 80 * GiB
    assert said["max_rss_bytes"] < 4 * GiB  # no weight, gradient or state on the host
    assert "FITS on a simulated NVIDIA H100 80GB HBM3" in result.stderr
    assert report_json(trace)["summary"]["peak_bytes"] > 8 * said["parameters"]


def test_it_does_not_fit_an_l4_and_says_where(tmp_path):
    trace = tmp_path / "l4.bin"
    result = memtrace_run("--gpu", "l4", "-q", "-o", trace, STEP, check=False)
    assert result.returncode == 3, result.stderr[-2000:]
    assert re.search(r"DID NOT FIT on a simulated NVIDIA L4 \(l4, 22\.5 GiB\)", result.stderr)
    assert "OutOfMemoryError" in result.stderr
    report = report_json(trace, "--at", "oom")
    assert report["summary"]["failed_allocations"] >= 1
    assert report["live"]["rows"], "what was live when it ran out"


def test_a_card_that_is_not_there_and_a_cpu_build_are_refused_in_one_line(tmp_path):
    result = memtrace_run("--gpu", "h1000", STEP, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "no GPU profile 'h1000' (there are: a100-40gb, a100-80gb, h100-80gb, h200, l4, "
        "rtx-4090; or give a profile file)")
    cpu = run(["python3", "-m", "mem_tracer", "run", "--gpu", "h100", STEP],
              {"PYTHONPATH": str(ROOT / "python")}, check=False)
    assert cpu.returncode == 2
    assert "the torch this Python imports is a CPU build" in cpu.stderr


def test_a_loop_waiting_on_a_computed_value_is_stopped(tmp_path):
    # With every value a kernel computes read as zero (--values zeros: what the simulated card
    # did before Note [Known values on the simulated card]), generate()'s stop test is never
    # True; test_values.py has it end by default.
    trace = tmp_path / "generate.bin"
    result = memtrace_run("--gpu", "h100", "--values", "zeros", "--gpu-max-reads", "300", "-q",
                          "-o", trace, HERE / "programs" / "generate_hf.py", check=False)
    assert result.returncode == 4, result.stderr[-2000:]
    assert "past the limit (MEMTRACE_GPU_MAX_READS=300)" in result.stderr
    assert "STOPPED on a simulated NVIDIA H100 80GB HBM3" in result.stderr
    assert "generated" not in result.stdout
    reads = report_json(trace)["device_reads"]
    assert reads["count"] == 300
    # By default the reads are the user's generate() call's; the lines that read are
    # transformers' generation loop's.
    assert [row["file"] for row in reads["rows"]] == [str(HERE / "programs" / "generate_hf.py")]
    inner = report_json(trace, "--frame", "innermost")["device_reads"]
    assert any("generation" in row["location"] for row in inner["rows"]), inner["rows"][:3]


def test_tracing_changes_none_of_pytorchs_peaks(tmp_path):
    # An ImageNet-style loop in a function, its model an unnamed root called from it (issue
    # 48): naming the model kept none of train()'s locals alive, so PyTorch's own peaks are the
    # untraced run's to the byte (reading train()'s f_locals kept its first batch, target and
    # output: 4,945,152 bytes more requested at the peak under CPython 3.11).
    script = HERE / "programs" / "imagenet_loop.py"
    traced = memtrace_run("--gpu", "h100", "-q", "-o", tmp_path / "loop.bin", script)
    untraced = on_its_own_card(["-m", "mem_tracer.simulated_gpu", "h100", "--", sys.executable,
                                script])
    peaks = json.loads(untraced.stdout.strip().splitlines()[-1])
    assert peaks["requested_bytes.all.peak"] > 32 * 3 * 112 * 112 * 4  # a batch was on the card
    assert json.loads(traced.stdout.strip().splitlines()[-1]) == peaks
    assert "FITS on a simulated NVIDIA H100 80GB HBM3" in traced.stderr
    # And the trace's peaks are PyTorch's (Note [PyTorch's counters beside the trace] in
    # cli.py): `memtrace run` says nothing of them.
    assert "PyTorch's own counters" not in traced.stderr


def test_pytorchs_peaks_that_differ_from_the_traces_are_said(tmp_path):
    # The program resets PyTorch's peaks after freeing 64 MiB: PyTorch's requested and allocated
    # peaks are then the 1 MiB it made after, the trace's the 64 MiB; the reserved peaks agree.
    result = memtrace_run("--gpu", "h100", "-q", "-o", tmp_path / "reset.bin",
                          HERE / "programs" / "reset_peaks.py")
    said = [line for line in result.stderr.splitlines() if "PyTorch's own counters" in line]
    assert said == [
        "== memtrace: PyTorch's own counters differ from the trace: device 0's "
        "requested_bytes.all.peak is 1,048,576 B, the trace's 67,108,864 B (66,060,288 B more); "
        "device 0's allocated_bytes.all.peak is 1,048,576 B, the trace's 67,108,864 B "
        "(66,060,288 B more) (a program that calls torch.cuda.reset_peak_memory_stats() lowers PyTorch's peaks, not "
        "the trace's)"]
    assert report_json(tmp_path / "reset.bin")["summary"]["peak_bytes"] == 64 << 20
