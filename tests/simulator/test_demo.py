"""`make demo` as a newcomer runs it on a machine without a GPU (tools/demo.sh): the demo's
model traced on a simulated H100 with PyTorch's CUDA build, predicted on the CPU, one report."""
import re

from memtrace_testing import BUILD, ROOT, run


def test_the_demo_runs_on_the_simulated_h100():
    said = run([ROOT / "tools" / "demo.sh", BUILD], timeout=600).stdout
    assert "memtrace demo on a SIMULATED NVIDIA H100 80GB" in said
    assert re.search(r"device 0 +NVIDIA H100 80GB HBM3, 79\.65 GiB \(SIMULATED: profile h100-80gb",
                     said), said
    measured = int(re.search(r"Peak memory: .* \((\d+) bytes\)", said).group(1))
    predicted = int(re.search(r"Predicted peak: .* \((\d+) bytes\)", said).group(1))
    # The estimator's budget on a GPU (docs/accuracy.md): within 3 % of the measured peak.
    assert abs(predicted - measured) <= 0.03 * measured, (predicted, measured)
    assert "tiny_gpt.py" in said  # the model's own lines name the rows (--frame user)
    assert (BUILD / "demo" / "tiny_gpt.html").stat().st_size > 10_000
