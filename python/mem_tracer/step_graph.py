"""A training step (or one forward) recorded on fake tensors, as a graph file for
memtrace-estimate (docs/estimate-format.md, "Graph files").

Note [Recording the step on fake tensors]
The graph is what AOTAutograd's tracer (make_fx) sees, recorded the way memtrace-estimate
needs it: one node per ATen op, below autograd, in the order the step runs them. The model is
copied onto fake tensors (FakeCopyMode: shapes, dtypes, devices and storage identity, no data,
no memory), a first step runs to create the optimizer's state, and the second, the steady
state, is recorded by a TorchDispatchMode: forward, loss, backward (the ops the autograd engine
runs, in its order, with the recomputation of torch.utils.checkpoint), the optimizer's step and
zero_grad(set_to_none=True). Each node says which storages it allocates and which were released
since the last one: fake tensors are freed when Python and autograd drop them, as real ones
are, so eager lifetimes (Python's names, autograd's saved tensors) come out as they are rather
than as a last-use rule guesses them. Why not torch.export's joint graph or
aot_export_module(trace_joint=True): they stop at the gradients (no optimizer, no GradScaler,
no zero_grad), and functionalize and decompose the graph, so in-place ops (ReLU(inplace), the
optimizer's updates, gradient accumulation) become copies and fused kernels become their
decompositions: allocations the device never makes.

Each storage gets a category, decided at the end of the step as the measured side decides it
(training.py): the model's parameters and buffers, the optimizer's state, the forward's inputs,
the `.grad` of a parameter, what autograd saved for backward in the forward
(saved_tensors_hooks), and everything else: temporaries (the loss's targets among them, which
are no argument of the forward).
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import _torch_internals, training

FORMAT = "memtrace-graph"
VERSION = 1
# The categories a storage of the step gets: the trace format's (training.CATEGORIES) but
# "unknown", which a trace gives an allocation nobody named; here every storage is decided at
# the step's end (temporary when nothing else). Also the order of an estimate's breakdown.
CATEGORIES = training.CATEGORIES[1:]
_MAX_FRAMES = 48
_HERE = os.path.dirname(os.path.abspath(__file__))


class StepGraphError(Exception):
    """The step could not be recorded (the model or the optimizer failed on fake tensors)."""


def _storage_key(tensor: Any) -> int:
    return _torch_internals.storage_key(tensor.untyped_storage())


def _tensors(value: Any) -> list[Any]:
    """The tensors in `value` that hold memory: a tensor subclass that wraps others (DTensor,
    whose memory is its local shard's) counts as the tensors it wraps (__tensor_flatten__)."""
    import torch
    return [plain for leaf in _torch_internals.tree_leaves(value) if isinstance(leaf, torch.Tensor)
            for plain in _plain(leaf)]


def _plain(tensor: Any) -> list[Any]:
    import torch
    if not _torch_internals.is_wrapper_subclass(tensor):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    inner = [getattr(tensor, name) for name in names]  # DTensor's device mesh is no tensor
    return [plain for value in inner if isinstance(value, torch.Tensor) for plain in _plain(value)]


class _Recorder:
    """The recording TorchDispatchMode and what it learns (Note [Recording the step on fake
    tensors])."""

    def __init__(self, module_names: dict[int, str]) -> None:
        from torch.multiprocessing.reductions import StorageWeakRef
        self._weak = StorageWeakRef
        self.module_names = module_names
        self.storages: list[dict[str, Any]] = []
        self.ids: dict[int, int] = {}  # storage key -> storage index
        self.live: dict[int, Any] = {}  # storage key -> weak ref, for what the step allocates
        self.nodes: list[dict[str, Any]] = []
        self.frames: list[list[Any]] = []
        self._frame_ids: dict[tuple[str, int, str], int] = {}
        self.phase = "none"
        self.modules: list[str] = []  # the forward's module stack
        self.backward_module: str | None = None
        self.saved: set[int] = set()  # storages (indices) autograd saved in the forward
        self.recording = False
        # Note [Data-dependent values]: on real tensors, what each data-dependent op gave, in
        # order (collect); on fake ones, those given back in the same order (replay).
        self.collect: list[tuple[str, Any]] | None = None
        self.replay: list[tuple[str, Any]] | None = None
        self.replayed = 0
        self.assumptions: list[dict[str, Any]] = []
        # Note [The device's kernels on fake tensors] (device_kernels.py): the device's kernel
        # choices, and the storages the device keeps in host memory (never counted).
        self.device_kernels: Any = None
        self.kernels: list[dict[str, Any]] = []
        self.host: dict[int, Any] = {}  # storage key -> weak ref
        # What the first step allocated (storage key -> weak ref, bytes, shape, dtype): what
        # is still alive when the recorded step starts is what the loop carried over.
        self.earlier: dict[int, tuple[Any, int, list[int], str]] = {}

    # -- storages ------------------------------------------------------------------------

    def persistent(self, tensors: Sequence[Any], origin: str, category: str,
                   names: Sequence[str] | None = None) -> None:
        """Storages that exist before the step and after it (parameters, optimizer state,
        inputs): allocated before the first node, never released."""
        for index, wrapped in enumerate(tensors):
            tensor = _tensors(wrapped)[0]
            key = _storage_key(tensor)
            if key in self.ids or self.in_host_memory(tensor):
                continue
            self.ids[key] = len(self.storages)
            self.storages.append({"bytes": int(tensor.untyped_storage().nbytes()),
                                  "origin": origin, "category": category,
                                  "name": names[index] if names else origin,
                                  "shape": list(tensor.shape), "dtype": str(tensor.dtype)[6:]})

    def _frame_id(self, frame: Any) -> int:
        code = frame.f_code
        key = (code.co_filename, frame.f_lineno, code.co_name)
        found = self._frame_ids.get(key)
        if found is None:
            found = self._frame_ids[key] = len(self.frames)
            self.frames.append([key[0], key[1], key[2]])
        return found

    def _stack(self) -> list[int]:
        """The Python stack of the op, innermost first, without the dispatch machinery and
        this module."""
        frames: list[int] = []
        frame: Any = sys._getframe(2)
        while frame is not None and len(frames) < _MAX_FRAMES:
            filename = frame.f_code.co_filename
            if not (filename.startswith(_HERE) or any(part in filename for part in _torch_internals.MACHINERY_FILES)):
                frames.append(self._frame_id(frame))
            frame = frame.f_back
        return frames

    def _module(self) -> str:
        if self.phase == "backward":
            return self.backward_module or ""
        return self.modules[-1] if self.modules else ""

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = _op_name(func)
        data_dependent = _is_data_dependent(name, args)
        if data_dependent and self.replay is not None:
            output = self._replayed(name, args)
        else:
            output = func(*args, **kwargs)
        if data_dependent and self.collect is not None:
            self.collect.append((name, _summary(output)))
        if self.device_kernels is not None and self.device_kernels.making_host_tensor:
            for tensor in _tensors(output):
                self.host[_storage_key(tensor)] = self._weak(  # type: ignore[no-untyped-call]
                    tensor.untyped_storage())
            return output
        if not self.recording:
            if self.collect is None:  # the unrecorded first step: what may outlive it
                for tensor in _tensors(output):
                    if tensor.device.type != "meta":
                        storage = tensor.untyped_storage()
                        weak = self._weak(storage)  # type: ignore[no-untyped-call]
                        self.earlier[_storage_key(tensor)] = (
                            weak, int(storage.nbytes()), list(tensor.shape), str(tensor.dtype)[6:])
            return output
        releases = self._sweep()
        allocates = []
        for tensor in _tensors(output):
            key = _storage_key(tensor)
            # A fused kernel's philox seed and offset are meta tensors: no memory anywhere.
            if key in self.ids or tensor.device.type == "meta" or self.in_host_memory(tensor):
                continue
            storage = tensor.untyped_storage()
            self.ids[key] = len(self.storages)
            self.storages.append({"bytes": int(storage.nbytes()), "origin": "activation",
                                  "category": "temporary", "name": ""})
            self.live[key] = self._weak(storage)  # type: ignore[no-untyped-call]
            allocates.append([self.ids[key], list(tensor.shape), str(tensor.dtype)[6:]])
        if name.partition("::")[0] in _COMMUNICATION:
            for tensor in _written(func, args, kwargs, output):
                index = self.ids.get(_storage_key(tensor))
                if index is not None:
                    self.storages[index].setdefault("collective", name)
        flops = _flops(func, args, kwargs, output)
        if allocates or releases or flops:
            node: dict[str, Any] = {"op": _op_name(func), "phase": self.phase,
                                    "module": self._module(), "stack": self._stack(),
                                    "releases": releases, "allocates": allocates}
            if flops:
                node["flops"] = flops
            self.nodes.append(node)
        return output

    def resized(self, storage: Any, size: int) -> None:
        """`storage` was resized in place to `size` bytes (Note [Storages resized in place]):
        while the step is recorded, what it held is released and what it holds now allocated,
        by a node of its own; before, the size it will carry into the step is kept."""
        key = _torch_internals.storage_key(storage)
        if not self.recording:
            entry = self.earlier.get(key)
            if entry is not None:
                self.earlier[key] = (entry[0], size, entry[2], entry[3])
            elif size and self.collect is None:
                self.earlier[key] = (self._weak(storage), size, [size], "uint8")  # type: ignore[no-untyped-call]
            return
        releases = self._sweep()
        index = self.ids.pop(key, None)
        if index is not None:
            if self.live.pop(key, None) is None:
                raise StepGraphError(f"{self.storages[index]['name']} was resized in place: a "
                                     "storage that lives through the step cannot change size")
            releases.append(index)
        allocates = []
        if size:
            self.ids[key] = len(self.storages)
            self.storages.append({"bytes": size, "origin": "activation", "category": "temporary",
                                  "name": ""})
            self.live[key] = self._weak(storage)  # type: ignore[no-untyped-call]
            allocates.append([self.ids[key], [size], "uint8"])
        self.nodes.append({"op": "memtrace::resize_storage", "phase": self.phase,
                           "module": self._module(), "stack": self._stack(),
                           "releases": sorted(releases), "allocates": allocates})

    def carried(self) -> None:
        """The recorded step starts: what the first step left alive beyond the persistent
        storages (the loop's names: Note [What the loop holds]; a GradScaler's scale; what
        the model keeps on itself) is allocated by a first node, and dies when Python drops it."""
        allocates = []
        for key, (ref, size, shape, dtype) in self.earlier.items():
            host = self.host.get(key)
            if ref.expired() or not size or key in self.ids or (host is not None
                                                                and not host.expired()):
                continue
            self.ids[key] = len(self.storages)
            self.storages.append({"bytes": size, "origin": "activation", "category": "temporary",
                                  "name": "held from the step before"})
            self.live[key] = ref
            allocates.append([self.ids[key], shape, dtype])
        self.earlier.clear()
        if allocates:
            self.nodes.append({"op": "memtrace::step_before", "phase": "none", "module": "",
                               "stack": [], "releases": [], "allocates": allocates})

    def in_host_memory(self, tensor: Any) -> bool:
        ref = self.host.get(_storage_key(tensor))
        return ref is not None and not ref.expired()

    def choice(self, made: Any) -> None:
        """A kernel the device runs for a call (device_kernels.DeviceKernels.on_choice)."""
        if self.recording:
            self.kernels.append({"op": made.op, "kernel": made.kernel, "why": made.why,
                                 "stack": self._stack()})

    def index_of(self, tensor: Any) -> int | None:
        """The storage's index, while it lives (a freed storage's key can be reused)."""
        return self.ids.get(_storage_key(_tensors(tensor)[0]))

    def _replayed(self, name: str, args: tuple[Any, ...]) -> Any:
        import torch
        assert self.replay is not None
        if self.replayed >= len(self.replay) or self.replay[self.replayed][0] != name:
            expected = self.replay[self.replayed][0] if self.replayed < len(self.replay) else "none"
            raise StepGraphError(f"{name} is data-dependent, and the step on the example input "
                                 f"ran {expected} here: the model takes another path on fake "
                                 "tensors")
        summary = self.replay[self.replayed][1]
        self.replayed += 1
        device = next((a.device for a in _tensors(args)), torch.device("cpu"))
        output = _from_summary(summary, device)
        if self.recording:
            what = (f"{summary}" if not isinstance(summary, list) else
                    ", ".join("x".join(map(str, shape)) for shape, _ in summary))
            self.assumptions.append({
                "kind": "data_dependent_size", "op": name, "stack": self._stack(),
                "detail": f"{name}: {what}, as on the example input (the step ran once on it)"})
        return output

    def _sweep(self) -> list[int]:
        dead = [key for key, ref in self.live.items() if ref.expired()]
        released = []
        for key in dead:
            del self.live[key]
            released.append(self.ids.pop(key))
        return sorted(released)

    def finish(self, gradients: set[int]) -> None:
        """The step is over: what died after the last op is released by a last node, and every
        storage the step allocated gets its category (a gradient before a saved activation)."""
        releases = self._sweep()
        if releases:
            self.nodes.append({"op": "memtrace::step_end", "phase": "none", "module": "",
                               "stack": [], "releases": releases, "allocates": []})
        for index, storage in enumerate(self.storages):
            if storage["origin"] != "activation":
                continue
            if index in gradients:
                storage["category"] = "gradient"
            elif index in self.saved:
                storage["category"] = "activation"


def _flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> int:
    """What torch.utils.flop_counter counts for the op (matrix products, convolutions,
    attention; two per multiply-add), 0 for the others."""
    from torch.utils.flop_counter import flop_registry
    count = flop_registry.get(_torch_internals.op_packet(func))
    if count is None:
        return 0
    try:
        return int(count(*args, **kwargs, out_val=output))
    except Exception:  # noqa: BLE001 - a formula that does not take these arguments: uncounted
        return 0


# Note [Data-dependent values]
# An op whose output size or value depends on tensor data (nonzero, a boolean mask, .item(),
# unique) cannot run on fake tensors. When the step meets one, record() runs the step once on
# a real copy of the model with the example inputs, keeps what each such op gave, in order, and
# records the fake step again giving those back: sizes as on the example input, said in the
# graph file's assumptions (as memtrace-estimate's --example-counts does for TorchScript).
_DATA_DEPENDENT = {"aten::nonzero", "aten::_local_scalar_dense", "aten::masked_select",
                   "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
                   "aten::repeat_interleave.Tensor", "aten::bincount", "aten::nonzero_numpy"}


def _is_data_dependent(name: str, args: tuple[Any, ...]) -> bool:
    if name in _DATA_DEPENDENT:
        return True
    if name == "aten::index.Tensor" and len(args) > 1:
        import torch
        return any(isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)
                   for index in (args[1] or []))
    return False


