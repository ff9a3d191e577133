"""nn.Module attribution: the path each module is named by (``model.layers.3.attn``), the
global forward hooks that tell the recorder which module runs on each thread, and which module
owns each parameter and buffer.

tracing.py names the root it is given and installs the hooks; training.py names the module
whose backward runs (Note [Backward modules]); plan.py and parallel.py take a model's blocks
from here. They all import this module, which imports none of them."""
from __future__ import annotations

import ast
import dis
import linecache
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from . import _native, _storages

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
# calls it reaches it, as the call is written (Note [Naming a module without its caller's
# locals]): an attribute (`self.model(x)` in a LightningModule's training_step: `model`), else
# a variable (`model(**inputs)` in transformers' Trainer.compute_loss, `net(x)` in a script:
# `model`, `net`), else its class (`GPT2LMHeadModel`). Two roots reached by the same name are
# told apart by their class (`model[Discriminator]`). The estimator names paths under the root,
# which the report joins on (Note [Module paths of the tracer and the estimator] in
# prediction.cpp), so any root name meets it.
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


# Note [Naming a module without its caller's locals]
# A root is named by how the code calling it reaches it (Note [Module paths as the user names
# them]), and that name is read from the call itself, never from the caller's variables: on
# CPython 3.10 to 3.12, reading `frame.f_locals` of a function's frame stores a snapshot dict
# of its locals on the frame, which keeps each of them alive until the function returns or
# f_locals is read again. A training loop in a function (pytorch/examples' ImageNet `train()`,
# `output = model(images)`) then kept its first batch alive for the whole epoch: 19,395,840 B
# more at requested_bytes.all.peak for ResNet-50 under `memtrace run --gpu h100`, a change to
# the program memtrace watches (measured for issue 48). Clearing the snapshot after reading
# it is no way out either: in those versions `locals()` inside the function returns that same
# dict, which the program may hold.
# So the name is the callee of the call the calling frame is making (the instruction at its
# f_lasti): `model(images)` and `model(**inputs)` give `model`, `self.encoder(x)` gives
# `encoder` (the attribute of the calling module, as a LightningModule's `self.model(x)`), a
# call at a module's top level `net(x)` gives `net`. From 3.11 the call's source span
# (co_positions) is parsed; on 3.10, which has no positions, the instruction that pushed the
# callable is found by walking the bytecode back from the call, and a jump among the
# arguments (`model(a if c else b)`) leaves the module its class's name there. The name is then checked where
# that reads nothing a frame keeps: a global in the frame's globals and builtins, and, at a
# module's top level or from 3.13 on (where f_locals is a view, PEP 667, and keeps nothing),
# the frame's own variables and an attribute in its object's __dict__ or _modules. A name
# found there holding another object (`list(map(model, xs))` gives `list`) is no name. Whatever
# is uncertain (no source, a callee that is not a name or an attribute, such as
# `models[0](x)`, an instruction this does not know) leaves the module to its class's name: a
# wrong name is worse. It runs once for each root, so nothing is cached.
_CALLS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX",  # 3.11 and later
                    "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_METHOD"})  # 3.10 and before
_CO_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's frame, its locals in fast slots
_MISSING = object()


class _Callee(NamedTuple):
    """What a call calls, as the calling code wrote it: `name` (`model`, or `encoder` of
    `self.encoder`), the name of the object an attribute is read from (`self`) or None, and
    whether the name is one of the frame's own variables."""

    name: str
    attribute: bool
    base: str | None
    local: bool


