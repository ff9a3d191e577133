"""What `memtrace run` runs in the traced program, before the program itself: the module hooks
(_modules) and the training hooks (training.install_automatic), so that an unmodified training
script's allocations get their modules, categories, phases and steps, and the naming of
torch.compile's code by the user's source (_compiled); then the script, or -m module, as python
would run it; and after it, PyTorch's own peaks, for `memtrace run` to compare with the trace's
(Note [PyTorch's counters beside the trace] in cli.py).

    python -m mem_tracer._run (script.py | -m module) [args...]
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import runpy
import sys
from typing import Any

# What mem_tracer.cli's verdict looks for (Note [Will it fit] in cli.py).
OUT_OF_MEMORY_MARK = "memtrace: out of memory"
# The file `memtrace run` names for PyTorch's own peaks at the program's end (Note [PyTorch's
# counters beside the trace] in cli.py).
TORCH_PEAKS_VARIABLE = "MEMTRACE_TORCH_PEAKS_FILE"
# torch.cuda.memory_stats()'s keys read, and the names they are written under.
TORCH_PEAK_KEYS = {"requested": "requested_bytes.all.peak",
                   "allocated": "allocated_bytes.all.peak",
                   "reserved": "reserved_bytes.all.peak"}


def _out_of_memory(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from, is PyTorch's out-of-memory error."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "OutOfMemoryError" or str(current).startswith(
                "CUDA out of memory"):
            return True
        current = current.__cause__ or current.__context__
    return False


def _mark_out_of_memory() -> None:
    from . import tracing
    from .errors import MemTracerError
    # Best effort: without a trace (nothing traced yet) there is nothing to mark, and the
    # program's own error goes on regardless.
    with contextlib.suppress(MemTracerError, OSError):
        tracing.annotate(OUT_OF_MEMORY_MARK)


def _run(arguments: list[str]) -> None:
    if arguments[:1] == ["-m"]:
        module, *rest = arguments[1:]
        sys.argv = [module, *rest]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    script, *rest = arguments
    sys.argv = [script, *rest]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


# Note [Letting autograd's threads finish]
# PyTorch's autograd runs a CUDA backward on a device thread of its own, which releases the
# finished graph task after backward() returned, and that may need the GIL (a Python object the
# task's thread-local state holds). When the program ends right after a backward, the main
# thread holds the GIL until the interpreter finalizes, and the device thread then takes it
# during finalization and aborts the process ("terminate called without an active exception";
# pytorch/pytorch issue 38228 and its kin: a PyTorch bug, on a card as on the simulated one,
# where it struck 4 runs in 8 of a one-layer backward). A program traced by `memtrace run`
# that ended well gives those threads the GIL for 10 ms first, so that its trace and its exit
# status say how it ended rather than how PyTorch tore down.
_AUTOGRAD_DRAIN_S = 0.01


def _let_autograd_threads_finish() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.cuda, "is_initialized", lambda: False)():
        import time
        time.sleep(_AUTOGRAD_DRAIN_S)


def _torch_peaks() -> dict[str, dict[str, int]]:
    """{device: {"requested": bytes, "reserved": bytes}} of PyTorch's own peaks, for each device
    its caching allocator counted on; {} when the program never imported torch or initialized
    CUDA (reading them must do neither), or its allocator keeps no counters (a pluggable one)."""
    torch: Any = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not getattr(cuda, "is_initialized", lambda: False)():
        return {}
    peaks: dict[str, dict[str, int]] = {}
    try:
        for device in range(cuda.device_count()):
            stats = cuda.memory_stats(device)
            values = {name: stats.get(key) for name, key in TORCH_PEAK_KEYS.items()}
            if None not in values.values() and values["reserved"]:  # a device it used
                peaks[str(device)] = {name: int(value) for name, value in values.items()}
    except Exception:  # noqa: BLE001 - a check of the trace is never the program's error
        return {}
    return peaks


def _write_torch_peaks(path: str | None) -> None:
    if not path:
        return
    peaks = _torch_peaks()
    with contextlib.suppress(OSError), open(path, "w") as file:
        json.dump(peaks, file)


def main() -> None:
    # Taken out of the environment: the program's is the one `memtrace run` was given.
    peaks_file = os.environ.pop(TORCH_PEAKS_VARIABLE, None)
    if importlib.util.find_spec("torch") is not None:
        from . import _compiled, _modules, training
        # The module each allocation is made in, forward and backward (Note [Module paths as
        # the user names them] in _modules.py): a program that trains in a library's loop
        # (transformers' Trainer, Lightning) is told apart by its model's modules.
        _modules.install_forward_hooks()
        training.install_automatic()
        _compiled.install()
        # On the simulated card, the values the program determines are known there (Note [Known
        # values on the simulated card] in simulated_gpu/values.py).
        if os.environ.get("MEMTRACE_GPU_PROFILE"):
            from .simulated_gpu import values as simulated_values
            simulated_values.install_from_environment()
    try:
        _run(sys.argv[1:])
    except BaseException as error:
        # The program dies of it: say so in the trace before the error goes on as it would.
        if _out_of_memory(error):
            _mark_out_of_memory()
        raise
    finally:
        # However it ended (sys.exit() is an exception too), PyTorch's peaks are its whole run's.
        _write_torch_peaks(peaks_file)
    _let_autograd_threads_finish()


if __name__ == "__main__":
    main()
