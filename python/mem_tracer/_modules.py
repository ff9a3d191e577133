"""nn.Module attribution: the path each module is named by (``model.layers.3.attn``), and the
global forward hooks that tell the recorder which module runs on each thread.

tracing.py names the root it is given and installs the hooks; training.py names the module
whose backward runs (Note [Backward modules]); plan.py and parallel.py take a model's blocks
from here. They all import this module, which imports none of them."""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from . import _native

_lock = threading.Lock()
_forward_hooks: list[Any] = []  # the handles of the global forward hooks, while installed
_names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _not_compiling() -> bool:
    return False


# Note [Module hooks under torch.compile]
# dynamo traces the global forward hooks into a compiled model's graph, and this module's
# lookups (a WeakKeyDictionary of modules, a cached library) make it fail ("... is already
# tracked for mutation": an AssertionError in the user's program, torch 2.14). The compiled
# graph runs no module's code, so there is nothing to tell the recorder while dynamo traces:
# the hooks return at once when torch.compiler.is_compiling(), which dynamo reads as a constant.
_compiling: Callable[[], bool] = _not_compiling


def name_modules(root: Any, prefix: str) -> None:
    """Names `root` `prefix` and each module under it by its attribute path from there
    (``prefix.layers.3``). A module named before keeps its first name."""
    for name, module in root.named_modules():
        _names.setdefault(module, f"{prefix}.{name}" if name else prefix)


def module_path(module: Any) -> str:
    """The path `module` was named by; a module never named is a root of its own, named by
    its class."""
    path = _names.get(module)
    if path is None:
        name_modules(module, type(module).__name__)
        path = _names[module]
    return path


def _enter(module: Any, args: Any) -> None:
    if _compiling():  # Note [Module hooks under torch.compile]
        return
    _native.library().memtrace_module_enter(module_path(module).encode())


def _exit(module: Any, args: Any, output: Any) -> None:
    if _compiling():
        return
    _native.library().memtrace_module_exit()


def install_forward_hooks() -> None:
    """Installs the global forward hooks that enter and leave each module (once; without torch,
    nothing)."""
    with _lock:
        if _forward_hooks:
            return
        try:
            import torch
            from torch.nn.modules import module as torch_module
        except ImportError:
            return
        global _compiling
        _compiling = getattr(getattr(torch, "compiler", None), "is_compiling", _not_compiling)
        _forward_hooks.append(torch_module.register_module_forward_pre_hook(_enter))
        # always_call: the exit runs even when forward raises, so the stacks stay balanced.
        _forward_hooks.append(torch_module.register_module_forward_hook(_exit, always_call=True))


def remove_forward_hooks() -> None:
    with _lock:
        while _forward_hooks:
            _forward_hooks.pop().remove()


def module_blocks(model: Any) -> list[str]:
    """The modules worth checkpointing: the layers of the model's ModuleLists and Sequentials
    (a transformer's blocks, a ResNet's stages' blocks), else the root's children that hold
    parameters. plan() checkpoints them and FSDP shards them by default."""
    from torch import nn

    found: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and name:
            for child, layer in module.named_children():
                if any(True for _ in layer.parameters()) and layer._modules:
                    found.append(f"{name}.{child}")
    if found:
        # Only the outermost: a block inside another block goes with it.
        return [path for path in found
                if not any(path.startswith(other + ".") for other in found)]
    return [name for name, child in model.named_children()
            if any(True for _ in child.parameters())]