def _calling_frame() -> types.FrameType | None:
    """The frame that called the module: the first out of this package's hooks and torch's
    Module.__call__ machinery."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.endswith(_TORCH_MODULE_FILE)
                                 or frame.f_globals.get("__name__", "").startswith("mem_tracer")):
        frame = frame.f_back
    return frame


def _local_names(code: types.CodeType) -> frozenset[str]:
    return frozenset(code.co_varnames + code.co_cellvars + code.co_freevars)


def _callee_from_source(frame: types.FrameType, instruction: dis.Instruction) -> _Callee | None:
    """The callee of the call `instruction`, from its source span (CPython 3.11 and later)."""
    positions = getattr(instruction, "positions", None)
    if positions is None or None in (positions.lineno, positions.end_lineno,
                                     positions.col_offset, positions.end_col_offset):
        return None
    code = frame.f_code
    lines = linecache.getlines(code.co_filename, frame.f_globals)
    if not lines or positions.end_lineno > len(lines):
        return None
    # Columns count UTF-8 bytes.
    span = [line.encode() for line in lines[positions.lineno - 1:positions.end_lineno]]
    span[-1] = span[-1][:positions.end_col_offset]
    span[0] = span[0][positions.col_offset:]
    try:
        # In parentheses: a call whose callee spans lines (`self\n.model(x)`) is one expression.
        tree = ast.parse("(" + b"".join(span).decode() + ")", mode="eval")
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None
    call = tree.body
    if not isinstance(call, ast.Call):
        return None
    if isinstance(call.func, ast.Name):
        name, local = call.func.id, call.func.id in _local_names(code)
        # A stale source (the file changed since it was compiled) names what the code never
        # loads.
        return _Callee(name, False, None, local) if local or name in code.co_names else None
    if isinstance(call.func, ast.Attribute) and call.func.attr in code.co_names:
        base = call.func.value.id if isinstance(call.func.value, ast.Name) else None
        return _Callee(call.func.attr, True, base, base is not None and base in _local_names(code))
    return None


def _pops_and_pushes(instruction: dis.Instruction) -> tuple[int, int] | None:
    """How many stack items `instruction` pops and pushes, for those an argument expression
    is made of on CPython 3.10 and before; None for any other."""
    name, argument = instruction.opname, instruction.arg or 0
    if name in ("LOAD_FAST", "LOAD_CONST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF",
                "LOAD_CLASSDEREF", "LOAD_CLOSURE"):
        counts = (0, 1)
    elif name in ("LOAD_ATTR", "GET_ITER", "LIST_TO_TUPLE") or name.startswith("UNARY_"):
        counts = (1, 1)
    elif name == "LOAD_METHOD":
        counts = (1, 2)
    elif name.startswith("BINARY_") or name in ("COMPARE_OP", "IS_OP", "CONTAINS_OP"):
        counts = (2, 1)
    elif name in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_STRING", "BUILD_SLICE"):
        counts = (argument, 1)
    elif name == "BUILD_MAP":
        counts = (2 * argument, 1)
    elif name == "BUILD_CONST_KEY_MAP":
        counts = (argument + 1, 1)
    elif name in ("LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE"):
        counts = (1, 0)  # into the container below, which stays
    elif name == "FORMAT_VALUE":
        counts = (2 if argument & 0x04 else 1, 1)  # 0x04: a format spec is on the stack
    elif name == "MAKE_FUNCTION":
        counts = (2 + bin(argument & 0x0F).count("1"), 1)  # code, qualified name, one per flag
    elif name in ("CALL_FUNCTION", "CALL_METHOD"):
        counts = (argument + 1 + (name == "CALL_METHOD"), 1)
    elif name == "CALL_FUNCTION_KW":
        counts = (argument + 2, 1)
    elif name == "CALL_FUNCTION_EX":
        counts = (2 + (argument & 0x01), 1)
    elif name in ("NOP", "EXTENDED_ARG"):
        counts = (0, 0)
    else:
        return None
    # The table against CPython's own count, where they could ever differ.
    effect = dis.stack_effect(instruction.opcode,
                              instruction.arg if instruction.opcode >= dis.HAVE_ARGUMENT else None)
    return counts if counts[1] - counts[0] == effect else None


def _callee_from_bytecode(frame: types.FrameType, instructions: list[dis.Instruction],
                          index: int) -> _Callee | None:
    """The callee of the call `instructions[index]`, from the instruction that pushed the
    callable (CPython 3.10 and before, which have no source positions)."""
    call = instructions[index]
    counts = _pops_and_pushes(call)
    if counts is None:
        return None
    # How many stack items lie above the callable: the call's arguments (and, for a method,
    # the object; for keywords, their names' tuple).
    above = counts[0] - 1
    position = index - 1
    while True:
        if position < 0:
            return None
        instruction = instructions[position]
        counts = _pops_and_pushes(instruction)
        if counts is None:
            return None  # a jump (a conditional argument), a store, an instruction not known
        if above < counts[1]:
            break
        if instruction.is_jump_target:
            return None
        above += counts[0] - counts[1]
        position -= 1
    if call.is_jump_target:
        return None
    code = frame.f_code
    name = instruction.argval
    if instruction.opname in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF"):
        return _Callee(name, False, None, True)
    if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
        return _Callee(name, False, None, False)
    if instruction.opname in ("LOAD_ATTR", "LOAD_METHOD"):
        # The object is the stack's top when the attribute is read: what the instruction just
        # before pushed, when nothing jumps in between.
        base, local = None, False
        before = instructions[position - 1] if position > 0 else None
        if before is not None and not instruction.is_jump_target and before.opname in (
                "LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_GLOBAL", "LOAD_NAME"):
            base, local = before.argval, before.argval in _local_names(code)
        return _Callee(name, True, base, local)
    return None


def _callee(frame: types.FrameType) -> _Callee | None:
    """What the call `frame` is making calls, as its code writes it; None when unsure."""
    instructions = list(dis.get_instructions(frame.f_code))
    index = next((i for i, instruction in enumerate(instructions)
                  if instruction.offset == frame.f_lasti), None)
    if index is None or instructions[index].opname not in _CALLS:
        return None
    if sys.version_info >= (3, 11):
        return _callee_from_source(frame, instructions[index])
    return _callee_from_bytecode(frame, instructions, index)


def _reads_nothing_kept(frame: types.FrameType) -> bool:
    """Whether reading `frame.f_locals` keeps nothing alive: a view from 3.13 on (PEP 667); else
    a module's or class's namespace itself, for a frame that is no function's and has no cells
    that reading would copy into it."""
    code = frame.f_code
    return sys.version_info >= (3, 13) or not (code.co_flags & _CO_OPTIMIZED or code.co_cellvars
                                               or code.co_freevars)


def _value_of(frame: types.FrameType, name: str, local: bool) -> object:
    """The value `name` has in `frame`, where reading it keeps nothing alive; else _MISSING."""
    if _reads_nothing_kept(frame):
        namespaces: tuple[Any, ...] = (frame.f_locals, frame.f_globals, frame.f_builtins)
    elif local:
        return _MISSING
    else:
        namespaces = (frame.f_globals, frame.f_builtins)
    for namespace in namespaces:
        if name in namespace:
            return namespace[name]
    return _MISSING


def _holds_another(frame: types.FrameType, callee: _Callee, module: Any) -> bool:
    """Whether what `callee` names, where it can be read without keeping anything alive, is
    not `module` (Note [Naming a module without its caller's locals])."""
    if not callee.attribute:
        value = _value_of(frame, callee.name, callee.local)
        return value is not _MISSING and value is not module
    if callee.base is None:
        return False
    owner = _value_of(frame, callee.base, callee.local)
    # The object's own dictionaries only: a getattr could run the program's code.
    namespace = getattr(owner, "__dict__", None) if owner is not _MISSING else None
    if not isinstance(namespace, dict):
        return False
    children = namespace.get("_modules")
    if isinstance(children, dict) and callee.name in children:
        return children[callee.name] is not module
    return callee.name in namespace and namespace[callee.name] is not module


def _name_by_caller(module: Any) -> str | None:
    """The name the code calling `module` reaches it by: the callee of its call, a variable or
    an attribute; None when unsure (Note [Naming a module without its caller's locals])."""
    frame = _calling_frame()
    if frame is None:
        return None
    try:
        callee = _callee(frame)
        if callee is None or _holds_another(frame, callee, module):
            return None
    except Exception:  # noqa: BLE001 - a name is not worth an error in the program it names
        return None
    return callee.name


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


def named_modules() -> list[tuple[Any, str]]:
    """Every module named so far, with its path, in the order they were named (a root before
    its children, a child in its parent's order)."""
    return list(_names.items())


_encoded: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()
# The modules whose parameters and buffers this trace was told the owner of, all of them on
# the device then (Note [Weights and their modules] in tracer/format/records.h).
_owners_told: weakref.WeakSet[Any] = weakref.WeakSet()


def _tell_owner(module: Any, path: bytes) -> None:
    if module not in _owners_told and _storages.tell_owner(module, path):
        _owners_told.add(module)


def tell_owners(root: Any) -> None:
    """Tells the recorder which module owns each parameter and buffer under `root` that is on
    the device now (start_tracing(model=...)): the report then puts a model's weights under
    their modules, however long before tracing they were allocated."""
    for module in root.modules():
        _tell_owner(module, module_path(module).encode())


def _enter(module: Any, args: Any) -> None:
    if _compiling():  # Note [Module hooks under torch.compile]
        return
    path = _encoded.get(module)
    if path is None:
        path = _encoded[module] = module_path(module).encode()
    # Once per module and trace, when it first runs with its tensors on the device: a model
    # traced without model= (memtrace run) has its weights under their modules too.
    _tell_owner(module, path)
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
        # The next trace is told again (a new file knows none of this one's records).
        _owners_told.clear()
        _storages.forget_owners()


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
