"""Every use of PyTorch's private API in mem_tracer, in one place, behind one version gate.

Note [PyTorch internals]
Recording a step on fake tensors, one rank of a job on the fake process group, and the
training categories of a trace need what torch does not promise to keep: fake tensors and
dispatch modes and their stack (torch._subclasses, torch.utils._python_dispatch), pytree, the autograd
engine's saved-tensor hooks, callbacks and graph task (torch._C._autograd, Variable._execution_engine),
the optimizer's foreach selection, the fake process group (torch.testing._internal), DDP's
private parameter-shape check, pre-forward and the two functions that allocate its gradient
buckets, an op's schema, a storage's id and its Python object's lifetime, ATen's
private ops the device runs (_scaled_dot_product_*, _safe_softmax), and inductor's loading of
the code it generated (torch._inductor.codecache.PyCodeCache.load_by_key_path and the line map
it is given: Note [Generated code] in tracer/format/records.h). Each is named here once;
the rest of the package calls these functions and never imports a private name itself.

Supported: torch 2.11 to 2.14 (FIRST_SUPPORTED to LAST_SUPPORTED). Every name below resolves on
each torch the tests run (tests/python/test_torch_internals.py, under 2.13.0+cpu and under the
CUDA build 2.14.1+cu130); torch 2.11 is where the GPU measurements of docs/gpu-record-h200.md
ran. `require()` refuses any other release in one line, naming the installed one and the range,
before a feature that needs these starts (MEMTRACE_UNTESTED_TORCH=1 lets it try anyway). The
trace's training hooks never refuse (they run inside the user's program): they resolve what
they need when installed and leave out what a release lacks.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, Optional

from .errors import MemTracerError

FIRST_SUPPORTED = (2, 11)
LAST_SUPPORTED = (2, 14)
SUPPORTED = f"{FIRST_SUPPORTED[0]}.{FIRST_SUPPORTED[1]} to {LAST_SUPPORTED[0]}.{LAST_SUPPORTED[1]}"
UNTESTED_VARIABLE = "MEMTRACE_UNTESTED_TORCH"

# The files of torch's own machinery between a model's code and a dispatch mode: a frame in one
# of them is not where an op is (step_graph's stacks skip them).
MACHINERY_FILES = ("/torch/utils/_", "/torch/_subclasses/", "/torch/_dynamo/",
                   "/torch/_compile.py", "/torch/_ops.py", "/torch/overrides.py")
# The logger FakeTensorMode writes a failing op's error to, besides raising it.
FAKE_TENSOR_LOGGER = "torch._subclasses.fake_tensor"
# ATen's private ops called by name (device_kernels: what the device runs).
PRIVATE_ATEN_OPS = ("_safe_softmax", "_scaled_dot_product_cudnn_attention", "_slow_conv2d_forward",
                    "_scaled_dot_product_flash_attention",
                    "_scaled_dot_product_efficient_attention", "_unsafe_view")


# The module of inductor's PyCodeCache, which loads every module inductor generated (the
# compiled graphs' code), and that of its Python wrapper's code generator: _compiled waits for
# each one's import to wrap what it needs (importing them itself would import inductor in every
# program, and one of them while the other is being imported is a circular import).
INDUCTOR_CODE_CACHE = "torch._inductor.codecache"
INDUCTOR_WRAPPER_CODEGEN = "torch._inductor.codegen.wrapper"


# ---- the gate ------------------------------------------------------------------------------

def torch_release(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of `version`, by default the installed torch's ("2.14.1+cu130": (2, 14))."""
    if version is None:
        import torch
        version = torch.__version__
    major, minor = str(version).split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def supported(version: str | None = None) -> bool:
    """Whether the installed torch (or `version`) is a supported release."""
    return FIRST_SUPPORTED <= torch_release(version) <= LAST_SUPPORTED


