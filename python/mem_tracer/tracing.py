"""Tracing: routing PyTorch's CUDA allocations through memtrace, starting and stopping the
recorder, marks, and the counters that stand in for PyTorch's own under the pluggable
allocator."""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args

from . import _compiled, _modules, _native, training
from .errors import MemTracerError

# The stacks recorded with each allocation (the library's MEMTRACE_STACKS): Python frames,
# native frames, both, or none (sizes and times only).
Stacks = Literal["python", "native", "all", "none"]
STACK_MODES: tuple[str, ...] = get_args(Stacks)

_last_trace: Path | None = None  # the file of the last start_tracing(), open or closed
_switched = False


def switch_allocator() -> None:
    """Makes libmemtrace.so PyTorch's CUDA allocator for this process.

    Call it before anything allocates CUDA memory (first thing in the script): PyTorch cannot
    swap an allocator it has already used. Every tensor then goes through memtrace
    (stream-ordered cudaMallocAsync underneath, with the pool's memory kept), counted from
    then on and recorded with its stacks while tracing runs.

    Raises MemTracerError when PyTorch has no CUDA, or when an allocator was already
    initialized; the message says what to do."""
    global _switched
    import torch

    if _switched:
        return
    if not torch.cuda.is_available():
        raise MemTracerError(
            "switch_allocator() needs CUDA, and PyTorch sees no CUDA device here "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False): run on a machine "
            "with a GPU and a CUDA build of PyTorch")
    path = str(_native.library().path)
    try:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "memtrace_alloc", "memtrace_free")
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as error:
        if "already initialized" in str(error) or "initialized allocator" in str(error):
            raise MemTracerError(
                "switch_allocator() came too late: this process has already allocated CUDA memory "
                "(or something it imported did), and PyTorch cannot swap an allocator it has used. "
                "Call mem_tracer.switch_allocator() before the first CUDA allocation, or trace the "
                "unmodified script with `python -m mem_tracer run script.py`") from error
        raise MemTracerError(f"switch_allocator(): PyTorch refused the allocator: {error}") from error
    _switched = True
    _compiled.install()  # Note [Generated code]: a graph compiled before tracing starts too


def _preload_list_at_exec() -> list[str]:
    """LD_PRELOAD as the dynamic loader read it when this process started: /proc/self/environ
    is the environment given to exec, which later changes of os.environ do not touch."""
    try:
        environment = Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:
        return []
    for entry in environment:
        if entry.startswith(b"LD_PRELOAD="):
            value = os.fsdecode(entry[len(b"LD_PRELOAD="):])
            return value.replace(":", " ").split()
    return []


def _loaded_by_preload() -> bool:
    """Whether LD_PRELOAD put libmemtrace.so in this process, so that its hooks see every
    CUDA allocation: the loader was asked to preload it at exec, and the library in hand is
    in the global scope, where the loader's own lookup (dlsym(RTLD_DEFAULT)) finds its C
    API. A library loaded later (ctypes, as _native.library() does without a preloaded one)
    is local: its hooks route nothing, and that lookup does not find it.

    Note: not "is libmemtrace.so mapped": _native.library() maps it, so that would always
    be true once tracing starts."""
    if not any(Path(entry).name == "libmemtrace.so" for entry in _preload_list_at_exec()):
        return False
    ours = _native.library().memtrace_is_tracing
    try:
        global_scope = ctypes.CDLL(None).memtrace_is_tracing
    except AttributeError:
        return False
    return ctypes.cast(global_scope, ctypes.c_void_p).value == ctypes.cast(ours, ctypes.c_void_p).value


_attached = False  # PyTorch's caching allocator is recorded from inside (_attach_to_torch)


def _library_routes_allocations() -> bool:
    return _switched or _attached or _loaded_by_preload()


