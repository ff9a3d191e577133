"""tests/gpu runs only where PyTorch sees a CUDA GPU. Elsewhere the whole folder exits with
status 77, which ctest reports as skipped (not as passed)."""
import pytest


def pytest_configure(config):
    try:
        import torch
        available = torch.cuda.is_available()
    except ImportError:
        available = False
    if not available:
        pytest.exit("no CUDA GPU visible to PyTorch: tests/gpu skipped", returncode=77)