def require(feature: str) -> None:
    """Refuses, in one line, to start `feature` on a torch outside the supported range (Note
    [PyTorch internals]), unless MEMTRACE_UNTESTED_TORCH=1."""
    if supported() or os.environ.get(UNTESTED_VARIABLE) == "1":
        return
    import torch
    raise MemTracerError(f"{feature} uses PyTorch internals checked on torch {SUPPORTED}, and "
                         f"torch {torch.__version__} is installed: install torch {SUPPORTED}, "
                         f"or set {UNTESTED_VARIABLE}=1 to try this release")


# ---- fake tensors and dispatch modes ------------------------------------------------------

def fake_tensor_mode(**options: Any) -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode(**options)


def fake_tensor_type() -> type:
    from torch._subclasses.fake_tensor import FakeTensor
    return FakeTensor


def fake_constant(value: Any) -> Any:
    """The value a fake tensor holds when it was made from numbers alone (FakeTensor.constant,
    kept for small tensors), else None."""
    if not isinstance(value, fake_tensor_type()):
        return None
    return getattr(value, "constant", None)


def forget_fake_tensor(fake_mode: Any, tensor: Any) -> None:
    """Drops `tensor` from `fake_mode`'s memo of the tensors it made (FakeTensorConverter's
    tensor_memo, a WeakValueDictionary that holds a weak reference to every fake tensor an op
    made), so that torch.utils.swap_tensors, which refuses a tensor with weak references, takes
    it (Note [Module.to() on fake tensors] in estimator/step_graph.py)."""
    memo = fake_mode.fake_tensor_converter.tensor_memo
    for key in [key for key, value in list(memo.items()) if value is tensor]:
        del memo[key]


@contextlib.contextmanager
def swap_tensors_replaced(swap: Callable[[Any, Any, Callable[[Any, Any], None]], None]
                          ) -> Iterator[None]:
    """torch.utils.swap_tensors, which nn.Module._apply looks up at each call, replaced for the
    block by `swap(t1, t2, original)`."""
    import torch.utils
    original = torch.utils.swap_tensors
    torch.utils.swap_tensors = lambda t1, t2: swap(t1, t2, original)
    try:
        yield
    finally:
        torch.utils.swap_tensors = original


def data_dependent_errors() -> tuple[type[BaseException], ...]:
    """What a fake tensor raises for an op whose output depends on the data."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )
    return DataDependentOutputException, DynamicOutputShapeException


def torch_dispatch_mode() -> type:
    """TorchDispatchMode, the base of a mode that sees every op below autograd."""
    from torch.utils._python_dispatch import TorchDispatchMode
    return TorchDispatchMode


def disable_current_modes() -> Any:
    """A context in which no dispatch mode runs (the ops inside it run as they are)."""
    from torch.utils._python_dispatch import _disable_current_modes
    return _disable_current_modes()


def is_wrapper_subclass(tensor: Any) -> bool:
    """Whether `tensor` is a subclass that wraps others (DTensor): __tensor_flatten__ names them."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    return bool(is_traceable_wrapper_subclass(tensor))