# Note [Attaching from the package]
# Without LD_PRELOAD and without switch_allocator(), no hook sees CUDA; PyTorch's caching
# allocator can still be recorded from inside (Note [PyTorch's own allocator] in
# tracer/format/records.h): the library attaches the bridge's tracker to it now, and then
# records what it already holds (from PyTorch's snapshot, read through the bridge: segments,
# and each live block's requested size, freed blocks still waiting for their streams included)
# as allocations made before tracing, so that the trace's live bytes are right from its start.
# Both happen in one native call, memtrace_torch_attach, the way the hooks' attach records the
# tensors made during it (Note [Tensors made while the tracker attaches] in
# allocator/torch_allocator.cpp): the tracker comes first and the snapshot after, so a tensor
# made in between is recorded by the tracker and left as it is when the snapshot tells it
# again; a tensor of the snapshot that another thread frees before it is recorded (its free,
# of an address not known yet, dropped) is not left live forever: each snapshot block is
# recorded only while its device's tracker calls show no change since the snapshot was read,
# else the snapshot is read again. (The call holds the GIL, as all the library's calls do, so a
# Python thread's free waits for it; the checks are for the threads that do not hold it:
# PyTorch's own, and any op running with the GIL released.) PyTorch's CUDA is initialized
# first if it is not yet (the allocator has no device allocators before), which a program that
# goes on to use CUDA would do anyway.
def _attach_to_torch() -> str | None:
    """Attaches the recorder to PyTorch's caching allocator; returns why not, or None."""
    global _attached
    if _attached:
        return None
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch is not imported"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device here"
    torch.cuda.init()
    if _native.library().memtrace_torch_attach() != 0:
        return _native.last_error()
    _attached = True
    return None


def start_tracing(output: str | os.PathLike[str] | None = None, *, model: Any = None,
                  modules: bool = True, stacks: Stacks | None = None) -> Path:
    """Starts recording every CUDA allocation with its Python stack (and nn.Module).

    ``output`` names the trace file (``%p`` becomes the pid); by default the file already
    open, or $MEMTRACE_OUTPUT, or ``memtrace-%p.bin``. Allocations live before the start are
    written as untraced, so the peak is right (the report names them by what they hold: a
    module's weights, the inputs). ``model`` names the root of module paths
    (``model.layers.3.attn``); without it a module never named is a root when first called,
    named by how its caller reaches it (``model(x)``: ``model``), else by its class, wrappers
    (DDP's ``module``, ``_orig_mod``...) passed over. Each module's parameters and buffers on the
    device are told to be its own (with ``model``, now; else when the module first runs), so
    they count under it, whenever they were allocated. ``modules=False`` leaves nn.Module attribution off. ``stacks``: the
    stacks recorded with each allocation from now on, "python", "native", "all" or "none"
    (default: $MEMTRACE_STACKS, else "python"); a file already open keeps the mode its
    header names.

    Returns the trace file's path."""
    if stacks is not None and stacks not in STACK_MODES:
        raise MemTracerError(f"start_tracing(): stacks must be one of {', '.join(STACK_MODES)}, "
                             f"not {stacks!r}")
    library = _native.library()
    if not _library_routes_allocations():
        why = _attach_to_torch()  # Note [Attaching from the package]
        if why is not None:
            warnings.warn("mem_tracer.start_tracing(): PyTorch's allocations do not go through "
                          f"memtrace in this process ({why}); call mem_tracer.switch_allocator() "
                          "first, or run the script with `python -m mem_tracer run`", stacklevel=2)
    path = None if output is None else os.fsencode(os.fspath(output))
    with _stack_mode(stacks):
        started = library.memtrace_start(path)
    if started != 0:
        raise MemTracerError(f"start_tracing(): {_native.last_error()}")
    if model is not None:
        _modules.name_modules(model, "model")
    if modules:
        _modules.install_forward_hooks()
        if model is not None and hasattr(model, "modules"):
            _modules.tell_owners(model)  # Note [Weights and their modules]
    training.install(model, modules=modules)
    _compiled.install()
    global _last_trace
    _last_trace = output_path()
    return _last_trace


@contextlib.contextmanager
def _stack_mode(stacks: Stacks | None) -> Iterator[None]:
    """MEMTRACE_STACKS set for memtrace_start, which reads its settings from the environment
    at each start; put back after, so that the program's children do not inherit it."""
    if stacks is None:
        yield
        return
    before = os.environ.get("MEMTRACE_STACKS")
    os.environ["MEMTRACE_STACKS"] = stacks
    try:
        yield
    finally:
        if before is None:
            del os.environ["MEMTRACE_STACKS"]
        else:
            os.environ["MEMTRACE_STACKS"] = before


