"""Every training row measured on an H200 (truth-h200.json), predicted on the CPU with the
`cuda-sm90` profile, the model on the CPU: within 3 % of max_memory_allocated(), and peaking
in the measured phase (gpu_training_truth.py says what the measured program did)."""

import pytest

import gpu_training_truth
from conftest import estimator_binary


@pytest.fixture(autouse=True)
def estimator_on_path(monkeypatch):
    monkeypatch.setenv("MEMTRACE_BIN_DIR", str(estimator_binary().parent))


@pytest.mark.parametrize("row", gpu_training_truth.rows(), ids=lambda row: row["config"])
def test_the_h200_training_step(row):
    estimate = gpu_training_truth.predict(row)
    assert abs(gpu_training_truth.error(estimate, row)) <= gpu_training_truth.TOLERANCE, \
        (estimate.peak_allocated_bytes, row["max_allocated"])
    assert estimate.training_peak_phase == row["peak_phase"]
    expected = "for-loop" if "foreach=False" in row["optimizer"] else "foreach"
    assert estimate.optimizer_implementation == expected
