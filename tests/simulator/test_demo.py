"""`make demo` as a newcomer runs it on a machine without a GPU (tools/demo.sh): the demo's
model traced on a simulated H100 with PyTorch's CUDA build, predicted on the CPU, one report."""
import re

from memtrace_testing import BUILD, ROOT, run


def demo():
    """What `make demo` prints: tools/demo.sh run from the checkout, as make runs it."""
    return run([ROOT / "tools" / "demo.sh", BUILD], timeout=600, cwd=ROOT).stdout


def test_the_demo_runs_on_the_simulated_h100():
    said = demo()
    assert "memtrace demo on a SIMULATED NVIDIA H100 80GB" in said
    assert re.search(r"device 0 +NVIDIA H100 80GB HBM3, 79\.65 GiB \(SIMULATED: profile h100-80gb",
                     said), said
    measured = int(re.search(r"Peak memory: .* \((\d+) bytes\)", said).group(1))
    predicted = int(re.search(r"Predicted peak: .* \((\d+) bytes\)", said).group(1))
    # The estimator's budget on a GPU (docs/accuracy.md): within 3 % of the measured peak.
    assert abs(predicted - measured) <= 0.03 * measured, (predicted, measured)
    assert "tiny_gpt.py" in said  # the model's own lines name the rows (--frame user)
    # Named as the user would type them from where make ran: the model's lines relative to the
    # checkout, never by the absolute path of the machine the demo ran on.
    assert re.search(r"  tools/demo/tiny_gpt\.py:\d+ \(forward\)", said), said
    assert f"{ROOT}/tools" not in said, said
    assert (BUILD / "demo" / "tiny_gpt.html").stat().st_size > 10_000
