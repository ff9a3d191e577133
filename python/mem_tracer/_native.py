"""Finding and loading memtrace's native parts: libmemtrace.so and the command-line tools.

Looked for, in order, without any environment variable: next to this package (an installed
wheel: ``mem_tracer/lib``, ``mem_tracer/bin``), then in the source checkout's build
directory (``python/mem_tracer`` → ``build/``). ``MEMTRACE_LIBRARY`` / ``MEMTRACE_BIN_DIR``
override both, for unusual layouts."""
from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
from functools import cache
from pathlib import Path
from typing import Any

from .errors import MemTracerError

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT_BUILD = _PACKAGE.parent.parent / "build"


def _candidates_library() -> list[Path]:
    override = os.environ.get("MEMTRACE_LIBRARY")
    found = [Path(override)] if override else []
    return found + [_PACKAGE / "lib" / "libmemtrace.so", _CHECKOUT_BUILD / "allocator" / "libmemtrace.so"]


def _candidates_tool(name: str) -> list[Path]:
    override = os.environ.get("MEMTRACE_BIN_DIR")
    found = [Path(override) / name] if override else []
    return found + [_PACKAGE / "bin" / name, _CHECKOUT_BUILD / "bin" / name]


def simulator_directory() -> Path:
    """The folder of the simulated GPU (lib/ and profiles/): inside the package, then the
    checkout's build directory; MEMTRACE_SIMULATOR_DIR overrides both."""
    override = os.environ.get("MEMTRACE_SIMULATOR_DIR")
    candidates = ([Path(override)] if override else []) + [_PACKAGE / "simulator",
                                                            _CHECKOUT_BUILD / "simulator"]
    for candidate in candidates:
        if (candidate / "profiles").is_dir():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise MemTracerError(f"the simulated GPU is not here (looked in {looked}): build it with "
                         "`make build` in the memtrace checkout, or install the package with pip")


def library_path() -> Path:
    """The path of libmemtrace.so, or MemTracerError saying where it looked."""
    candidates = _candidates_library()
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise MemTracerError(f"libmemtrace.so not found (looked in {looked}): build it with `make build` "
                         "in the memtrace checkout, or install the package with pip")


def tool_path(name: str) -> Path:
    """The path of a memtrace command-line tool (memtrace-report, memtrace-estimate)."""
    candidates = _candidates_tool(name)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise MemTracerError(f"{name} not found (looked in {looked}): build it with `make build` in the "
                         "memtrace checkout, or install the package with pip")


def _release(version: str) -> str:
    """"2.13.0" of "2.13.0+cpu": builds of one release share LibTorch's C++ ABI."""
    return version.split("+")[0]


# Note [The torch Python imports]
# memtrace-estimate links LibTorch, and LibTorch has no stable C++ ABI: it must run on the torch
# release it was built against, and on the very torch package this Python imports (the one
# mem_tracer.estimate() exports the model with). Its RUNPATH ($ORIGIN/../../torch/lib, Note
# [Finding LibTorch from the wheel] in tools/CMakeLists.txt) finds a torch installed beside the
# package only; torch can as well be in the system's site-packages under a venv made with
# --system-site-packages, in a user site, in a conda prefix or on PYTHONPATH. So the package
# finds the torch Python would import (importlib, without importing it: that takes seconds),
# reads its release from torch/version.py, refuses in one line a release other than the one
# memtrace-estimate was built against, and runs memtrace-estimate with that torch's lib/ first
# on LD_LIBRARY_PATH (searched before RUNPATH). memtrace-estimate starts no program, so the
# variable goes no further.