def _summary(output: Any) -> Any:
    """What a data-dependent op gave: a number, or the shapes and dtypes of its tensors."""
    import torch
    if isinstance(output, (torch.Tensor, tuple, list)):
        return [(list(t.shape), str(t.dtype)[6:]) for t in _tensors(output)]
    return output


def _from_summary(summary: Any, device: Any) -> Any:
    import torch
    if not isinstance(summary, list):
        return summary
    tensors = [torch.empty(shape, dtype=getattr(torch, dtype), device=device)
               for shape, dtype in summary]
    return tensors[0] if len(tensors) == 1 else tuple(tensors)


def _op_name(func: Any) -> str:
    # "aten.addmm.default" -> "aten::addmm"; other overloads keep their name: "aten::add.Tensor"
    namespace, _, rest = str(func).partition(".")
    name, _, overload = rest.rpartition(".")
    if not name:
        name, overload = overload, ""
    return f"{namespace}::{name}" + ("" if overload in ("", "default") else f".{overload}")


def _dispatch_mode(recorder: _Recorder) -> Any:
    class Mode(_torch_internals.torch_dispatch_mode()):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            return recorder.dispatch(func, args, kwargs or {})

    return Mode()


# Note [Storages resized in place]
# FSDP frees an unsharded parameter's memory between its uses by resizing its storage to 0
# bytes and allocates it again by resizing it back (`UntypedStorage.resize_`), keeping the
# tensor that autograd saved: no op goes through the dispatcher and no storage dies, so the
# recorder follows `resize_` itself, as PyTorch's own MemTracker does.
@contextlib.contextmanager
def _storage_resizes(recorder: _Recorder) -> Iterator[None]:
    import torch
    original = torch.UntypedStorage.resize_

    def resize_(storage: Any, size: int) -> Any:
        result = original(storage, size)
        recorder.resized(storage, int(storage.nbytes()))
        return result

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]


