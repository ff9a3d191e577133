"""tests/gpu runs where PyTorch sees a CUDA GPU, and on the simulated GPU when the tests are
told to (MEMTRACE_TEST_GPU=PROFILE: every program they start runs on that simulated card,
memtrace_testing.run). Elsewhere the whole folder exits with status 77, which ctest reports as
skipped (not as passed)."""
import pytest

from memtrace_testing import SIMULATED_GPU


def pytest_configure(config):
    if SIMULATED_GPU:
        import torch
        if not torch.backends.cuda.is_built():
            pytest.exit("MEMTRACE_TEST_GPU needs a CUDA build of torch", returncode=1)
        return
    # Without torch nothing here can run, GPU or not: that fails (scripts/setup.sh installs it).
    import torch
    if not torch.cuda.is_available():
        pytest.exit("no CUDA GPU visible to PyTorch: tests/gpu skipped", returncode=77)
