"""memtrace-estimate on inputs too large for any tensor (issue 12, row 7): one line naming the
input, exit status 2, never LibTorch's "Storage size calculation overflowed" as an internal
error."""

import pytest
import torch
import torch.nn as nn

from conftest import assert_bad_input, run_estimator


class Double(nn.Module):
    def forward(self, x):
        return x * 2


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("bounds") / "double.pt"
    torch.jit.script(Double().eval()).save(str(path))
    return path


@pytest.mark.parametrize("shape, named", [
    ("9223372036854775807x8", "--input 9223372036854775807x8"),
    ("4294967296x4294967296", "--input 4294967296x4294967296"),
    # 2^61 float32 elements: 2^63 bytes, one past what an int64 holds.
    ("2305843009213693952", "--input 2305843009213693952"),
    ("1x1152921504606846976:complex128", "--input 1x1152921504606846976:complex128"),
])
def test_an_input_past_int64_bytes_is_named(model, shape, named):
    assert_bad_input(run_estimator(model, "--input", shape), named, "too large")


def test_a_batch_past_int64_bytes_is_named(model):
    assert_bad_input(run_estimator(model, "--input", "2x8", "--batch", "9223372036854775807"),
            "batch 9223372036854775807", "9223372036854775807x8:float32", "too large")
    # Whichever batch of a sweep is too large.
    assert_bad_input(run_estimator(model, "--input", "2x8", "--batch", "1,2,1152921504606846976"),
            "batch 1152921504606846976", "too large")


def test_a_large_input_that_fits_is_still_estimated(model):
    # 4 TiB: far more than any device has, but a size: the estimator answers.
    result = run_estimator(model, "--input", "1099511627776", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert str(4 << 40) in result.stdout  # the input's bytes