# Ops that move data between ranks (torch.distributed's, through its process group) and FSDP's
# copies into and out of their buffers: a storage one of them writes while the step is
# recorded is a communication buffer, and says which op first wrote it ("collective").
_COMMUNICATION = ("c10d", "_c10d_functional", "fsdp")


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> list[Any]:
    """The tensors an op writes: its outputs and the arguments its schema marks mutable."""
    values = [output]
    for index, argument in enumerate(_torch_internals.op_schema(func).arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            values.append(args[index] if index < len(args) else kwargs.get(argument.name))
    return _tensors(values)


@contextlib.contextmanager
def _module_hooks(recorder: _Recorder) -> Iterator[None]:
    """The module the forward is in (global forward hooks), and the one whose backward runs:
    a pre-hook on each leaf module's output grad_fn (Note [Backward modules] in training.py)."""
    from torch.nn.modules import module as torch_module

    def pre(module: Any, args: Any) -> None:
        name = recorder.module_names.get(id(module))
        if name is not None:
            recorder.modules.append(name)

    def post(module: Any, args: Any, output: Any) -> None:
        name = recorder.module_names.get(id(module))
        if name is None:
            return
        if recorder.modules and recorder.modules[-1] == name:
            recorder.modules.pop()
        if module._modules:
            return
        seen = {id(t.grad_fn) for t in _tensors(args) if t.grad_fn is not None}
        for tensor in _tensors(output):
            node = tensor.grad_fn
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            node.register_prehook(lambda grads, name=name: _enter(name))

    def _enter(name: str) -> None:
        recorder.backward_module = name

    handles = [torch_module.register_module_forward_pre_hook(pre),
               torch_module.register_module_forward_hook(post)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _default_loss(output: Any) -> Any:
    import torch
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(output, Mapping) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    tensors = [t for t in _tensors(output) if t.is_floating_point()]
    if not tensors:
        raise StepGraphError("the model's output holds no floating-point tensor to take a loss "
                             "of: pass loss_fn=")
    return tensors[0].float().sum()


def _call(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    return model(*args, **kwargs)


# Note [What the loop holds]
# How long the training loop's own names keep the model's output and the loss alive changes the
# peak by the output (a language model's logits: 8.6 % to 15.9 % of a small GPT-2's step on the
# CPU). The recorded loop is one of these, said with the figure:
LOOPS = {
    # `out = model(x); loss = f(out, y); loss.backward(); opt.step(); opt.zero_grad()` in the
    # loop's body, as PyTorch's mnist example, nanoGPT's train.py and scripts on Accelerate
    # (`outputs = model(**batch); loss = outputs.loss`) write it: both names keep their tensors
    # into the next step, until its forward and its loss rebind them.
    "until-next-forward": "the output and the loss stay named until the next step's forward "
                          "and loss rebind them (`out = model(x); loss = f(out, y)` in the "
                          "loop's body)",
    # `loss = f(model(x), y)`, or a function that returns the loss alone: transformers'
    # Trainer (compute_loss returns, dropping the outputs, before backward) and Lightning's
    # training_step: the output dies once the loss is made; the loss lives until rebound.
    "until-loss": "the output is dropped once the loss is made (`loss = f(model(x), y)`, or a "
                  "function that returns the loss, as transformers' Trainer); the loss stays "
                  "named until the next step's loss",
    # A train_step function that returns after zero_grad, or `del out, loss` at the end.
    "until-step-end": "the output and the loss stay named until the step ends, after zero_grad "
                      "(a train_step function, or `del out, loss`)",
}
DEFAULT_LOOP = "until-next-forward"


def record(model: Any, example_inputs: Sequence[Any] = (), *,
           example_kwargs: Mapping[str, Any] | None = None, training: bool = True,
           loss_fn: Callable[..., Any] | None = None, targets: Sequence[Any] = (),
           optimizer: Any = None, autocast: Any = None, scaler: bool = False,
           accumulate: int = 1, profile: str | os.PathLike[str] | None = None,
           batch: int | None = None, prepare: Callable[[Any], Any] | None = None,
           loop: str = DEFAULT_LOOP, wrap: Callable[[Any], Any] | None = None,
           warmup: int = 1) -> dict[str, Any]:
    """Records one steady-state training step (``training=True``: forward, loss, backward,
    ``optimizer.step()``, ``zero_grad(set_to_none=True)``; ``accumulate`` micro-batches of
    forward and backward before the step) or one no-grad forward, on fake tensors, and returns
    the graph document. ``autocast`` is a dtype (``torch.bfloat16``) to run forward and loss
    under ``torch.autocast``; ``scaler`` adds a ``GradScaler``. ``profile`` is the device
    profile whose kernels and optimizer implementation are recorded (a memtrace-estimate
    profile name or .json path; None: the CPU's own). ``batch`` makes every input and target
    that many rows (dim 0), repeating the example's rows, on fake tensors: no memory.
    ``prepare(model_copy)`` may change the fake copy before the step (activation
    checkpointing, for plan()). ``wrap(model_copy)`` returns what the loop trains, made inside
    the recording (a DistributedDataParallel or fully_shard of the copy: mem_tracer.parallel),
    and ``warmup`` steps run before the recorded one (the first makes the optimizer's state).
    ``loop`` names what the training loop holds (LOOPS). The model
    and the optimizer are not touched, wherever they are: both are copied onto fake tensors.
    A step with data-dependent ops runs once on a real copy first (Note [Data-dependent
    values])."""
    from .device_kernels import CPU_RULES, KernelRulesError, kernel_rules

    _torch_internals.require("recording a step on fake tensors (estimate(training=True), plan())")
    if accumulate < 1:
        raise StepGraphError(f"accumulate must be at least 1, not {accumulate}")
    if loop not in LOOPS:
        raise StepGraphError(f"loop must be one of {', '.join(LOOPS)}, not {loop!r}")
    try:
        rules = kernel_rules(profile) if profile is not None else CPU_RULES
    except KernelRulesError as error:
        raise StepGraphError(str(error)) from error
    step = _Step(model, list(example_inputs), dict(example_kwargs or {}), list(targets),
                 training=training, loss_fn=loss_fn, optimizer=optimizer, autocast=autocast,
                 scaler=scaler, accumulate=accumulate, rules=rules,
                 profile=os.fspath(profile) if profile is not None else None, batch=batch,
                 prepare=prepare, loop=loop, wrap=wrap, warmup=warmup)
    with _quiet_fake_tensors():
        try:
            return step.record(replay=None)
        except StepGraphError as error:
            if not isinstance(error.__cause__, _torch_internals.data_dependent_errors()):
                raise
        return step.record(replay=step.example_values())


@contextlib.contextmanager
def _quiet_fake_tensors() -> Iterator[None]:
    """FakeTensorMode logs the error of an op that fails on fake tensors, with its stack, on
    top of raising it: the error is said once, in StepGraphError's one line."""
    import logging
    logger = logging.getLogger(_torch_internals.FAKE_TENSOR_LOGGER)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _fake_copy_mode(fake_mode: Any) -> Any:
    """A TorchFunctionMode under which copy.deepcopy makes fake CPU tensors (Note [The
    device's kernels on fake tensors] says why the CPU): each tensor, real or fake, on any
    device, becomes one of its shape, strides, dtype and requires_grad, over a fake storage of
    its storage's size shared with the tensors that share it. Only metadata is read, so a model
    on a GPU is copied without touching its memory (torch's FakeCopyMode keeps each tensor's
    device, and Module.to() on its copies fails: `_apply(): Couldn't swap`)."""
    import torch
    from torch.overrides import TorchFunctionMode

    storages: dict[int, Any] = {}
    clone = _torch_internals.tensor_base_clone()

    def fake(tensor: Any) -> Any:
        key = _storage_key(tensor)
        with fake_mode:
            base = storages.get(key)
            if base is None:
                base = storages[key] = torch.empty(tensor.untyped_storage().nbytes(),
                                                   dtype=torch.uint8)
            copied = torch.empty(0, dtype=tensor.dtype)
            copied.set_(base.untyped_storage(), tensor.storage_offset(), tensor.size(),
                        tensor.stride())
        return copied.requires_grad_(tensor.requires_grad)

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            if func is clone:  # nn.Parameter's __deepcopy__ clones
                with fake_mode:
                    return fake(args[0]).detach().clone(**kwargs)
            if func is torch.Tensor.__deepcopy__:
                tensor, memo = args
                if id(tensor) not in memo:
                    memo[id(tensor)] = fake(tensor)
                return memo[id(tensor)]
            with _torch_internals.disable_torch_function_subclass():
                return func(*args, **kwargs)

    return Mode()


class _Step:
    """One training step (or forward) of a copy of the model: on fake tensors, recorded; or
    on real ones, for the values of its data-dependent ops."""

    def __init__(self, model: Any, args: list[Any], kwargs: dict[str, Any], targets: list[Any],
                 *, training: bool, loss_fn: Callable[..., Any] | None, optimizer: Any,
                 autocast: Any, scaler: bool, accumulate: int, rules: Any, profile: str | None,
                 batch: int | None, prepare: Callable[[Any], Any] | None, loop: str,
                 wrap: Callable[[Any], Any] | None = None, warmup: int = 1) -> None:
        from . import device_optimizer

        self.model, self.args, self.kwargs, self.targets = model, args, kwargs, targets
        self.training, self.optimizer, self.autocast = training, optimizer, autocast
        self.loss_of = loss_fn or _default_loss
        self.scaler, self.accumulate, self.batch, self.prepare = scaler, accumulate, batch, prepare
        self.rules, self.loop, self.profile = rules, loop, profile
        self.wrap, self.warmup = wrap, warmup
        first = next(iter(list(model.parameters()) + list(model.buffers())), None)
        self.model_device = first.device.type if first is not None else "cpu"
        # Note [The device's optimizer on fake tensors] (device_optimizer.py).
        self.optimizer_settings: list[dict[str, Any]] = []
        self.optimizer_implementation: str | None = None
        if optimizer is not None and training:
            self.optimizer_settings, self.optimizer_implementation = \
                device_optimizer.implementation(optimizer, rules.device)

    def _copies(self, mode: Any) -> tuple[Any, list[Any], dict[str, Any], list[Any]]:
        """The model, inputs and targets copied (onto fake CPU tensors when `mode` is a fake
        mode; else real copies where they are), with `batch` rows, prepared."""
        copying = _fake_copy_mode(mode) if mode is not None else contextlib.nullcontext()
        within = mode if mode is not None else contextlib.nullcontext()
        with copying:
            model = copy.deepcopy(self.model)
            args = copy.deepcopy(self.args)
            kwargs = copy.deepcopy(self.kwargs)
            targets = copy.deepcopy(self.targets)
        if self.batch is not None:
            with within:
                args = [_rows(value, self.batch) for value in args]
                kwargs = {key: _rows(value, self.batch) for key, value in kwargs.items()}
                targets = [_rows(value, self.batch) for value in targets]
        model.train(self.training and self.model.training)
        if self.prepare is not None:
            self.prepare(model)
        return model, args, kwargs, targets

    def example_values(self) -> list[tuple[str, Any]]:
        """What the step's data-dependent ops give on the example input: the step run once on
        a real copy, where the model is (Note [Data-dependent values])."""
        import torch
        real = [*self.args, *self.kwargs.values(), *self.targets]
        if not any(isinstance(value, torch.Tensor) for value in real):
            raise StepGraphError("the step has data-dependent ops (nonzero, a boolean mask, "
                                 ".item()): give example tensors, not shapes")
        recorder = _Recorder({})
        recorder.collect = []
        try:
            with torch.random.fork_rng(devices=[]), _dispatch_mode(recorder):
                torch.manual_seed(0)
                self._run(recorder, *self._copies(None), steps=1, device=self.model_device)
        except Exception as error:
            raise StepGraphError(f"running the step on the example input (for its "
                                 f"data-dependent ops) failed: {_one_line(error)}") from error
        return recorder.collect

    def record(self, replay: list[tuple[str, Any]] | None) -> dict[str, Any]:
        import torch

        from .device_kernels import DeviceKernels

        fake_mode = _torch_internals.fake_tensor_mode(allow_non_fake_inputs=True)
        model, args, kwargs, targets = self._copies(fake_mode)
        recorder = _Recorder({id(module): name for name, module in model.named_modules()})
        recorder.replay = replay
        kernels = recorder.device_kernels = DeviceKernels(self.rules, recorder.choice)
        try:
            with torch.random.fork_rng(devices=[]), fake_mode, _module_hooks(recorder), \
                    _dispatch_mode(recorder), kernels, _storage_resizes(recorder):
                torch.manual_seed(0)
                if self.wrap is not None:
                    model = self.wrap(model)
                self._run(recorder, model, args, kwargs, targets, steps=1 + self.warmup,
                          device="cpu")
        except StepGraphError:
            raise
        except Exception as error:
            raise StepGraphError(f"recording the step on fake tensors failed: "
                                 f"{_one_line(error)}") from error
        return {
            "format": FORMAT, "version": VERSION,
            "kind": "training" if self.training else "inference",
            "model": type(self.model).__name__, "device": self.rules.device,
            "profile": self.profile,
            "optimizer": (type(self.optimizer).__name__
                          if self.optimizer is not None and self.training else None),
            "optimizer_implementation": self.optimizer_implementation,
            "loop": self.loop if self.training else None,
            "loop_detail": LOOPS[self.loop] if self.training else None,
            "accumulate": self.accumulate if self.training else 1,
            "autocast": str(self.autocast)[6:] if self.autocast is not None else None,
            "frames": recorder.frames, "storages": recorder.storages, "nodes": recorder.nodes,
            "kernels": recorder.kernels, "assumptions": recorder.assumptions,
        }

    def _run(self, recorder: _Recorder, model: Any, args: list[Any], kwargs: dict[str, Any],
             targets: list[Any], steps: int, device: str) -> None:
        """`steps` steps on tensors of `device`; the last one recorded when the recorder
        records (fake tensors): the first makes the optimizer's state, so the last is the
        steady state."""
        import torch
        optimizer = (_fake_optimizer(self.optimizer, self.model, model, self.optimizer_settings)
                     if self.training else None)
        scaler = torch.amp.GradScaler(device) if self.scaler and self.training else None
        gradients: set[int] = set()  # the .grad storages (indices) when the optimizer steps
        kernels = recorder.device_kernels
        names: dict[str, Any] = {}  # what the loop's own names hold (Note [What the loop holds])

        def pack(tensor: Any) -> Any:
            if recorder.recording and recorder.phase == "forward":
                index = recorder.index_of(tensor)
                if index is not None:
                    recorder.saved.add(index)
            return tensor

        def autocast() -> Any:
            return (torch.autocast(device, dtype=self.autocast) if self.autocast is not None
                    else contextlib.nullcontext())

        def forward_and_loss() -> Any:
            """The forward and the loss, binding the loop's names as LOOPS[self.loop] says;
            returns the loss."""
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), \
                    autocast():
                output = _call(model, args, kwargs)
                if self.loop != "until-loss":
                    names["output"] = output  # the previous step's output dies here
                loss = self.loss_of(output, *targets)
                del output
                names["loss"] = loss
            return loss

        def optimizer_step() -> None:
            if kernels is not None:
                kernels.optimizer_phase = True  # its host tensors are the device's host's
            try:
                if optimizer is None:
                    for parameter in model.parameters():
                        parameter.grad = None
                    return
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                recorder.phase = "none"  # as the tracer's phases: zero_grad is outside the step
                optimizer.zero_grad(set_to_none=True)
            finally:
                if kernels is not None:
                    kernels.optimizer_phase = False

        def step() -> None:
            recorder.replayed = 0
            if not self.training:
                with torch.no_grad():
                    recorder.phase = "forward"
                    output = _call(model, args, kwargs)
                    del output
                recorder.phase = "none"
                return
            for _ in range(self.accumulate):
                recorder.phase = "forward"
                loss = forward_and_loss()
                recorder.phase = "backward"
                recorder.backward_module = None
                (scaler.scale(loss) if scaler is not None else loss).backward()
                del loss
            recorder.phase = "optimizer"
            for parameter in model.parameters():
                index = recorder.index_of(parameter.grad) if parameter.grad is not None else None
                if index is not None:
                    gradients.add(index)
            optimizer_step()
            recorder.phase = "none"
            if self.loop == "until-step-end":
                names.clear()

        for _ in range(steps - 1):
            step()  # the first step makes the optimizer's state: not the steady state
        if recorder.collect is None:
            parameters = list(model.named_parameters())
            buffers = list(model.named_buffers())
            recorder.persistent([p for _, p in parameters], "parameter", "parameter",
                                [name for name, _ in parameters])
            recorder.persistent([b for _, b in buffers], "buffer", "parameter",
                                [name for name, _ in buffers])
            if optimizer is not None:
                state = [(f"{index}.{key}", value)
                         for index, per_parameter in enumerate(optimizer.state.values())
                         for key, value in per_parameter.items()
                         if isinstance(value, torch.Tensor)]
                recorder.persistent([v for _, v in state], "optimizer_state", "optimizer_state",
                                    [f"optimizer state {name}" for name, _ in state])
            inputs = _tensors((args, kwargs))
            recorder.persistent(inputs, "input", "input",
                                [f"input {index}" for index in range(len(inputs))])
            # The loss's targets are no argument of the forward: temporaries, as the tracer
            # counts them (it sees the root module's arguments only).
            labels = _tensors(targets)
            recorder.persistent(labels, "input", "temporary",
                                [f"target {index}" for index in range(len(labels))])
            recorder.recording = True
            recorder.carried()
        gradients.clear()
        step()
        recorder.recording = False
        if recorder.collect is None:
            recorder.finish(gradients)


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _rows(value: Any, batch: int) -> Any:
    """`value` with `batch` rows, the example's repeated (a tensor with a batch dimension)."""
    import torch
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] == batch:
        return value
    index = torch.arange(batch, device=value.device) % value.shape[0]
    return value[index].contiguous()


def _fake_optimizer(optimizer: Any, model: Any, fake_model: Any,
                    implementation: Sequence[Mapping[str, Any]]) -> Any:
    """The same optimizer (class, hyperparameters, parameter groups) over the fake model, each
    group with the implementation the device runs (device_optimizer.implementation)."""
    if optimizer is None:
        return None
    fake_of = {id(real): fake for real, fake in zip(model.parameters(), fake_model.parameters())}
    groups = []
    for index, group in enumerate(optimizer.param_groups):
        settings = {key: value for key, value in group.items() if key != "params"}
        settings.update(implementation[index] if index < len(implementation) else {})
        parameters = [fake_of[id(p)] for p in group["params"] if id(p) in fake_of]
        if parameters:
            groups.append({**settings, "params": parameters})
    if not groups:
        raise StepGraphError("the optimizer updates none of the model's parameters")
    # Each group carries every hyperparameter; the constructor's own keywords come from the
    # optimizer's defaults (AdamW's defaults name one its constructor does not take).
    accepted = inspect.signature(type(optimizer).__init__).parameters
    settings = {key: value for key, value in optimizer.defaults.items() if key in accepted}
    try:
        return type(optimizer)(groups, **settings)
    except TypeError as error:
        raise StepGraphError(f"cannot make another {type(optimizer).__name__} over the model's "
                             f"parameters: {error}") from error


def write(document: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.write_text(json.dumps(document, separators=(",", ":")))
    return path


__all__ = ["CATEGORIES", "FORMAT", "VERSION", "StepGraphError", "record", "write"]
