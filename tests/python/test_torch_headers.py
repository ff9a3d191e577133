"""Where each torch release's bridge gets its headers (Note [A bridge for every release] in
allocator/torch_bridge/torch_headers.py): the facts read from a release's files, and the
sources taken in order, without PyPI (the download is exercised by every build: make test's
configure step, and tests/wheel's clean copies)."""
import subprocess
import sys

from memtrace_testing import ROOT

SCRIPT = ROOT / "allocator" / "torch_bridge" / "torch_headers.py"
sys.path.insert(0, str(SCRIPT.parent))
import torch_headers  # noqa: E402

CUDA_VERSION_PY = """from typing import Optional
__version__ = '2.12.1+cu130'
cuda: Optional[str] = '13.0'
"""
CPU_VERSION_PY = """__version__ = '2.13.0+cpu'
cuda: Optional[str] = None
"""


def test_release_and_build_of_version_py():
    assert torch_headers.release_of(CUDA_VERSION_PY) == ("2.12.1", True)
    assert torch_headers.release_of(CPU_VERSION_PY) == ("2.13.0", False)
    assert torch_headers.release_of("nothing here") is None


def test_abi_is_the_flag_set_else_the_cxx11_default():
    assert torch_headers.abi_of('set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")') == "0"
    assert torch_headers.abi_of('set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=1")') == "1"
    assert torch_headers.abi_of("if(TORCH_CXX_FLAGS)\n") == "1"


def fake_torch(folder, version_py, macros=True):
    (folder / "include" / "c10" / "cuda" / "impl").mkdir(parents=True)
    if macros:
        (folder / "include" / torch_headers.CUDA_MACROS).write_text("")
    (folder / "version.py").write_text(version_py)
    return folder


def test_an_installed_cuda_build_of_that_release_only(tmp_path):
    cuda = fake_torch(tmp_path / "cuda", CUDA_VERSION_PY)
    assert torch_headers.from_installed(cuda, "2.12.1") == (str(cuda / "include"), "1")
    assert torch_headers.from_installed(cuda, "2.12.0") is None
    # A CPU build is never a source, its macros there or not.
    cpu = fake_torch(tmp_path / "cpu", CPU_VERSION_PY)
    assert torch_headers.from_installed(cpu, "2.13.0") is None
    # A CUDA build whose generated header is missing is no source either.
    broken = fake_torch(tmp_path / "broken", CUDA_VERSION_PY, macros=False)
    assert torch_headers.from_installed(broken, "2.12.1") is None


def test_the_cache_counts_only_complete_entries(tmp_path):
    (tmp_path / "2.11.0" / "include").mkdir(parents=True)
    assert torch_headers.from_cache(tmp_path, "2.11.0") is None  # a download cut short
    (tmp_path / "2.11.0" / torch_headers.STAMP).write_text("1\n")
    assert torch_headers.from_cache(tmp_path, "2.11.0") == (str(tmp_path / "2.11.0" / "include"), "1")


def test_one_line_a_release_found_or_not(tmp_path):
    (tmp_path / "2.11.0" / "include").mkdir(parents=True)
    (tmp_path / "2.11.0" / torch_headers.STAMP).write_text("1\n")
    said = subprocess.run([sys.executable, SCRIPT, "--cache", tmp_path, "--no-download",
                           "2.11.0", "2.99.0"], capture_output=True, text=True, check=True)
    assert said.stdout.splitlines() == [
        f"2.11.0\t{tmp_path / '2.11.0' / 'include'}\t1\tcache",
        "2.99.0\t-\tits headers are not installed or cached, and downloading is off"]