def tree_leaves(value: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves as leaves
    return list(leaves(value))


def tree_map(function: Callable[[Any], Any], value: Any) -> Any:
    from torch.utils._pytree import tree_map as mapped
    return mapped(function, value)


def disable_torch_function_subclass() -> Any:
    import torch
    return torch._C.DisableTorchFunctionSubclass()


def tensor_base_clone() -> Callable[..., Any]:
    """The clone a TorchFunctionMode sees from nn.Parameter's __deepcopy__."""
    import torch
    return torch._C.TensorBase.clone


def functional_tensor_type() -> type:
    from torch._subclasses.functional_tensor import FunctionalTensor
    return FunctionalTensor


def op_overload_call_code() -> Any:
    """The code object of OpOverload.__call__, the frame every op call from Python runs in."""
    import torch
    return torch._ops.OpOverload.__call__.__code__


def storage_key(storage: Any) -> int:
    """A storage's identity: the same for every tensor over it, while it lives."""
    return int(storage._cdata)


def storage_of_weak_ref(cdata: int) -> Any:
    """The storage a weak reference (`storage._weak_ref()`, StorageWeakRef.cdata) names, while it
    lives: the same Python object as every tensor's `untyped_storage()` (Note [Releases as
    storages die] in estimator/step_recorder.py)."""
    import torch
    return torch.UntypedStorage._new_with_weak_ptr(cdata)


def _check_storage_object_preserved() -> None:
    """Note [Releases as storages die]: a storage's Python object lives as long as the storage,
    whoever holds it, and is what its weak reference gives back."""
    import weakref

    import torch
    base = torch.zeros(4)
    storage: Any = base.untyped_storage()
    cdata = storage._weak_ref()
    died: list[bool] = []
    watch = weakref.ref(storage, lambda _: died.append(True))
    try:
        if storage_of_weak_ref(cdata) is not storage:
            raise LookupError("a storage's weak reference gives another Python object")
        del storage
        view = base[1:]
        del base
        if died or watch() is not view.untyped_storage():
            raise LookupError("a storage's Python object died while a view held the storage")
        del view
        if not died or not torch.UntypedStorage._expired(cdata):
            raise LookupError("a storage's Python object outlived the storage")
    finally:
        torch.UntypedStorage._free_weak_ref(cdata)


def rnn_flat_weights(module: Any) -> list[Any] | None:
    """An nn.RNNBase's weights in the order flatten_parameters hands them to cuDNN
    (_flat_weights), or None while that list is only partly made, as flatten_parameters
    checks (Note [cuDNN's flat RNN weights] in estimator/device_kernels.py)."""
    weights = list(module._flat_weights)
    return weights if len(weights) == len(module._flat_weights_names) else None


def op_schema(func: Any) -> Any:
    """An OpOverload's FunctionSchema (name, arguments with their alias information)."""
    return func._schema


def op_packet(func: Any) -> Any:
    """An OpOverload's packet (aten.mm for aten.mm.default), as flop_registry keys it."""
    return func._overloadpacket


def aten_op(name: str) -> Any:
    """One of PRIVATE_ATEN_OPS."""
    import torch
    assert name in PRIVATE_ATEN_OPS, name
    return getattr(torch.ops.aten, name)


# ---- autograd -----------------------------------------------------------------------------

def saved_tensors_hooks_enabled() -> bool:
    import torch
    enabled = getattr(torch._C._autograd, "_saved_tensors_hooks_is_enabled", None)
    return True if enabled is None else bool(enabled())


def top_saved_tensors_hooks() -> Any:
    """The (pack, unpack) pair in force (None when none)."""
    import torch
    return torch._C._autograd._top_saved_tensors_default_hooks(False)


def push_saved_tensors_hooks(pack: Callable[[Any], Any], unpack: Callable[[Any], Any]) -> None:
    import torch
    torch._C._autograd._push_saved_tensors_default_hooks(pack, unpack)


def pop_saved_tensors_hooks() -> None:
    import torch
    torch._C._autograd._pop_saved_tensors_default_hooks()


def execution_engine() -> Any:
    """The engine object every backward goes through (Variable._execution_engine: its
    run_backward, queue_callback); None where this torch has none."""
    import torch
    return getattr(getattr(torch.autograd, "Variable", None), "_execution_engine", None)


def set_execution_engine(engine: Any) -> None:
    """Puts `engine` in place of the one execution_engine() returns (_backward wraps it)."""
    import torch
    torch.autograd.Variable._execution_engine = engine


def inside_backward() -> bool:
    """Whether autograd's engine is running a graph task on this thread
    (torch._C._current_graph_task_id() is -1 outside one); False where this torch lacks it."""
    import torch
    current = getattr(torch._C, "_current_graph_task_id", None)
    return current is not None and current() != -1


def current_autograd_node() -> Any:
    """The autograd Node the engine is evaluating on this thread (torch._C._current_autograd_node:
    its formula, then the engine adding its outputs into the next nodes' input buffers), or
    None."""
    import torch
    return torch._C._current_autograd_node()


@contextlib.contextmanager
def dispatch_mode_suspended(mode: Any) -> Iterator[bool]:
    """Takes `mode` off this thread's dispatch mode stack for the block when it is the mode on
    top (yields True), and puts it back after; leaves the stack as it is otherwise (False)."""
    from torch.utils import _python_dispatch
    if _python_dispatch._get_current_dispatch_mode() is not mode:
        yield False
        return
    _python_dispatch._pop_mode()
    try:
        yield True
    finally:
        _python_dispatch._push_mode(mode)


def queue_backward_callback(callback: Callable[[], None]) -> None:
    """Runs `callback` when the backward running now ends; RuntimeError outside a backward."""
    execution_engine().queue_callback(callback)


# ---- the optimizer ------------------------------------------------------------------------

def foreach_kernel_devices() -> list[str]:
    """The device types torch.optim's foreach implementation runs on."""
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices
    return list(_get_foreach_kernels_supported_devices())


def foreach_supported_types() -> list[type]:
    """The parameter types _default_to_fused_or_foreach takes for foreach."""
    from torch.optim.optimizer import _foreach_supported_types
    return list(_foreach_supported_types)


# ---- torch.distributed --------------------------------------------------------------------

def register_fake_backend() -> None:
    """Registers the "fake" backend: a process group that answers every collective without
    sending anything (Note [One rank on the fake process group])."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  # registers "fake"


def ddp_bucket_allocators() -> list[tuple[Any, str]]:
    """The (class, attribute) of each function in which DDP allocates its gradient buckets:
    DistributedDataParallel._ddp_init_helper, which builds its Reducer (the first buckets), and
    the Reducer's _rebuild_buckets (Note [Owners that are not modules] in training.py). []
    where torch has no distributed package."""
    import torch
    if not torch.distributed.is_available():
        return []
    from torch.distributed import Reducer  # type: ignore[attr-defined]
    from torch.nn.parallel import DistributedDataParallel
    found = [(DistributedDataParallel, "_ddp_init_helper"), (Reducer, "_rebuild_buckets")]
    return [(owner, name) for owner, name in found if name in owner.__dict__]


def fake_store() -> Any:
    from torch.testing._internal.distributed.fake_pg import FakeStore
    return FakeStore()


@contextlib.contextmanager
def ddp_shape_check_skipped() -> Iterator[None]:
    """DistributedDataParallel without its check that every rank's parameters have the same
    shapes (it reads their values; one process has one set of shapes)."""
    from unittest import mock

    from torch.nn.parallel import distributed
    with mock.patch.object(distributed, "_verify_param_shape_across_processes",
                           lambda *arguments, **options: None):
        yield


def wrap_ddp_pre_forward(wrapped: Any, context: Callable[[], Any]) -> None:
    """Runs DDP's pre-forward (where its Reducer rebuilds the buckets) inside `context()`."""
    pre_forward: Callable[..., Any] = wrapped._pre_forward

    def _pre_forward(*inputs: Any, **options: Any) -> Any:
        with context():
            return pre_forward(*inputs, **options)

    wrapped._pre_forward = _pre_forward


# ---- torch.compile's generated code -------------------------------------------------------

LineMap = list[tuple[int, Optional[str]]]  # Optional: runs on import (Python 3.9's syntax)


class _Functions:
    """The functions inductor spliced into a module since the last graph's module loaded: their
    text and line maps (Note [The line maps of graph partitions])."""

    def __init__(self) -> None:
        self.defined: list[tuple[str, LineMap]] = []

    def line_map(self, path: str) -> LineMap:
        """Their line maps' entries where their text is in the file at `path`."""
        found: LineMap = []
        with open(path, encoding="utf-8") as file:
            source = file.read()
        for text, line_map in self.defined:
            at = source.find(text) if text else -1
            if at >= 0 and source.find(text, at + 1) < 0:
                offset = source.count("\n", 0, at)
                found += [(line + offset, trace) for line, trace in line_map]
        return found


_functions = _Functions()


def wrap_inductor_module_loading(told: Callable[[str, LineMap], None]) -> None:
    """Calls told(path, line_map) as inductor loads each Python module it generated, before the
    module runs: PyCodeCache.load_by_key_path(key, path, linemap, ...), for a graph compiled now
    and for one its caches hold alike. line_map is inductor's [(line, stack trace)]: from that line
    of the file at `path` to the next entry's, the code of one FX node, whose
    node.meta["stack_trace"] is the text (traceback's "File ..., line N, in f" lines, outermost
    first), or None. Call once INDUCTOR_CODE_CACHE is imported; `told` must not raise.

    Note [The line maps of graph partitions]
    A graph split into partitions (mode="reduce-overhead": CUDA graphs around the parts that can
    be captured) is generated as one function per partition, each with a line map of its own,
    which inductor drops when it splices the function's text into the module
    (PythonWrapperCodegen.define_subgraph_launcher_fn takes the ValueWithLineMap's value): the
    module's own map is then empty. So keep_function_line_maps() keeps the text and the map of
    every such function as inductor defines it; when the module loads, each text found once in
    its file (spliced whole, dedented) gives its entries, shifted to where it is, and they join
    the module's map in place, in line order: the map inductor caches with the graph then has
    them too, so a graph found in its cache later is named as well (and inductor's own tracebacks
    of kernels gain those lines)."""
    import importlib
    code_cache = importlib.import_module(INDUCTOR_CODE_CACHE).PyCodeCache
    load = code_cache.__dict__["load_by_key_path"].__func__

    def load_by_key_path(cls: Any, key: str, path: str, linemap: Any = None, *arguments: Any,
                         **options: Any) -> Any:
        if linemap is not None and _functions.defined:  # a graph's module, not a kernel's
            with contextlib.suppress(Exception):
                added = _functions.line_map(path)
                if added and isinstance(linemap, list):
                    linemap.extend(added)
                    linemap.sort(key=lambda entry: entry[0])
            _functions.defined.clear()
        told(path, list(linemap or ()))
        return load(cls, key, path, linemap, *arguments, **options)

    code_cache.load_by_key_path = classmethod(load_by_key_path)


def keep_function_line_maps() -> None:
    """Keeps the text and line map of each function inductor splices into a module (Note [The
    line maps of graph partitions]). Call once INDUCTOR_WRAPPER_CODEGEN is imported."""
    import importlib
    import textwrap
    codegen = importlib.import_module(INDUCTOR_WRAPPER_CODEGEN).PythonWrapperCodegen
    define = codegen.define_subgraph_launcher_fn

    def define_subgraph_launcher_fn(self: Any, name: str, code: Any, *arguments: Any) -> Any:
        with contextlib.suppress(Exception):
            _functions.defined.append((textwrap.dedent(code.value).rstrip(),
                                       [(line, getattr(node, "stack_trace", None))
                                        for line, node in code.line_map]))
        return define(self, name, code, *arguments)

    codegen.define_subgraph_launcher_fn = define_subgraph_launcher_fn


def _inductor_module_loading() -> None:
    """What wrap_inductor_module_loading relies on: a classmethod taking (key, path, linemap), and
    the codegen's define_subgraph_launcher_fn(name, subgraph_code)."""
    import importlib
    import inspect
    load = importlib.import_module(INDUCTOR_CODE_CACHE).PyCodeCache.__dict__["load_by_key_path"]
    parameters = list(inspect.signature(load.__func__).parameters)
    assert parameters[1:4] == ["key", "path", "linemap"], parameters
    codegen = importlib.import_module(INDUCTOR_WRAPPER_CODEGEN).PythonWrapperCodegen
    parameters = list(inspect.signature(codegen.define_subgraph_launcher_fn).parameters)
    assert parameters[:3] == ["self", "name", "subgraph_code"], parameters


def _check_dispatch_mode_suspended() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode
    with TorchDispatchMode() as mode:
        with dispatch_mode_suspended(mode) as suspended:
            if not suspended or _get_current_dispatch_mode() is not None:
                raise RuntimeError("the mode on top was not taken off")
        if _get_current_dispatch_mode() is not mode:
            raise RuntimeError("the mode was not put back")


def _check_forget_fake_tensor() -> None:
    import weakref

    import torch
    mode = fake_tensor_mode()
    with mode:
        made = torch.zeros(2) + 1
    forget_fake_tensor(mode, made)
    if weakref.getweakrefs(made):
        raise LookupError("the fake tensor is still weakly referenced after its memo entry went")


def _enter_and_leave(context: Callable[[], Any]) -> Callable[[], None]:
    def check() -> None:
        with context():
            pass
    return check


def _all_found(found: list[Any], expected: int) -> None:
    if len(found) != expected:
        raise LookupError(f"{len(found)} of {expected} found: {found}")


def check_all() -> list[str]:
    """Resolves every name above on the installed torch; returns the ones that fail, with why
    (tests/python/test_torch_internals.py)."""
    import torch
    import torch.distributed as dist
    checks: dict[str, Callable[[], Any]] = {
        "fake_tensor_mode": lambda: fake_tensor_mode(allow_non_fake_inputs=True),
        "fake_tensor_type": fake_tensor_type,
        "data_dependent_errors": data_dependent_errors,
        "forget_fake_tensor": _check_forget_fake_tensor,
        "swap_tensors_replaced": _enter_and_leave(
            lambda: swap_tensors_replaced(lambda first, second, original: original(first,
                                                                                   second))),
        "torch_dispatch_mode": torch_dispatch_mode,
        "disable_current_modes": disable_current_modes,
        "is_wrapper_subclass": lambda: is_wrapper_subclass(torch.zeros(1)),
        "tree_leaves": lambda: tree_leaves(([1], {"a": 2})),
        "disable_torch_function_subclass": disable_torch_function_subclass,
        "tensor_base_clone": tensor_base_clone,
        "storage_key": lambda: storage_key(torch.zeros(1).untyped_storage()),
        "storage_object_preserved": _check_storage_object_preserved,  # storage_of_weak_ref
        "rnn_flat_weights": lambda: _all_found(rnn_flat_weights(torch.nn.LSTM(2, 2)) or [], 4),
        "op_schema": lambda: op_schema(torch.ops.aten.mm.default).arguments,
        "op_packet": lambda: op_packet(torch.ops.aten.mm.default),
        "aten_op": lambda: [aten_op(name) for name in PRIVATE_ATEN_OPS],
        "saved_tensors_hooks_enabled": saved_tensors_hooks_enabled,
        "top_saved_tensors_hooks": top_saved_tensors_hooks,
        "execution_engine": lambda: execution_engine().queue_callback,
        "inside_backward": lambda: torch._C._current_graph_task_id,
        "current_autograd_node": current_autograd_node,
        "dispatch_mode_suspended": _check_dispatch_mode_suspended,
        "foreach_kernel_devices": foreach_kernel_devices,
        "foreach_supported_types": foreach_supported_types,
        "wrap_inductor_module_loading": _inductor_module_loading,  # and keep_function_line_maps
    }
    if dist.is_available():
        checks["register_fake_backend"] = register_fake_backend
        checks["fake_store"] = fake_store
        checks["ddp_shape_check_skipped"] = _enter_and_leave(ddp_shape_check_skipped)
        checks["ddp_pre_forward"] = lambda: torch.nn.parallel.DistributedDataParallel._pre_forward
        checks["ddp_bucket_allocators"] = lambda: _all_found(ddp_bucket_allocators(), 2)
    failed = []
    for name, check in checks.items():
        try:
            check()
        except Exception as error:  # noqa: BLE001 - each failure is reported by name
            failed.append(f"{name}: {type(error).__name__}: {error}")
    return failed
