"""The memtrace-report and memtrace-estimate commands of an installed package: each replaces
this Python process with the program bundled in mem_tracer/bin/ (os.execv), so that its
arguments reach it untouched and its exit status, output and signals are its own."""
from __future__ import annotations

import os
import sys

from . import _native
from .errors import MemTracerError


def _exec(name: str, argv: list[str] | None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    try:
        path = _native.estimator_path() if name == "memtrace-estimate" else _native.tool_path(name)
    except MemTracerError as error:
        if arguments == ["--version"]:  # the program would say the package's own version
            from . import __version__
            print(f"{name} {__version__}")
            return 0
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    environment = _native.estimator_environment() if name == "memtrace-estimate" else None
    try:
        if environment is None:
            os.execv(path, [name, *arguments])
        else:
            os.execve(path, [name, *arguments], environment)
    except OSError as error:  # execv returns only on failure
        print(f"{name}: error: cannot run {path}: {error.strerror}", file=sys.stderr)
    return 126


def report(argv: list[str] | None = None) -> int:
    """memtrace-report: the offline report (mem_tracer/bin/memtrace-report)."""
    return _exec("memtrace-report", argv)


def estimate(argv: list[str] | None = None) -> int:
    """memtrace-estimate: the static estimator (mem_tracer/bin/memtrace-estimate). It needs
    the torch package; without it, one line says to install it."""
    return _exec("memtrace-estimate", argv)

