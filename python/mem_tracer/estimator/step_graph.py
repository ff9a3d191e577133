"""A training step (or one forward) recorded on fake tensors, as a graph file for
memtrace-estimate (docs/estimate-format.md, "Graph files").

Note [Recording the step on fake tensors]
The graph is what AOTAutograd's tracer (make_fx) sees, recorded the way memtrace-estimate
needs it: one node per ATen op, below autograd, in the order the step runs them. The model is
copied onto fake tensors (FakeCopyMode: shapes, dtypes, devices and storage identity, no data,
no memory), a first step runs to create the optimizer's state, and the second, the steady
state (a plain forward: the first, Note [A forward recorded cold]), is recorded by a
TorchDispatchMode: forward, loss, backward (the ops the autograd engine
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

Note [A forward recorded cold]
An estimate of a forward is of a process's first forward (the referee's rows: a fresh process
each, the workspaces taken in it; docs/accuracy.md), so no forward runs before the recorded
one: what the model keeps from a call (a cache) is allocated where the first forward makes it,
not held from the recording's start. And the memoized functions of the model's own code
(functools.lru_cache in the modules that define its classes: transformers' Sam3 keeps the sine
position encodings of its vision encoder's FPN in one, 696,320 B at batch 2, made after the
backbone's attention peak) are emptied before each run of a copy and after the last: an entry an
earlier run made (the example's real run for data-dependent values, an earlier estimate in the
process, an earlier batch of a sweep) would spare the recorded run its allocation, and a fake
tensor kept in one after the recording would be handed to the user's next real forward. With the
forward held from a step before, sam3_vision_model (eager, batch 2) came out 696,320 B (+1.03 %)
over the simulated H100's max_memory_allocated(); a second estimate in the same process gave the
card's figure (the cache still full). A training step keeps its first step (the optimizer's
state: the steady state), and what its caches hold from it, as a real loop's later steps do.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import _torch_internals, training
from .fake_copies import fake_copy_mode, quiet_fake_tensors, with_rows
from .known_values import KnownValues, libraries_see_values
from .step_loop import DEFAULT_LOOP, LOOPS, StepLoop, StepSpec, default_loss
from .step_recorder import (
    ExampleValue,
    Recorder,
    StepGraphError,
    dispatch_mode,
    module_hooks,
    storage_resizes,
)

FORMAT = "memtrace-graph"
VERSION = 1
# The categories a storage of the step gets: the trace format's (training.CATEGORIES) but
# "unknown", which a trace gives an allocation nobody named; here every storage is decided at
# the step's end (temporary when nothing else). Also the order of an estimate's breakdown.
CATEGORIES = training.CATEGORIES[1:]


def record(model: Any, example_inputs: Sequence[Any] = (), *,
           example_kwargs: Mapping[str, Any] | None = None, training: bool = True,
           loss_fn: Callable[..., Any] | None = None, targets: Sequence[Any] = (),
           optimizer: Any = None, autocast: Any = None, scaler: bool = False,
           accumulate: int = 1, profile: str | os.PathLike[str] | None = None,
           batch: int | None = None, prepare: Callable[[Any], Any] | None = None,
           loop: str = DEFAULT_LOOP, wrap: Callable[[Any], Any] | None = None,
           warmup: int | None = None, read_example_masks: bool = True) -> dict[str, Any]:
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
    the recording (a DistributedDataParallel or fully_shard of the copy:
    mem_tracer.estimator.parallel),
    and ``warmup`` steps run before the recorded one (the first makes the optimizer's state;
    None: one before a training step, none before a forward, Note [A forward recorded cold]).
    ``loop`` names what the training loop holds (LOOPS). ``read_example_masks=False`` hides the
    example inputs' values from transformers' mask-skip decisions (Note [The example's mask,
    said with what keeping it costs] in known_values.py: the other branch). The model
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
                 prepare=prepare, loop=loop, wrap=wrap, warmup=warmup,
                 read_example_masks=read_example_masks)
    with quiet_fake_tensors():
        try:
            return step.record(replay=None)
        except StepGraphError as error:
            if not isinstance(error.__cause__, _torch_internals.data_dependent_errors()):
                raise
        return step.record(replay=step.example_values())


class _Step:
    """One training step (or forward) of a copy of the model: on fake tensors, recorded; or
    on real ones, for the values of its data-dependent ops."""

    def __init__(self, model: Any, args: list[Any], kwargs: dict[str, Any], targets: list[Any],
                 *, training: bool, loss_fn: Callable[..., Any] | None, optimizer: Any,
                 autocast: Any, scaler: bool, accumulate: int, rules: Any, profile: str | None,
                 batch: int | None, prepare: Callable[[Any], Any] | None, loop: str,
                 wrap: Callable[[Any], Any] | None = None,
                 warmup: int | None = None, read_example_masks: bool = True) -> None:
        from . import device_optimizer

        self.model, self.args, self.kwargs, self.targets = model, args, kwargs, targets
        self.training, self.optimizer, self.autocast = training, optimizer, autocast
        self.accumulate, self.batch, self.prepare = accumulate, batch, prepare
        self.rules, self.loop, self.profile = rules, loop, profile
        # Note [The example's mask, said with what keeping it costs]: False, the other branch.
        self.read_example_masks = read_example_masks
        # Note [A forward recorded cold]: a forward is a process's first.
        self.wrap, self.warmup = wrap, (1 if training else 0) if warmup is None else warmup
        first = next(iter(list(model.parameters()) + list(model.buffers())), None)
        self.model_device = first.device.type if first is not None else "cpu"
        # Note [The device's optimizer on fake tensors] (device_optimizer.py).
        optimizer_settings: list[dict[str, Any]] = []
        self.optimizer_implementation: str | None = None
        if optimizer is not None and training:
            optimizer_settings, self.optimizer_implementation = \
                device_optimizer.implementation(optimizer, rules.device)
        self.spec = StepSpec(model, training, loss_fn or default_loss, optimizer, autocast,
                             scaler, accumulate, loop, optimizer_settings)

    @property
    def what(self) -> str:
        """What is recorded, as the messages name it: a training step, or a plain forward
        (estimate() of an inference: a forward under no_grad, no optimizer)."""
        return "step" if self.training else "forward"

    def _copies(self, mode: Any) -> tuple[Any, list[Any], dict[str, Any], list[Any]]:
        """The model, inputs and targets copied (onto fake CPU tensors when `mode` is a fake
        mode; else real copies where they are), with `batch` rows, prepared."""
        copying = fake_copy_mode(mode) if mode is not None else contextlib.nullcontext()
        within = mode if mode is not None else contextlib.nullcontext()
        with copying:
            model = copy.deepcopy(self.model)
            args = copy.deepcopy(self.args)
            kwargs = copy.deepcopy(self.kwargs)
            targets = copy.deepcopy(self.targets)
        if self.batch is not None:
            with within:
                args = [with_rows(value, self.batch) for value in args]
                kwargs = {key: with_rows(value, self.batch) for key, value in kwargs.items()}
                targets = [with_rows(value, self.batch) for value in targets]
        model.train(self.training and self.model.training)
        if self.prepare is not None:
            self.prepare(model)
        return model, args, kwargs, targets

    def example_values(self) -> list[ExampleValue]:
        """What the step's data-dependent ops give on the example input: the step run once on
        a real copy, where the model is (Note [Data-dependent values])."""
        import torch
        real = [*self.args, *self.kwargs.values(), *self.targets]
        if not any(isinstance(value, torch.Tensor) for value in real):
            raise StepGraphError("the step has data-dependent ops (nonzero, a boolean mask, "
                                 ".item()): give example tensors, not shapes")
        recorder = Recorder({})
        recorder.collect = []
        try:
            with torch.random.fork_rng(devices=[]), dispatch_mode(recorder), \
                    _lists_read_as_fake_tensors_read(), model_caches_emptied(self.model):
                torch.manual_seed(0)
                StepLoop(self.spec, recorder, *self._copies(None),
                         device=self.model_device).run(steps=1)
        except Exception as error:
            raise StepGraphError(f"running the {self.what} on the example input (for its "
                                 f"data-dependent ops) failed: {_one_line(error)}") from error
        return recorder.collect

    def record(self, replay: list[ExampleValue] | None) -> dict[str, Any]:
        import torch

        from .device_kernels import DeviceKernels, flatten_rnn_weights

        fake_mode = _torch_internals.fake_tensor_mode(allow_non_fake_inputs=True)
        model, args, kwargs, targets = self._copies(fake_mode)
        with fake_mode:  # Note [cuDNN's flat RNN weights]
            flatten_rnn_weights(model, self.rules)
        recorder = Recorder({id(module): name for name, module in model.named_modules()})
        recorder.replay = replay
        recorder.known = KnownValues()  # Note [Values Python knows on fake tensors]
        # The inputs as given (Note [The example's attention mask, where transformers decides
        # to skip it]), unless the other branch is asked for.
        if self.batch is None and self.read_example_masks:
            for fake, real in zip([*args, *kwargs.values()],
                                  [*self.args, *self.kwargs.values()]):
                recorder.known.example_input(fake, real)
        kernels = recorder.device_kernels = DeviceKernels(self.rules, recorder.choice,
                                                             recorder.rnn)
        try:
            with torch.random.fork_rng(devices=[]), fake_mode, module_hooks(recorder), \
                    dispatch_mode(recorder), kernels, storage_resizes(recorder), \
                    libraries_see_values(recorder.known, recorder.mask_dropped), \
                    _fake_numbers_as_real_ones(), \
                    _modules_converted_on_fake_tensors(fake_mode), \
                    model_caches_emptied(self.model):
                torch.manual_seed(0)
                if self.wrap is not None:
                    model = self.wrap(model)
                StepLoop(self.spec, recorder, model, args, kwargs, targets,
                         device="cpu").run(steps=1 + self.warmup)
        except StepGraphError:
            raise
        except Exception as error:
            raise StepGraphError(f"recording the {self.what} on fake tensors failed: "
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
            "frames": [list(frame) for frame in recorder.frames],
            "storages": [row.to_json() for row in recorder.storages],
            "nodes": [row.to_json() for row in recorder.nodes],
            "kernels": [row.to_json() for row in recorder.kernels],
            "assumptions": [row.to_json() for row in recorder.assumptions],
            # Note [The example's mask, said with what keeping it costs] (known_values.py):
            # beside the assumptions memtrace-estimate reads, for estimate() to cost and say.
            "example_value_assumptions": [row.to_json() for row in recorder.example_values],
        }


def model_caches(model: Any) -> list[Any]:
    """The functools.lru_cache functions of the model's own code: in the namespaces of the
    modules that define its modules' classes (not torch's), as module functions, as a class's
    (static) methods, or inside the closure of a function there (transformers'
    compile_compatible_method_lru_cache wraps one); only the caches whose function those
    modules define (Note [A forward recorded cold])."""
    import sys
    import types
    classes = {klass for module in model.modules() for klass in type(module).__mro__}
    names = {klass.__module__ for klass in classes
             if klass.__module__.partition(".")[0] not in ("torch", "builtins")}
    namespaces: list[Mapping[str, Any]] = [vars(sys.modules[name]) for name in names
                                           if name in sys.modules]
    namespaces += [vars(klass) for klass in classes if klass.__module__ in names]
    found: dict[int, Any] = {}

    def visit(value: Any, depth: int) -> None:
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(getattr(value, "cache_clear", None)) and \
                callable(getattr(value, "cache_info", None)):
            if getattr(value, "__module__", None) in names:
                found[id(value)] = value
            return
        if depth and isinstance(value, types.FunctionType):
            for cell in value.__closure__ or ():
                try:
                    contents = cell.cell_contents
                except ValueError:  # a cell not yet filled
                    continue
                visit(contents, depth - 1)

    for namespace in namespaces:
        for value in list(namespace.values()):
            visit(value, 1)
    return list(found.values())


@contextlib.contextmanager
def model_caches_emptied(model: Any) -> Any:
    """The model's own memoized functions (model_caches) emptied on entering and on leaving:
    each run of a copy starts from none, and none outlives it (Note [A forward recorded
    cold])."""
    caches = model_caches(model)
    for cache in caches:
        cache.cache_clear()
    try:
        yield
    finally:
        for cache in caches:
            cache.cache_clear()


# Note [A list read element by element]
# `tensor.tolist()` on a real CPU tensor reads its memory directly, below the dispatcher: the
# example's run (Note [Data-dependent values] in step_recorder.py) saw no read. FakeTensor's
# tolist reads each element with `.item()` (aten::_local_scalar_dense), so the fake step asked
# for values the example never gave and stopped ("ran it there 0 times"): transformers'
# get_vision_position_ids, `for t, h, w in grid_thw.tolist()` over a Qwen-VL image grid
# (qwen2_vl, qwen2_5_vl and the models built on their vision encoder). While the example runs,
# a real tensor's tolist() reads element by element as FakeTensor's does, at the same place:
# the same values, now seen and given back. The extra select ops it runs are on the real copy
# only, which no graph records.
def _lists_read_as_fake_tensors_read() -> Any:
    """A TorchFunctionMode under which `Tensor.tolist()` of a real tensor reads each element
    with `.item()`, as FakeTensor.tolist does (Note [A list read element by element])."""
    import torch
    from torch.overrides import TorchFunctionMode

    def listed(tensor: Any) -> Any:
        if tensor.dim() == 0:
            return tensor.item()
        return [listed(element) for element in tensor]

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            if func is torch.Tensor.tolist and not kwargs and len(args) == 1 \
                    and type(args[0]) in (torch.Tensor, torch.nn.Parameter):
                with _torch_internals.disable_torch_function_subclass():
                    return listed(args[0])
            with _torch_internals.disable_torch_function_subclass():
                return func(*args, **(kwargs or {}))

    return Mode()


# Note [A tensor made of fake numbers]
# `torch.tensor(data)` copies Python's data below the dispatcher: where that data holds tensors
# (0-d ones: `torch.tensor([llm_positions.max() + 1 - n, ...])`, Qwen2-VL's get_rope_index), a
# real run reads each (a device's with a copy to the host) and a fake one stops ("its data is not
# allocated yet"). The result is a tensor of the data's shape, made on the device asked for: on
# fake tensors, the same as `torch.stack` of the elements, converted to the dtype and device
# asked for (its dtype otherwise: the elements' own, as torch.tensor infers it), which needs no
# value (one allocation, as the device makes). Only data that holds a fake tensor takes this way.
def _fake_numbers_as_real_ones() -> Any:
    """A TorchFunctionMode under which `torch.tensor(data)` of data holding fake tensors is
    their stack (Note [A tensor made of fake numbers]) and a 0-d fake tensor is formatted by
    its value (Note [A fake number formatted]): one mode for both, so that the recording pays
    one Python call a torch function for them, not one each."""
    import torch
    from torch.overrides import TorchFunctionMode

    fake: Any = _torch_internals.fake_tensor_type()

    def holds_fake(data: Any) -> bool:
        return isinstance(data, fake) or isinstance(data, (list, tuple)) and any(
            holds_fake(item) for item in data)

    def stacked(data: Any) -> Any:
        if isinstance(data, torch.Tensor):
            return data
        if isinstance(data, (list, tuple)):
            return torch.stack([stacked(item) for item in data])
        return torch.tensor(data)

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            with _torch_internals.disable_torch_function_subclass():
                if func is torch.tensor and len(args) == 1 and isinstance(
                        args[0], (list, tuple)) and args[0] and holds_fake(args[0]):
                    made = stacked(args[0]).detach()
                    made = made.to(dtype=kwargs.get("dtype") or made.dtype,
                                   device=kwargs.get("device") or made.device)
                    return made.requires_grad_(bool(kwargs.get("requires_grad")))
                if func is torch.Tensor.__format__ and len(args) == 2 and isinstance(
                        args[0], fake) and args[0].dim() == 0:
                    return format(args[0].detach().item(), args[1])
                return func(*args, **kwargs)

    return Mode()


# Note [A fake number formatted]
# `f"expert_{index}"` of a 0-d tensor (Switch Transformers' experts, a ModuleDict looked up by
# the routing's `expert_hit` rows) formats its value: Tensor.__format__ reads it with `.item()`
# for a tensor whose type is exactly Tensor, and formats anything else as object does, by its
# repr. A fake tensor is another type: the recording looked up "expert_FakeTensor(..., size=(),
# dtype=torch.int64)" (KeyError). While a step is recorded, a 0-d fake tensor is formatted as a
# real one is: its `.item()`, which the recorder gives back from the example's run (the same read
# at the same place: Note [Data-dependent values] in step_recorder.py), formatted (in
# _fake_numbers_as_real_ones, beside Note [A tensor made of fake numbers]).

# Note [Module.to() on fake tensors]
# `module.to(dtype)` inside a forward (Switch Transformers' router: `self.classifier =
# self.classifier.to(self.dtype)` at every call) runs nn.Module._apply, which for a fake
# parameter always swaps it with the converted one (torch.utils.swap_tensors over
# nn.Parameter(converted), i.e. converted.detach()). FakeTensorMode keeps a weak reference to
# every fake tensor an op makes (its converter's tensor_memo), and swap_tensors refuses any
# tensor with one: "_apply(): Couldn't swap Linear.weight", with torch 2.14's plain
# FakeTensorMode as under the recorder. On a device, _apply sets `param.data` instead: nothing
# is allocated for a conversion to the dtype the parameter has, and one tensor of the new dtype
# for another, which then replaces the old one. So while a step is recorded, swap_tensors first
# drops the two fake tensors from that memo: the memo maps a meta tensor made inside one op, or
# a real tensor converted, to its fake tensor, and an op's fresh meta tensor is never looked
# up again; the swap then does what the device's `.data =` does, and the recorder sees the
# conversion's allocation, if any, as the op that made it.
@contextlib.contextmanager
def _modules_converted_on_fake_tensors(fake_mode: Any) -> Any:
    """A context in which nn.Module._apply can swap fake parameters (Note [Module.to() on fake
    tensors])."""
    fake = _torch_internals.fake_tensor_type()

    def swap(first: Any, second: Any, original: Callable[[Any, Any], None]) -> None:
        for tensor in (first, second):
            if isinstance(tensor, fake):
                _torch_internals.forget_fake_tensor(fake_mode, tensor)
        original(first, second)

    with _torch_internals.swap_tensors_replaced(swap):
        yield


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def write(document: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    path.write_text(json.dumps(document, separators=(",", ":")))
    return path


__all__ = ["CATEGORIES", "DEFAULT_LOOP", "FORMAT", "LOOPS", "VERSION", "StepGraphError",
           "record", "write"]
