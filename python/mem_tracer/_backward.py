"""Names the line that called backward for the allocations autograd makes on threads that never
ran Python (Note [Stacks lent to threads without Python], tracer/recorder/lent_stacks.cpp).

On a GPU, autograd's engine runs backward on the device's own thread while the thread that called
``loss.backward()`` (or ``torch.autograd.grad``) waits in the engine with the GIL released: the
allocations of backward have no Python stack of their own. While tracing, the engine object
every entry point calls (``Variable._execution_engine.run_backward``) is wrapped: the calling
thread lends its stack to the recorder just before it waits and takes it back when the engine
returns, and a pre-hook on each root's node tells the lend which of the engine's graph tasks it
is for when backward reaches it (backward nests and interleaves: a re-entrant checkpoint runs
one inside another on the device's thread; two threads may run theirs at once). The cost is
three C calls and a hook per backward; nothing is added per allocation. On the CPU the engine
runs on the calling thread itself, whose own frames then name the line. Under LD_PRELOAD the
library lends from inside the engine by itself, and takes this lend as its own."""
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
        handles = _bind_at_roots(library, lent, args[0] if args else kwargs.get("tensors", ()))
        try:
            return self._engine.run_backward(*args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()
            if lent:
                library.memtrace_end_lent_python_stack()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def _bind_at_roots(library: Any, lent: int, roots: Any) -> list[Any]:
    """Pre-hooks on the roots' nodes that bind the lend to the graph task running them (on
    whichever thread runs them); nothing when nothing was lent or no root has a node."""
    if not lent:
        return []
    bound: list[bool] = []

    def bind(*_: Any) -> None:
        if not bound:
            bound.append(True)
            library.memtrace_bind_lent_python_stack(lent)

    nodes = {id(node): node for node in (getattr(root, "grad_fn", None) for root in
                                         (roots if isinstance(roots, (tuple, list)) else (roots,)))
             if node is not None}
    return [node.register_prehook(bind) for node in nodes.values()]


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
