"""Names the line that called backward for the allocations autograd makes on threads that never
ran Python (Note [Stacks lent to threads without Python], tracer/recorder/recorder.cpp).

On a GPU, autograd's engine runs backward on the device's own thread while the thread that called
``loss.backward()`` (or ``torch.autograd.grad``) waits in the engine with the GIL released: the
allocations of backward have no Python stack of their own. While tracing, the engine object
every entry point calls (``Variable._execution_engine.run_backward``) is wrapped: the calling
thread lends its stack to the recorder just before it waits and takes it back when the engine
returns. The cost is two C calls per backward; nothing is added per allocation. On the CPU the
engine runs on the calling thread itself, whose own frames then name the line."""
from __future__ import annotations

from typing import Any

from . import _native, _torch_internals


class _LendingEngine:
    """Autograd's engine, with run_backward lending the caller's stack; everything else is the
    engine's own (queue_callback, ...)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        library = _native.library()
        lent = library.memtrace_lend_python_stack(1)  # 1: not this wrapper's frame
        try:
            return self._engine.run_backward(*args, **kwargs)
        finally:
            if lent:
                library.memtrace_end_lent_python_stack()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class _Installed:
    """The wrapper in place; remove() puts the engine back (a handle, as torch's hooks give)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def remove(self) -> None:
        if isinstance(_torch_internals.execution_engine(), _LendingEngine):
            _torch_internals.set_execution_engine(self._engine)


def lend_stacks_to_autograd() -> _Installed | None:
    """Wraps autograd's engine (once); returns the handle that unwraps it, or None where this
    torch has no such engine object (then backward's device threads stay unnamed)."""
    engine = _torch_internals.execution_engine()
    if engine is None or not hasattr(engine, "run_backward"):
        return None
    if isinstance(engine, _LendingEngine):
        return None
    _torch_internals.set_execution_engine(_LendingEngine(engine))
    return _Installed(engine)
