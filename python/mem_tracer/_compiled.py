"""Naming what torch.compile's code allocates by the user's source (Note [Generated code] in
tracer/format/records.h).

A compiled graph runs as a module inductor generated (c<hash>.py in its cache), so its
allocations' innermost frame is a line of that file. Inductor hands PyCodeCache, with each such
module, a line map: from each entry's line to the next entry's, the code of one FX node, with the
node's stack trace (the user's frames dynamo traced it at). This tells the recorder each stretch
and its stack (memtrace_generated_code), before the module runs; the recorder keeps them for the
process and writes them into every trace file, and the report names an allocation on such a line
by the stack's user frame. The forward's and the backward's graphs both load this way, whether
compiled now or found in inductor's caches.

Installed once per process by `memtrace run`, start_tracing() and switch_allocator(), and never
removed: compiled code outlives a trace. Inductor is not imported for it: the loading is wrapped
when the program imports it (an import hook), so a program that never compiles pays nothing.
On a torch outside the releases Note [PyTorch internals] names, it does nothing and says so once
(a warning): allocations of compiled code are then named, under `--frame user`, by the user's
frame around the compiled code (the `def` line of the forward dynamo compiled: inductor's files
are no user code), and under `--frame innermost` by the generated file."""
from __future__ import annotations

import contextlib
import ctypes
import enum
import importlib.abc
import importlib.machinery
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from . import _native, _torch_internals

# A frame of a stack trace as traceback writes it (and FX's node.meta["stack_trace"] holds it).
_FRAME_LINE = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$', re.MULTILINE)


class Phase(enum.Enum):
    NOT_INSTALLED = enum.auto()
    WAITING_FOR_IMPORT = enum.auto()  # an import hook waits for inductor's code cache
    INSTALLED = enum.auto()           # inductor's module loading is wrapped (and its codegen's
                                      # functions, once imported)
    OFF = enum.auto()                 # this torch is not one the wrapping knows: nothing done


def stack_frames(stack_trace: str | None) -> list[tuple[str, int, str]]:
    """(file, line, function) of each frame of a stack trace's text, outermost first."""
    if not stack_trace:
        return []
    return [(file, int(line), function) for file, line, function in _FRAME_LINE.findall(stack_trace)]


def stretches(line_map: _torch_internals.LineMap, line_count: int
              ) -> list[tuple[int, int, list[tuple[str, int, str]]]]:
    """(first line, line count, source frames) of each stretch of a generated file of
    `line_count` lines that inductor's line map gives a stack trace: an entry's stretch runs up to
    the next entry's line (as PyCodeCache.stack_frames_for_code reads it), the last one to the end
    of the file."""
    entries = sorted(((line, trace) for line, trace in line_map
                      if isinstance(line, int) and line >= 1), key=lambda entry: entry[0])
    found = []
    for index, (first, trace) in enumerate(entries):
        end = entries[index + 1][0] if index + 1 < len(entries) else line_count + 1
        frames = stack_frames(trace)
        if end > first and frames:
            found.append((first, end - first, frames))
    return found


class GeneratedCodeNames:
    """The wrapping of inductor's module loading, and the files already told, for the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.phase = Phase.NOT_INSTALLED
        self._told: set[str] = set()
        self._wrapped: set[str] = set()  # the modules of inductor's whose functions are wrapped

    def install(self) -> None:
        """Wraps inductor's module loading now if it is imported, else when it is."""
        with self._lock:
            if self.phase is not Phase.NOT_INSTALLED:
                return
            version = _torch_version()
            if version is None:  # no torch: nothing compiles
                self.phase = Phase.OFF
                return
            if not (_torch_internals.supported(version)
                    or os.environ.get(_torch_internals.UNTESTED_VARIABLE) == "1"):
                self.phase = Phase.OFF
                _say_off(version, f"it is checked on torch {_torch_internals.SUPPORTED} only "
                                  f"({_torch_internals.UNTESTED_VARIABLE}=1 tries this one)")
                return
            self.phase = Phase.WAITING_FOR_IMPORT
        for module in (_torch_internals.INDUCTOR_CODE_CACHE,
                       _torch_internals.INDUCTOR_WRAPPER_CODEGEN):
            if module in sys.modules:
                self._wrap(module)
            else:
                sys.meta_path.insert(0, _ImportHook(module, self._wrap))

    def _wrap(self, module: str) -> None:
        """Wraps what the imported `module` of inductor's has for us."""
        with self._lock:
            if self.phase is Phase.OFF or module in self._wrapped:
                return
            try:
                if module == _torch_internals.INDUCTOR_CODE_CACHE:
                    _torch_internals.wrap_inductor_module_loading(self.told)
                else:
                    _torch_internals.keep_function_line_maps()
            except Exception as error:  # noqa: BLE001 - never the program's problem
                self.phase = Phase.OFF
                _say_off(_torch_version() or "?", f"{module} is not what memtrace knows ({error})")
                return
            self._wrapped.add(module)
            if module == _torch_internals.INDUCTOR_CODE_CACHE:
                self.phase = Phase.INSTALLED

    def told(self, path: str, line_map: _torch_internals.LineMap) -> None:
        """Tells the recorder the stretches of the generated file at `path` (once a file). Never
        raises: the compiled code runs regardless, its allocations named by the generated file."""
        with self._lock:
            if path in self._told:
                return
            self._told.add(path)
        with contextlib.suppress(Exception):
            with open(path, encoding="utf-8") as file:
                line_count = sum(1 for _ in file)
            library = _native.library()
            for first, count, frames in stretches(line_map, line_count):
                library.memtrace_generated_code(os.fsencode(path), first, count,
                                                *_frame_arrays(frames))


def _torch_version() -> str | None:
    """The torch release the program has or will import, without importing it (seconds)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    directory = _native.torch_directory()
    return None if directory is None else _native.torch_release_at(directory)


def _say_off(version: str, why: str) -> None:
    warnings.warn(f"memtrace: allocations of torch.compile'd code are named by the code inductor "
                  f"generated, not by your source, under torch {version}: {why}", RuntimeWarning,
                  stacklevel=3)


def _frame_arrays(frames: Sequence[tuple[str, int, str]]) -> tuple[Any, Any, Any, int]:
    depth = len(frames)
    files = (ctypes.c_char_p * depth)(*(os.fsencode(file) for file, _, _ in frames))
    functions = (ctypes.c_char_p * depth)(*(function.encode() for _, _, function in frames))
    lines = (ctypes.c_int * depth)(*(line for _, line, _ in frames))
    return files, functions, lines, depth


class _ImportHook(importlib.abc.MetaPathFinder):
    """Calls `then(name)` once the module `name` has been imported (and run), then leaves."""

    def __init__(self, name: str, then: Callable[[str], None]) -> None:
        self._name = name
        self._then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in list(sys.meta_path):  # the finders that would have found it
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RunThen(spec.loader, lambda: self._then(fullname))
        return spec


class _RunThen(importlib.abc.Loader):
    """A module's own loader, calling `then()` after the module ran."""

    def __init__(self, loader: Any, then: Callable[[], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._then()

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tools
        return getattr(self._loader, name)


_names = GeneratedCodeNames()


def install() -> None:
    """Names compiled code's allocations by the user's source from now on (idempotent)."""
    _names.install()