def torch_directory() -> Path | None:
    """The folder of the torch package this Python imports, or None without one."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def torch_release_at(directory: Path) -> str | None:
    """torch.__version__ as torch/version.py says it, without importing torch."""
    try:
        text = (directory / "version.py").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "__version__":
            return value.strip().strip("'\"").split(" ")[0]
    return None


def torch_is_cuda_build(directory: Path) -> bool:
    """Whether the torch package at `directory` is a CUDA build (torch/version.py's `cuda`
    is not None), read without importing it."""
    try:
        text = (directory / "version.py").read_text()
    except OSError:
        return False
    return not any(line.replace(" ", "").startswith(("cuda=None", "cuda:Optional[str]=None"))
                   for line in text.splitlines())


def estimator_path() -> Path:
    """memtrace-estimate, once it can load LibTorch; else MemTracerError saying in one line
    what to install (Note [The torch Python imports])."""
    torch = torch_directory()
    if torch is None:
        raise MemTracerError("memtrace-estimate needs PyTorch: pip install torch")
    try:
        path = tool_path("memtrace-estimate")
    except MemTracerError:
        if (_PACKAGE / "bin" / "memtrace-report").is_file():  # an installed package
            raise MemTracerError("this mem_tracer was built where torch was absent, without "
                                 "memtrace-estimate: reinstall it now that torch is installed"
                                 ) from None
        raise
    built = path.with_name("memtrace-estimate.torch")  # only in an installed package
    if built.is_file():
        wanted = built.read_text().strip()
        installed = torch_release_at(torch)
        if installed is None:
            try:
                installed = importlib.metadata.version("torch")
            except importlib.metadata.PackageNotFoundError:
                installed = None
        if installed is not None and _release(installed) != _release(wanted):
            raise MemTracerError(
                f"memtrace-estimate was built against torch {_release(wanted)}, and this Python "
                f"imports torch {installed} ({torch}): pip install torch=={_release(wanted)}, or "
                f"reinstall mem_tracer from source to build it against {_release(installed)}")
    return path


def estimator_environment() -> dict[str, str]:
    """The environment memtrace-estimate runs in: this one, with the lib/ of the torch this
    Python imports first on LD_LIBRARY_PATH when the package is installed (Note [The torch
    Python imports]); a checkout's build finds the LibTorch it was built with by itself."""
    environment = dict(os.environ)
    torch = torch_directory()
    installed = (_PACKAGE / "bin" / "memtrace-estimate.torch").is_file()
    if torch is not None and installed and (torch / "lib").is_dir():
        before = environment.get("LD_LIBRARY_PATH")
        environment["LD_LIBRARY_PATH"] = str(torch / "lib") + (f":{before}" if before else "")
    return environment


def bridge_releases() -> list[str]:
    """The torch releases this install traces from inside PyTorch's allocator: the bridges
    (libmemtrace-torch-<release>.so) beside libmemtrace.so."""
    try:
        folder = library_path().parent
    except MemTracerError:
        return []
    found = [path.name[len("libmemtrace-torch-"):-len(".so")]
             for path in folder.glob("libmemtrace-torch-*.so")]
    return sorted(found, key=lambda release: [int(p) if p.isdigit() else 0
                                             for p in release.split(".")])


def estimator_torch() -> str | None:
    """The torch memtrace-estimate was built against (the file the build writes beside it when
    installed, or in the checkout's build directory), or None without the estimator."""
    try:
        tool = tool_path("memtrace-estimate")
    except MemTracerError:
        return None
    for candidate in (tool.with_name("memtrace-estimate.torch"),
                      tool.parent.parent / "memtrace-estimate.torch"):
        if candidate.is_file():
            return candidate.read_text().strip()
    return "unknown"


# Note [What an install can do]
# Installed from a wheel or with `pip install .`, memtrace is only as good as what the install
# carries: a bridge for the torch release that runs (else PyTorch's segments, not its tensors,
# are what is recorded), the simulated GPU, and an estimator built against the torch that is
# imported. `memtrace --version` says each, read from the files the install holds, without
# importing torch or loading anything, so that a user can tell before a run what it will see.
def capabilities() -> list[str]:
    """What this install can do, one line each (`memtrace --version`): the releases traced
    from inside PyTorch's allocator, the torch this Python imports and what it gets, the
    simulated cards, and the torch memtrace-estimate was built against."""
    bridges = bridge_releases()
    listed = ", ".join(bridges) if bridges else "none (segments and CUDA calls only)"
    lines = [f"traces tensors inside PyTorch's allocator for torch: {listed}"]
    torch = torch_directory()
    release = torch_release_at(torch) if torch is not None else None
    if torch is None or release is None:
        lines.append("this Python's torch: none")
    else:
        cuda_build = torch_is_cuda_build(torch)
        if not cuda_build:
            what = "a CPU build: nothing on a GPU to trace"
        elif _release(release) in bridges:
            what = "tensors traced from inside its caching allocator"
        else:
            what = "no bridge for this release: its CUDA segments and calls are traced"
        lines.append(f"this Python's torch: {release} ({what})")
    try:
        folder = simulator_directory()
        cards = sorted(path.stem for path in (folder / "profiles").glob("*.json"))
        lines.append(f"simulated GPUs (memtrace run --gpu): {', '.join(cards)}")
    except MemTracerError:
        lines.append("simulated GPUs: none (the simulated GPU is not installed)")
    estimator = estimator_torch()
    lines.append(f"memtrace-estimate: built against torch {estimator}" if estimator
                 else "memtrace-estimate: not built (torch was absent when memtrace was built)")
    return lines


