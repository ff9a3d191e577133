"""`pip install .`, exactly as the README's "Installing" says it, from a clean copy of the
repository into a fresh venv of CPython 3.10 with an older torch release's CUDA build from PyPI
(Note [Installed as users install it] in installing.py): the estimator builds against that torch
without CUDA's libraries (Note [LibTorch without CUDA] in estimator/CMakeLists.txt), and the
product runs from outside the copy."""
import re

import pytest
from installing import (
    MODEL,
    clean_copy,
    in_venv,
    make_venv,
    python_of,
    runs_the_product_on_the_simulated_card,
    says_its_capabilities,
)
from memtrace_testing import ROOT

# An older release than the tests' venv (2.14.1): its own bridge must be the one that attaches.
OLDER_TORCH = "2.11.0"


def readme_install_commands():
    """The commands of the README's "Installing" block, comments dropped."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Installing", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines()
            if line.split("#", 1)[0].strip()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("pip")
    copy = clean_copy(work / "memtrace")
    bin_dir = make_venv(python_of("3.10"), work / "venv")
    commands = readme_install_commands()
    assert commands == ["pip install torch", "pip install ."], commands
    for command in commands:
        words = command.split()
        # The one change to the README's words: which torch release (the README takes the
        # newest; this test an older one, whose bridge must then be the one that attaches).
        words = [f"torch=={OLDER_TORCH}" if word == "torch" else word for word in words]
        in_venv(bin_dir, *words, cwd=copy, timeout=2400)
    in_venv(bin_dir, "pip", "install", "-q", "pytest", cwd=copy)
    return bin_dir, work


def test_the_product_runs_where_pip_installed_it(installed, tmp_path):
    bin_dir, _ = installed
    work = tmp_path / "work"
    work.mkdir()
    said = says_its_capabilities(bin_dir, work, OLDER_TORCH)
    assert f"memtrace-estimate: built against torch {OLDER_TORCH}+cu130" in said, said
    runs_the_product_on_the_simulated_card(bin_dir, work)


def test_the_estimator_built_against_the_cuda_build(installed, tmp_path):
    bin_dir, _ = installed
    work = tmp_path / "work"
    work.mkdir()
    model = work / "model.pt"
    in_venv(bin_dir, "python", "-c", MODEL, model, cwd=work)
    estimate = in_venv(bin_dir, "memtrace-estimate", model, "--input", "32x64", cwd=work).stdout
    # Predicted for the torch it runs beside: 2.11 keeps cuBLASLt's 1 MiB workspace beside
    # cuBLAS's 8.12 MiB (Note [The cuBLASLt workspace] in replay_caching_allocator.cpp).
    assert "device profile cuda (torch 2.11)" in estimate, estimate
    assert "cuBLASLt workspace 1.00 MiB" in estimate, estimate
    assert re.search(r"peak allocated +9\.27 MiB", estimate), estimate
