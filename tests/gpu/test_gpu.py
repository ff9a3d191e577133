"""The real CUDA path: PyTorch's pluggable allocator and LD_PRELOAD, on a small CNN and a
small transformer. The trace's peak must equal PyTorch's requested_bytes.all.peak for the
same code run untraced with PyTorch's own allocator (within 1 %). One process per run."""
import json
import sys
from pathlib import Path

import pytest

from memtrace_testing import report_json, run

MODELS = Path(__file__).parent / "models.py"


def run_model(build, tmp_path, mode, model, env=None):
    out = tmp_path / f"{mode}-{model}.json"
    trace = tmp_path / f"{mode}-{model}.bin"
    command = [sys.executable, MODELS, mode, model, out]
    environment = {"MEMTRACE_LIBRARY": str(build.library)}
    if mode == "pluggable":
        command.append(trace)
    if mode == "preload":
        environment.update(LD_PRELOAD=str(build.library), MEMTRACE_OUTPUT=str(trace))
    environment.update(env or {})
    run(command, environment, timeout=600)
    return json.loads(out.read_text()), trace


@pytest.mark.parametrize("model", ["cnn", "transformer"])
@pytest.mark.parametrize("mode", ["pluggable", "preload"])
def test_traced_peak_equals_pytorch_requested_peak(build, tmp_path, mode, model):
    untraced, _ = run_model(build, tmp_path, "untraced", model)
    said, trace = run_model(build, tmp_path, mode, model)
    report = report_json(trace)
    peak = report["summary"]["peak_bytes"]
    expected = untraced["requested_peak"]
    assert abs(peak - expected) <= 0.01 * expected, (peak, expected)
    assert report["summary"]["level"] == "tensor"
    assert report["summary"]["unmatched_frees"] == 0
    if mode == "pluggable":
        assert said["library_peak"] >= peak
    names = [device["name"] for device in report["devices"]]
    assert names and all(names), "the GPU is named in the trace"


def test_python_lines_of_the_model_are_attributed(build, tmp_path):
    _, trace = run_model(build, tmp_path, "preload", "transformer")
    rows = report_json(trace, "--frame", "user", "--top", "0")["live"]["rows"]
    files = {Path(row["file"]).name for row in rows if row["kind"] == "python"}
    assert "models.py" in files


def test_pytorch_exceptions_still_work_with_native_stacks(build, tmp_path):
    code = ("import torch\n"
            "try:\n"
            "    torch.empty(1 << 50, device='cuda')\n"
            "except torch.OutOfMemoryError:\n"
            "    print('oom caught')\n")
    trace = tmp_path / "oom.bin"
    result = run([sys.executable, "-c", code],
                 {"LD_PRELOAD": str(build.library), "MEMTRACE_OUTPUT": str(trace),
                  "MEMTRACE_STACKS": "all"}, timeout=300)
    assert "oom caught" in result.stdout
    assert report_json(trace)["summary"]["failed_allocations"] >= 1
