"""The headers each torch release's bridge is built from (Note [A bridge for every release]).

    torch_headers.py --cache DIR [--python PY ...] [--no-download] RELEASE [RELEASE ...]

prints one line a release, tab-separated: `RELEASE  INCLUDE_DIR  CXX11_ABI  SOURCE` when its
headers are at hand, or `RELEASE  -  REASON` when they cannot be had (the build then leaves that
bridge out and says why in one line). Run by allocator/CMakeLists.txt at configure time.

Note [A bridge for every release]
A bridge (libmemtrace-torch-<release>.so) is compiled from one torch release's c10 headers
(c10/ and torch/headeronly/: 271 files, 2.6 MB for 2.11.0) and the C++ ABI that release was
built with; it links nothing of torch. The headers are taken, in order, from:
1. a CUDA build of that release installed for one of the Pythons given (python3's, the venv
   of the tests, the Python `pip install .` runs under), found without importing torch;
2. the cache (DIR/<release>/, complete when its stamp file is there);
3. PyPI: `pip download torch==<release> --no-deps` of the manylinux x86_64 wheel (a CUDA build
   since 2.11: about 530 MB, of which the two header folders are extracted into the cache and
   the rest thrown away).
A CPU build is never a source: its c10/cuda/ lacks the generated cuda_cmake_macros.h, and its
headers could describe another layout than the CUDA build's. The ABI is read from the release's
TorchConfig.cmake (TORCH_CXX_FLAGS; since 2.9 the wheels set none, which means the default, the
C++11 ABI). The wheel is asked for CPython 3.12: every release from 2.11 on has one, and the
headers do not depend on the Python. Nothing here imports torch (seconds each)."""
from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# What tracker.cpp includes, transitively, of a torch release.
HEADER_FOLDERS = ("torch/include/c10/", "torch/include/torch/headeronly/")
# The generated header only a CUDA build has.
CUDA_MACROS = "c10/cuda/impl/cuda_cmake_macros.h"
STAMP = ".complete"
FIND_TORCH = ("import importlib.util as u; s = u.find_spec('torch'); "
              "print(next(iter(s.submodule_search_locations)) if s else '')")
_ABI = re.compile(r"_GLIBCXX_USE_CXX11_ABI=([01])")


def abi_of(torch_config: str) -> str:
    """The C++ ABI (0 or 1) of TorchConfig.cmake's text: the flag it sets, else the default."""
    match = _ABI.search(torch_config)
    return match.group(1) if match else "1"


def release_of(version_py: str) -> tuple[str, bool] | None:
    """(release, is a CUDA build) of torch/version.py's text: "2.14.1+cu130" gives 2.14.1."""
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", version_py, re.MULTILINE)
    if not version:
        return None
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", version_py, re.MULTILINE)
    return version.group(1).split("+")[0], cuda is not None


def installed_torch(python: str) -> Path | None:
    """The folder of the torch package `python` imports (python -I: past pip's build isolation),
    found without importing it."""
    try:
        found = subprocess.run(
            [python, "-I", "-c", FIND_TORCH], capture_output=True, text=True, timeout=120,
            check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    folder = found.stdout.strip()
    return Path(folder) if found.returncode == 0 and folder else None


def from_installed(torch: Path, release: str) -> tuple[str, str] | None:
    """(include dir, ABI) of an installed CUDA build of `release`, else None."""
    try:
        facts = release_of((torch / "version.py").read_text())
    except OSError:
        return None
    include = torch / "include"
    if facts != (release, True) or not (include / CUDA_MACROS).is_file():
        return None
    config = torch / "share" / "cmake" / "Torch" / "TorchConfig.cmake"
    try:
        abi = abi_of(config.read_text())
    except OSError:
        abi = "1"
    return str(include), abi


def from_cache(cache: Path, release: str) -> tuple[str, str] | None:
    stamp = cache / release / STAMP
    if not stamp.is_file():
        return None
    return str(cache / release / "include"), stamp.read_text().strip() or "1"


def download(cache: Path, release: str, python: str) -> tuple[str, str] | str:
    """Fetches the release's wheel and keeps its headers in the cache; (include dir, ABI), or
    why not."""
    cache.mkdir(parents=True, exist_ok=True)
    # Two builds configuring at once (CI's, a wheel's) fetch a release once, one after the other.
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = from_cache(cache, release)
        return cached if cached else _download(cache, release, python)


def _download(cache: Path, release: str, python: str) -> tuple[str, str] | str:
    with tempfile.TemporaryDirectory(dir=cache) as work:
        fetched = subprocess.run(
            [python, "-I", "-m", "pip", "download", f"torch=={release}", "--no-deps",
             "--no-cache-dir", "--only-binary=:all:", "--python-version", "3.12",
             "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "-d", work, "-q"],
            capture_output=True, text=True, timeout=1800, check=False)
        wheels = list(Path(work).glob("torch-*.whl"))
        if fetched.returncode != 0 or not wheels:
            last = (fetched.stderr.strip().splitlines() or ["no wheel"])[-1]
            return f"pip could not download torch=={release} ({last.strip()})"
        target = Path(work) / "tree"
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = wheel.namelist()
            facts = release_of(wheel.read("torch/version.py").decode())
            if facts != (release, True) or f"torch/include/{CUDA_MACROS}" not in names:
                return f"PyPI's torch=={release} wheel is not a CUDA build"
            for name in names:
                if name.startswith(HEADER_FOLDERS) and not name.endswith("/"):
                    wheel.extract(name, target)
            abi = abi_of(wheel.read("torch/share/cmake/Torch/TorchConfig.cmake").decode())
        destination = cache / release
        shutil.rmtree(destination, ignore_errors=True)
        destination.mkdir()
        (target / "torch" / "include").rename(destination / "include")
        # Written last: a cache entry without it is a download cut short, fetched again.
        (destination / STAMP).write_text(abi + "\n")
    return str(destination / "include"), abi


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, type=Path)
    parser.add_argument("--python", action="append", default=[],
                        help="a Python whose torch may hold a release's headers")
    parser.add_argument("--no-download", action="store_true", help="never ask PyPI")
    parser.add_argument("releases", nargs="+")
    arguments = parser.parse_args(argv)
    pythons = [p for p in dict.fromkeys(arguments.python) if p and os.path.exists(p)]
    installed = [t for t in (installed_torch(p) for p in pythons) if t is not None]
    for release in arguments.releases:
        found: tuple[str, str] | str | None = None
        source = ""
        for torch in installed:
            found, source = from_installed(torch, release), f"installed ({torch})"
            if found:
                break
        if not found:
            found, source = from_cache(arguments.cache, release), "cache"
        if not found and arguments.no_download:
            found = "its headers are not installed or cached, and downloading is off"
        if not found:
            found, source = download(arguments.cache, release, sys.executable), "PyPI"
        if isinstance(found, str):
            print(f"{release}\t-\t{found}")
        else:
            print(f"{release}\t{found[0]}\t{found[1]}\t{source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
