"""nn.Module attribution: the path each module is named by (``model.layers.3.attn``), and the
global forward hooks that tell the recorder which module runs on each thread.

tracing.py names the root it is given and installs the hooks; training.py names the module
whose backward runs (Note [Backward modules]); plan.py and parallel.py take a model's blocks
from here. They all import this module, which imports none of them."""
from __future__ import annotations

import sys
import threading
import types
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


# Note [Module paths as the user names them]
# A path is the one the user's code would write to reach the module: `model.transformer.h.3`.
# Wrappers that frameworks put around a model add a level the user never wrote, and are
# passed over: torch.compile's OptimizedModule (`_orig_mod`), FSDP1's FlatParameter wrapper
# (`_fsdp_wrapped_module`), checkpoint_wrapper's (`_checkpoint_wrapped_module`), and the
# `module` of DistributedDataParallel, DataParallel and DeepSpeed's engine (a module whose one
# child is `module` and which holds no parameter of its own: a user's own `self.module` in a
# container that does more is kept). FSDP2 (fully_shard) changes the module's class in place
# and adds no level.
# A root (a module never named, such as the model of a program traced by `memtrace run` or by
# start_tracing() without model=) is named when it is first called, once, by how the code that
# calls it reaches it: the attribute of the calling module (`self.model(x)` in a
# LightningModule's training_step: `model`), else the calling function's variable
# (`model(**inputs)` in transformers' Trainer.compute_loss, `net(x)` in a script: `model`,
# `net`), else its class (`GPT2LMHeadModel`). Two roots reached by the same name are told apart
# by their class (`model[Discriminator]`). The estimator names paths under the root, which the
# report joins on (Note [Module paths of the tracer and the estimator] in prediction.cpp), so
# any root name meets it.
_WRAPPER_ATTRIBUTES = frozenset({"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"})
_roots: dict[str, weakref.ref[Any]] = {}  # root name -> the root it names


def _passes_over(parent: Any, name: str) -> bool:
    """Whether the child `name` of `parent` is the module a wrapper wraps (no path level)."""
    if name in _WRAPPER_ATTRIBUTES:
        return True
    return name == "module" and len(parent._modules) == 1 and not parent._parameters


def name_modules(root: Any, prefix: str) -> None:
    """Names `root` `prefix` and each module under it by its attribute path from there
    (``prefix.layers.3``), wrappers passed over (Note [Module paths as the user names them]).
    A module named before keeps its first name."""
    pending = [(root, prefix)]
    seen: set[int] = set()
    while pending:
        module, path = pending.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        _names.setdefault(module, path)
        for name, child in reversed(list(module._modules.items())):
            if child is not None:
                pending.append((child, path if _passes_over(module, name) else f"{path}.{name}"))


_TORCH_MODULE_FILE = ("torch/nn/modules/module.py", "torch\\nn\\modules\\module.py")


def _name_by_caller(module: Any) -> str | None:
    """The name the code calling `module` reaches it by: an attribute of the calling module, or
    a variable of the calling function; None when neither holds it."""
    frame: types.FrameType | None = sys._getframe(1)
    # Out of this package's hooks and torch's Module.__call__ machinery.
    while frame is not None and (frame.f_code.co_filename.endswith(_TORCH_MODULE_FILE)
                                 or frame.f_globals.get("__name__", "").startswith("mem_tracer")):
        frame = frame.f_back
    if frame is None:
        return None
    variables = frame.f_locals
    caller = variables.get("self")
    children = getattr(caller, "_modules", None)
    if isinstance(children, dict):
        for name, child in children.items():
            if child is module:
                return str(name)
    for name, value in variables.items():
        if value is module and name != "self":
            return name
    return None


def _root_name(module: Any) -> str:
    name = _name_by_caller(module) or type(module).__name__
    taken = _roots.get(name)
    if taken is not None and taken() is not None and taken() is not module:
        name = f"{name}[{type(module).__name__}]"
    _roots[name] = weakref.ref(module)
    return name


def module_path(module: Any) -> str:
    """The path `module` was named by; a module never named is a root of its own, named by
    how its caller reaches it (Note [Module paths as the user names them])."""
    path = _names.get(module)
    if path is None:
        name_modules(module, _root_name(module))
        path = _names[module]
    return path


_encoded: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def _enter(module: Any, args: Any) -> None:
    if _compiling():  # Note [Module hooks under torch.compile]
        return
    path = _encoded.get(module)
    if path is None:
        path = _encoded[module] = module_path(module).encode()
    _native.library().memtrace_module_enter(path)


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