def _preloaded() -> Path | None:
    """libmemtrace.so if LD_PRELOAD put it in this process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        if line.endswith("/libmemtrace.so"):
            return Path(line.split(None, 5)[-1])
    return None


def _path() -> Path:
    # A preloaded instance is used when there is one, so that the package and LD_PRELOAD's
    # hooks share one recorder.
    return _preloaded() or library_path()


@cache
def library() -> ctypes.PyDLL:
    """libmemtrace.so, loaded once, with the C API's signatures set. PyDLL keeps the GIL held
    during calls: they are all short (memtrace_lend_python_stack reads the caller's frames)."""
    path = _path()
    lib = ctypes.PyDLL(str(path))
    c_char_p, c_int, c_uint64 = ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64
    signatures: dict[str, tuple[list[Any], Any]] = {
        "memtrace_start": ([c_char_p], c_int),
        "memtrace_stop": ([], c_int),
        "memtrace_annotate": ([c_char_p], c_int),
        "memtrace_phase_begin": ([c_char_p], c_int),
        "memtrace_phase_end": ([], c_int),
        "memtrace_module_enter": ([c_char_p], c_int),
        "memtrace_module_exit": ([], c_int),
        "memtrace_flush": ([], c_int),
        "memtrace_close": ([], c_int),
        "memtrace_is_tracing": ([], c_int),
        "memtrace_output_path": ([], c_char_p),
        "memtrace_current_bytes": ([c_int], c_uint64),
        "memtrace_peak_bytes": ([c_int], c_uint64),
        "memtrace_reset_peak": ([c_int], None),
        "memtrace_reserved_bytes": ([c_int], c_uint64),
        "memtrace_peak_reserved_bytes": ([c_int], c_uint64),
        "memtrace_torch_attach": ([], c_int),
        "memtrace_last_error": ([], c_char_p),
        "memtrace_empty_cache": ([c_int], None),
        "memtrace_lend_python_stack": ([c_int], c_int),
        "memtrace_end_lent_python_stack": ([], None),
        "memtrace_bind_lent_python_stack": ([c_int], None),
        "memtrace_generated_code": ([c_char_p, c_int, c_int, ctypes.POINTER(c_char_p),
                                     ctypes.POINTER(c_char_p), ctypes.POINTER(c_int), c_int],
                                    c_int),
    }
    _sign(lib, signatures)
    lib.path = path  # type: ignore[attr-defined]  # read by tracing.switch_allocator()
    return lib


@cache
def allocator() -> ctypes.CDLL:
    """The pluggable allocator's entry points, memtrace_alloc and memtrace_free, called as
    PyTorch calls them: with the GIL released (ctypes.CDLL), from the allocating thread. What
    stands for PyTorch's allocator in the tests and the demo calls them through this."""
    lib = ctypes.CDLL(str(_path()))
    c_int, c_void_p, c_ssize_t = ctypes.c_int, ctypes.c_void_p, ctypes.c_ssize_t
    _sign(lib, {"memtrace_alloc": ([c_ssize_t, c_int, c_void_p], c_void_p),
                "memtrace_free": ([c_void_p, c_ssize_t, c_int, c_void_p], None)})
    return lib


def _sign(lib: ctypes.CDLL, signatures: dict[str, tuple[list[Any], Any]]) -> None:
    for name, (arguments, result) in signatures.items():
        function = getattr(lib, name)
        function.argtypes = arguments
        function.restype = result


def last_error() -> str:
    """The library's last error message."""
    message = library().memtrace_last_error()
    return message.decode(errors="replace") if message else ""
