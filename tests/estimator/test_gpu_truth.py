"""Inference measured on a real GPU (an H200, torch 2.11: truth-h200.json), predicted on this CPU.

What must stay true (issue 23): on models built like the measured ones (the same weight bytes,
the same bytes allocated before the forward: else the comparison says nothing), each row's
max_memory_allocated(), requested_bytes.all.peak and max_memory_reserved() within 3 % of the
prediction made with the cuda-sm90 profile for the torch the GPU ran, where no convolution
runs. With convolutions, cuDNN picks its workspace at run time and the estimate leaves it out
(and says so): there the prediction must not exceed the measurement.
The rules these rows check are PyTorch's, read in its sources (the cuBLAS and cuBLASLt
workspaces, the caching allocator): the rows are never fitted.

What it assumes of the GPU: the H200's numbers in truth-h200.json, measured once
(docs/gpu-record-h200.md); a GPU run of tests/estimator/gpu_compare.py checks the same rules on
the test models.
"""

import pytest

import gpu_compare
import gpu_truth
from conftest import estimator_binary


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The folder of the traced models (gpu_truth.compare names them MODEL-DTYPE.pt)."""
    return tmp_path_factory.mktemp("gpu-truth")


@pytest.fixture(scope="module")
def results(exported):
    _, rows = gpu_truth.compare(estimator_binary(), exported)
    return rows


def test_every_inference_row_is_compared(results):
    _, rows = gpu_truth.truth()
    assert len(results) == len(rows) >= 12
    assert {result["row"]["model"] for result in results} == {"gpt2", "bert", "resnet50"}


def test_the_models_are_the_measured_ones(results):
    for result in results:
        row, summary = result["row"], result["summary"]
        assert summary["weight_bytes"] == row["weights_bytes"], row
        assert summary["input_bytes"] == row["input_bytes"], row
        assert summary["baseline_allocated_bytes"] == row["allocated_before_forward"], row


def convolutions(row):
    return row["model"] == "resnet50"


@pytest.mark.parametrize("measured", ["max_allocated", "max_requested"])
def test_peaks_within_three_percent_without_convolutions(results, measured):
    off = {f"{r['row']['model']} {r['row']['dtype']} b{r['row']['batch']}": round(
        r["errors"][measured], 2) for r in results
        if not convolutions(r["row"]) and abs(r["errors"][measured]) > 3.0}
    assert not off, off


@pytest.mark.parametrize("measured", ["max_allocated", "max_requested", "max_reserved"])
def test_convolution_workspaces_are_left_out_and_said(results, measured):
    # cuDNN picks a convolution's workspace at run time; the estimate leaves it out (it says
    # so: convolution_workspace_bound_bytes 0), so it may only fall short of the measurement.
    # ResNet-50 at batch 8 falls short by one (8, 64, 56, 56) activation: docs/accuracy.md.
    for result in results:
        if convolutions(result["row"]):
            assert result["summary"]["convolution_workspace_bound_bytes"] is None
            assert result["errors"][measured] <= 0.0, result["row"]


def test_reserved_within_three_percent_without_convolutions(results):
    for result in results:
        row, error = result["row"], result["errors"]["max_reserved"]
        if not convolutions(row):
            assert abs(error) <= 3.0, f"{row['model']} {row['dtype']} b{row['batch']}: {error:+.2f} %"


def test_the_cublaslt_workspace_is_the_releases(results, exported):
    # torch 2.11 keeps 1 MiB for cuBLASLt beside cuBLAS's 32 MiB; 2.12 and later share cuBLAS's
    # (Note [The cuBLASLt workspace]). The same trace estimated for both releases.
    for result in results:
        assert result["summary"]["cublas_workspace_bytes"] == 32 << 20
        assert result["summary"]["cublaslt_workspace_bytes"] == 1 << 20
    env, rows = gpu_truth.truth()
    row = next(row for row in rows if row["model"] == "bert" and row["dtype"] == "fp16")
    path = exported / "bert-fp16.pt"
    older = gpu_truth.predict(estimator_binary(), path, row, "2.11")
    newer = gpu_truth.predict(estimator_binary(), path, row, "2.14")
    assert newer["cublaslt_workspace_bytes"] == 0
    assert older["peak_requested_bytes"] - newer["peak_requested_bytes"] == 1 << 20


def test_gpu_compare_never_stops_on_a_row():
    # A failing export, estimate or measurement is a row with its error, counted as over the
    # budget; the run goes on (gpu_compare.py runs only where a GPU is).
    with pytest.raises(gpu_compare.RowError, match=r"exited 3: the last line"):
        gpu_compare.checked(["sh", "-c", "echo first >&2; echo the last line >&2; exit 3"])
    text, worst = gpu_compare.row("bert", "traced", 1, "torchscript",
                                  gpu_compare.RowError("python3 exited 1: RuntimeError: x"), {})
    assert "error: python3 exited 1: RuntimeError: x" in text and worst == float("inf")
    assert text.count("|") == 14  # the table's 13 cells
    summary = {"peak_allocated_bytes": 103, "peak_requested_bytes": 100, "peak_reserved_bytes": 200}
    measured = {"allocated": 100, "requested": 100, "reserved": 100}
    text, worst = gpu_compare.row("bert", "traced", 1, "eager", summary, measured)
    assert worst == pytest.approx(3.0) and "+100.00 %" in text  # reserved shown, not counted