def stop_tracing() -> None:
    """Stops capturing stacks. Allocations go on being counted (and written, as ``untraced``),
    so the trace stays right; the file is flushed, ready for report_stats().

    MemTracerError when tracing is not running, or when the trace could not be written (the
    message says why: a full disk...)."""
    _modules.remove_forward_hooks()
    training.uninstall()
    library = _native.library()
    was_tracing = bool(library.memtrace_is_tracing())
    earlier_error = _native.last_error()  # a failed write stops tracing, and says why here
    if library.memtrace_stop() == 0:
        return
    if was_tracing:  # the stop mark or the flush could not be written
        raise MemTracerError(f"stop_tracing(): {_native.last_error()}")
    if _last_trace is None:
        raise MemTracerError("stop_tracing(): tracing has not started (call start_tracing() first)")
    why = f"; the last error: {earlier_error}" if earlier_error else ""
    raise MemTracerError(f"stop_tracing(): tracing is not running (it was stopped already{why})")


def is_tracing() -> bool:
    """Whether stacks are being captured now."""
    return bool(_native.library().memtrace_is_tracing())


def last_trace() -> Path:
    """The trace file of the last start_tracing(), flushed if it is still open.
    MemTracerError when tracing never started in this process."""
    library = _native.library()
    if library.memtrace_output_path():
        library.memtrace_flush()
        return output_path()
    if _last_trace is None:
        raise MemTracerError("tracing has not started: call mem_tracer.start_tracing() (or use "
                             "`with mem_tracer.trace(...)`) before asking for a report")
    return _last_trace


def output_path() -> Path:
    """The trace file being written. MemTracerError when tracing has not started."""
    raw = _native.library().memtrace_output_path()
    if not raw:
        raise MemTracerError("no trace file is open: tracing has not started (call start_tracing() "
                             "or use `with mem_tracer.trace(...)`)")
    return Path(os.fsdecode(raw))


@contextlib.contextmanager
def trace(output: str | os.PathLike[str] | None = None, *, model: Any = None,
          modules: bool = True, stacks: Stacks | None = None) -> Iterator[Path]:
    """``with mem_tracer.trace("out.bin"):`` traces the block and closes the file after it.

    Yields the trace file's path. A trace that could not be written whole raises
    MemTracerError after the block; when the block itself raised, its exception goes on and
    the trace's error is added to it as a note."""
    path = start_tracing(output, model=model, modules=modules, stacks=stacks)
    try:
        yield path
    except BaseException as error:
        problems = _finish_trace()
        if problems:
            _add_note(error, f"mem_tracer.trace(): {'; '.join(problems)}")
        raise
    problems = _finish_trace()
    if problems:
        raise MemTracerError(f"trace(): {'; '.join(problems)}")


def _finish_trace() -> list[str]:
    """Stops and closes the trace of trace(); returns what went wrong, a message each."""
    _modules.remove_forward_hooks()
    training.uninstall()
    library = _native.library()
    problems: list[str] = []
    file_open = bool(library.memtrace_output_path())
    if library.memtrace_is_tracing():
        if library.memtrace_stop() != 0:
            problems.append(_native.last_error())
    elif not file_open and _native.last_error():
        # A write failed inside the block: the library stopped and let the file go then.
        problems.append(_native.last_error())
    if library.memtrace_close() != 0 and _native.last_error() not in problems:
        problems.append(_native.last_error())
    return problems


def _add_note(error: BaseException, note: str) -> None:
    """BaseException.add_note where there is one (3.11); a warning before."""
    if sys.version_info >= (3, 11):
        error.add_note(note)
    else:
        warnings.warn(note, RuntimeWarning, stacklevel=3)


def annotate(name: str) -> None:
    """Writes a named mark (a point in time) into the trace."""
    if _native.library().memtrace_annotate(name.encode()) != 0:
        raise MemTracerError(f"annotate(): {_native.last_error()}")


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """``with mem_tracer.phase("forward"):`` marks the block as a named phase of the trace."""
    library = _native.library()
    if library.memtrace_phase_begin(name.encode()) != 0:
        raise MemTracerError(f"phase(): {_native.last_error()}")
    try:
        yield
    finally:
        library.memtrace_phase_end()


def memory_allocated(device: int | None = None) -> int:
    """Bytes of CUDA memory live now, by memtrace's count (PyTorch's own counter raises under
    a pluggable allocator). ``device=None``: all devices together."""
    return int(_native.library().memtrace_current_bytes(-1 if device is None else device))


def max_memory_allocated(device: int | None = None) -> int:
    """The most bytes live at once since the library was loaded or the last
    reset_peak_memory_stats(), counting every allocation it saw, traced or not."""
    return int(_native.library().memtrace_peak_bytes(-1 if device is None else device))


def reset_peak_memory_stats(device: int | None = None) -> None:
    """Sets the peak to what is live now (all devices, or one)."""
    _native.library().memtrace_reset_peak(-1 if device is None else device)

