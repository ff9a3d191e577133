"""mem_tracer on real CUDA: the three-line example under PyTorch's pluggable allocator."""
import json
import os
import sys
from pathlib import Path

import pytest

from memtrace_testing import ROOT, run

HERE = Path(__file__).parent


def three_lines(tmp_path, mode, model):
    out = tmp_path / f"{mode}-{model}.json"
    trace = tmp_path / f"{mode}-{model}.bin"
    run([sys.executable, HERE / "three_lines.py", mode, model, out, trace],
        {"PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(HERE)])}, timeout=600)
    return json.loads(out.read_text()), trace


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_package_peak_equals_pytorch_requested_peak(build, tmp_path, model):
    untraced, _ = three_lines(tmp_path, "untraced", model)
    traced, trace = three_lines(tmp_path, "traced", model)
    expected = untraced["requested_peak"]
    assert abs(traced["max_memory_allocated"] - expected) <= 0.01 * expected
    report = Path(str(trace) + ".txt").read_text()
    assert "Mem         Cumulative Mem  Median" in report and "models.py" in report


def test_switch_allocator_after_cuda_was_used(build):
    code = ("import torch, mem_tracer\n"
            "torch.zeros(1, device='cuda')\n"
            "try:\n"
            "    mem_tracer.switch_allocator()\n"
            "except mem_tracer.MemTracerError as error:\n"
            "    print(error)\n")
    said = run([sys.executable, "-c", code], {"PYTHONPATH": str(ROOT / "python")}).stdout
    assert said.startswith("switch_allocator() came too late")
