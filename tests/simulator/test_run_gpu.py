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


def memtrace_run(*arguments, check=True):
    # Not on the tests' own simulated card: memtrace run --gpu puts the program on its own.
    import memtrace_testing
    saved, memtrace_testing.SIMULATED_GPU = memtrace_testing.SIMULATED_GPU, None
    try:
        return run([sys.executable, "-m", "mem_tracer", "run", *map(str, arguments)],
                   {"PYTHONPATH": str(ROOT / "python")}, check=check, timeout=600)
    finally:
        memtrace_testing.SIMULATED_GPU = saved


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
    trace = tmp_path / "generate.bin"
    result = memtrace_run("--gpu", "h100", "--gpu-max-reads", "300", "-q", "-o", trace,
                          HERE / "programs" / "generate_hf.py", check=False)
    assert result.returncode == 4, result.stderr[-2000:]
    assert "past the limit (MEMTRACE_GPU_MAX_READS=300)" in result.stderr
    assert "STOPPED on a simulated NVIDIA H100 80GB HBM3" in result.stderr
    assert "generated" not in result.stdout
    reads = report_json(trace)["device_reads"]
    assert reads["count"] == 300
    # The lines that read are transformers' generation loop's.
    assert any("generation" in row["location"] for row in reads["rows"]), reads["rows"][:3]
