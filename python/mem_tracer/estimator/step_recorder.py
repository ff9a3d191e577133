"""The recorder of a step on fake tensors (Note [Recording the step on fake tensors] in
step_graph.py): what a TorchDispatchMode sees of each op, as typed rows of the graph file
(storages, nodes, frames, kernel choices, assumptions), the phase the loop is in (Phase), and
the hooks that tell it the module and the storages resized in place."""
from __future__ import annotations

import contextlib
import math
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _torch_internals
from . import fake_kernels
from .device_kernels import native_convolution_columns
from .known_values import KnownValues

if TYPE_CHECKING:
    from collections.abc import Callable

    from .device_kernels import CudnnRnnSpaces, DeviceKernels, KernelChoice

_MAX_FRAMES = 48
# Note [Releases as storages die]: set (by a test), every sweep also polls every live storage as
# the sweep once did, and SWEEP_CHECKS counts the sweeps and lists where the two disagreed.
CHECK_SWEEP = False
SWEEP_CHECKS: dict[str, Any] = {"sweeps": 0, "mismatches": []}
# The package's own frames (mem_tracer/, this subpackage's parent) are not the model's.
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class StepGraphError(Exception):
    """The step could not be recorded (the model or the optimizer failed on fake tensors)."""


class Phase(str, Enum):
    """Where the step is, as the tracer's training phases (training.py) name it."""

    NONE = "none"  # between the phases, and zero_grad
    FORWARD = "forward"  # the forward and the loss
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"  # optimizer.step() (and the GradScaler's step and update)


class Frame(NamedTuple):
    """A Python frame of an op's stack: the graph file's `frames` rows."""

    file: str
    line: int
    function: str


class Allocation(NamedTuple):
    """A storage a node allocates: its index, and the shape and dtype it was made with."""

    storage: int
    shape: list[int]
    dtype: str


@dataclass
class KernelScratch:
    """What a kernel allocates inside itself beside its outputs (Note [What a CUDA kernel
    allocates inside itself]): before them and after them (on the op's node), then nodes of its
    own (what they release, then what they allocate), and what is released last, in that order
    (by default all that `before` and `after` hold)."""

    before: list[Allocation] = field(default_factory=list)
    after: list[Allocation] = field(default_factory=list)
    then: list[tuple[list[int], list[Allocation]]] = field(default_factory=list)
    last: list[int] | None = None

    def last_released(self) -> list[int]:
        if self.last is not None:
            return self.last
        return [scratch.storage for scratch in (*self.before, *self.after)]


@dataclass
class StorageRow:
    """One storage of the step (docs/estimate-format.md, "Graph files")."""

    bytes: int
    origin: str  # parameter, buffer, optimizer_state, input, activation
    category: str  # CATEGORIES; an activation's is decided when the step ends (finish())
    name: str
    shape: list[int] | None = None  # those that live through the step
    dtype: str | None = None
    collective: str | None = None  # the communication op that first wrote it
    # The module that owns it, whoever allocated it (a parameter's, its gradient's and its
    # optimizer state's: Note [Everything a parameter has is its module's] in training.py,
    # which the estimate's module x category cells follow); None: the node that made it says.
    module: str | None = None

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"bytes": self.bytes, "origin": self.origin,
                               "category": self.category, "name": self.name}
        if self.shape is not None:
            row.update(shape=self.shape, dtype=self.dtype)
        if self.collective is not None:
            row["collective"] = self.collective
        if self.module is not None:
            row["module"] = self.module
        return row


@dataclass
class NodeRow:
    """One op that allocates, releases or computes: a node of the graph file."""

    op: str
    phase: Phase
    module: str | None  # named_modules()'s path ("" the root); None: outside every module
    stack: list[int]  # frame ids, innermost first
    releases: list[int]
    allocates: list[Allocation]
    flops: int = 0

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"op": self.op, "phase": self.phase.value, "module": self.module,
                               "stack": self.stack, "releases": self.releases,
                               "allocates": [list(a) for a in self.allocates]}
        if self.flops:
            row["flops"] = self.flops
        return row


@dataclass
class KernelRow:
    """A kernel the device runs for a call (Note [The device's kernels on fake tensors])."""

    op: str
    kernel: str
    why: str
    stack: list[int]

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "kernel": self.kernel, "why": self.why, "stack": self.stack}


@dataclass
class AssumptionRow:
    """What the graph rests on that shapes alone do not say (Note [Data-dependent values])."""

    kind: str
    op: str
    stack: list[int]
    detail: str
    # kind "approximate" (Note [cuDNN's RNN reserve, bracketed] in device_kernels.py): how far
    # the device's peak may lie below and above the recorded figure for this call.
    over_by_at_most: int = 0
    under_by_at_most: int = 0

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"kind": self.kind, "op": self.op, "stack": self.stack,
                               "detail": self.detail}
        if self.kind == "approximate":
            row["over_by_at_most_bytes"] = self.over_by_at_most
            row["under_by_at_most_bytes"] = self.under_by_at_most
        return row


# Note [The example's mask, said with what keeping it costs] (known_values.py): the kind of the
# rows of a graph file's `example_values`, and of the estimate's assumptions made from them.
EXAMPLE_VALUE = "example_value"


class ExampleValue(NamedTuple):
    """What a data-dependent op gave on the example input (Note [Data-dependent values])."""

    op: str
    site: tuple[Frame, ...]  # the model's frames it ran in, innermost first
    value: Any  # a number, or the shapes and dtypes of its tensors (_summary)


class Carried(NamedTuple):
    """A storage the first step made: if it still lives when the recorded step starts, the
    loop carried it over."""

    ref: Any  # a weak reference to the storage
    bytes: int
    shape: list[int]
    dtype: str


def storage_key(tensor: Any) -> int:
    return _torch_internals.storage_key(tensor.untyped_storage())


def tensors_in(value: Any) -> list[Any]:
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


# Note [Releases as storages die]
# A node releases what the step allocated and died since the op before (Recorder._sweep).
# Polling the weak reference of every storage the step holds after every op made the recording
# O(ops x live storages): transformers' slanet AdamW step (a 501-step decoder that re-stacks
# its id list each step) timed out at 300 s in the referee, 86-89 % of its recording's samples
# in the sweep (py-spy, two windows). Instead each storage says when it dies. Its Python object
# (UntypedStorage) dies with it, not before: the object holds the storage, and while anything
# else holds the storage, the storage holds the object (Note [PyObject preservation for Tensor
# and Storages] in torch 2.14's c10/util/intrusive_ptr.h; _torch_internals'
# storage_object_preserved check holds on 2.13 and 2.14). So a Python weakref to that object,
# taken as the storage is registered (_watch), calls back as the storage dies, and the sweep
# looks only at the keys called back: its cost is what died, and what it releases, where, is
# what polling released.
# Two guards keep it exact. The storage's own weak reference (`live`) is still held until the
# sweep, so its address (the key) is not reused before the sweep sees it die. And a call back
# is believed only once that reference says expired: the cyclic collector clears an object's
# weakrefs before finalizers run, so an object a finalizer resurrects was called back alive;
# its key is looked at again every sweep until it dies. A watch dropped (a storage resized in
# place, registered again) never calls back. CHECK_SWEEP polls as before beside it
# (test_step_recorder_sweep.py compares the two over models' steps).
class _Watch(weakref.ref):  # type: ignore[type-arg]
    """A weakref to a storage's Python object that knows the storage's key."""

    __slots__ = ("key",)
    key: int


class Recorder:
    """The recording TorchDispatchMode's state and what it learns (Note [Recording the step on
    fake tensors]): one object, its fields typed, changed only by its own methods and by the
    loop through in_phase()."""

    def __init__(self, module_names: dict[int, str]) -> None:
        from torch.multiprocessing.reductions import StorageWeakRef
        self._weak = StorageWeakRef
        self.module_names = module_names
        self.storages: list[StorageRow] = []
        self.ids: dict[int, int] = {}  # storage key -> storage index
        self.live: dict[int, Any] = {}  # storage key -> weak ref, for what the step allocates
        # Note [Releases as storages die]: a watch on each storage of `live`, and the keys of
        # those whose Python object died since the last sweep (or that it found not yet dead).
        self._watches: dict[int, _Watch] = {}
        self._died: list[int] = []
        watches, died = self._watches, self._died

        def storage_died(watch: _Watch) -> None:  # holds no reference to the recorder
            if watches.get(watch.key) is watch:
                del watches[watch.key]
                died.append(watch.key)

        self._storage_died = storage_died
        self.nodes: list[NodeRow] = []
        self.frames: list[Frame] = []
        self._frame_ids: dict[Frame, int] = {}
        self.phase = Phase.NONE
        self.modules: list[str] = []  # the forward's module stack
        self.backward_module: str | None = None
        self.saved: set[int] = set()  # storages (indices) autograd saved in the forward
        self.recording = False
        # Note [Data-dependent values]: on real tensors, what each data-dependent op gave, with
        # where it ran (collect); on fake ones, those given back where they ran, in the order
        # they ran there (replay; replayed counts each place's, from each step's start).
        self.collect: list[ExampleValue] | None = None
        self.replay: list[ExampleValue] | None = None
        self.replayed: dict[tuple[str, tuple[Frame, ...]], int] = {}
        # Note [Values Python knows on fake tensors] (known_values.py): on fake tensors only.
        self.known: KnownValues | None = None
        # Note [Backward formulas that write in place on the device]: (the fresh storage, the
        # node of the out-of-place op that consumed it), until the next sweep.
        self.written_in_place: tuple[int, int] | None = None
        # Note [The engine's gradient sums in place]: the autograd Node whose formula (and post
        # hooks) ran last, while the engine adds its outputs into the next nodes' buffers.
        self.evaluated_node: Any = None
        self.assumptions: list[AssumptionRow] = []
        # Note [The example's mask, said with what keeping it costs]: where a read of the
        # example's values dropped an attention mask, once a place.
        self.example_values: list[AssumptionRow] = []
        # Note [The device's kernels on fake tensors] (device_kernels.py): the device's kernel
        # choices, and the storages the device keeps in host memory (never counted).
        self.device_kernels: DeviceKernels | None = None
        self.kernels: list[KernelRow] = []
        self.host: dict[int, Any] = {}  # storage key -> weak ref
        # What the first step allocated: what is still alive when the recorded step starts is
        # what the loop carried over.
        self.earlier: dict[int, Carried] = {}
        # cuDNN's dropout state is in some RNN call's bracket (Recorder.rnn): once a recording.
        self.dropout_state_bracketed = False

    @contextlib.contextmanager
    def in_phase(self, phase: Phase) -> Iterator[None]:
        """The ops run inside are `phase`'s; after it, none's (as the tracer's phases), and in
        no module: a forward that never returned (checkpointing's recomputation in backward
        stops a block's forward once it has what backward needs, its forward hook never runs)
        leaves no module behind it for the optimizer's step or the next step's loss."""
        self.phase = phase
        try:
            yield
        finally:
            self.phase = Phase.NONE
            self.modules.clear()

    # -- storages ------------------------------------------------------------------------

    def persistent(self, tensors: Sequence[Any], origin: str, category: str,
                   names: Sequence[str] | None = None,
                   modules: Sequence[str | None] | None = None) -> None:
        """Storages that exist before the step and after it (parameters, optimizer state,
        inputs): allocated before the first node, never released; `modules`, the module
        owning each (None: no module)."""
        for index, wrapped in enumerate(tensors):
            tensor = tensors_in(wrapped)[0]
            key = storage_key(tensor)
            if key in self.ids or self.in_host_memory(tensor):
                continue
            self.ids[key] = len(self.storages)
            self.storages.append(StorageRow(int(tensor.untyped_storage().nbytes()), origin,
                                            category, names[index] if names else origin,
                                            list(tensor.shape), str(tensor.dtype)[6:],
                                            module=modules[index] if modules else None))

    def _frame_id(self, frame: Any) -> int:
        code = frame.f_code
        key = Frame(code.co_filename, frame.f_lineno, code.co_name)
        found = self._frame_ids.get(key)
        if found is None:
            found = self._frame_ids[key] = len(self.frames)
            self.frames.append(key)
        return found

    def _stack(self) -> list[int]:
        """The Python stack of the op, innermost first, without the dispatch machinery and
        this package."""
        return [self._frame_id(frame) for frame in _model_frames()]

    def _module(self) -> str | None:
        """The module the op runs in: named_modules()'s path ("" the root), or None outside
        every module (the loss, backward before it reaches a module, the optimizer)."""
        if self.phase is Phase.BACKWARD:
            return self.backward_module
        return self.modules[-1] if self.modules else None

    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = _op_name(func)
        data_dependent = _is_data_dependent(name, args)
        read = self.known.read(func, name, args, kwargs) if self.known is not None else None
        if read is not None:  # a value Python knows (Note [Values Python knows on fake tensors])
            data_dependent = False
        site = _site() if data_dependent else ()
        if read is not None:
            output = read[0]
        elif data_dependent and self.replay is not None:
            output = self._replayed(name, site, args)
        else:
            # Note [Fake kernels stricter than the device's] (fake_kernels.py).
            substitute = fake_kernels.stand_in(name, args, kwargs)
            output = substitute() if substitute is not None else func(*args, **kwargs)
        if self.known is not None and read is None:
            self.known.after(func, args, kwargs, output)
        if data_dependent and self.collect is not None:
            self.collect.append(ExampleValue(name, site, _summary(output)))
        if self.device_kernels is not None and self.device_kernels.making_host_tensor:
            for tensor in tensors_in(output):
                self.host[storage_key(tensor)] = self._weak(  # type: ignore[no-untyped-call]
                    tensor.untyped_storage())
            return output
        if not self.recording:
            if self.collect is None:  # the unrecorded first step: what may outlive it
                for tensor in tensors_in(output):
                    if tensor.device.type != "meta":
                        storage = tensor.untyped_storage()
                        weak = self._weak(storage)  # type: ignore[no-untyped-call]
                        self.earlier[storage_key(tensor)] = Carried(
                            weak, int(storage.nbytes()), list(tensor.shape), str(tensor.dtype)[6:])
            return output
        releases = self._sweep()
        allocates = []
        for tensor in tensors_in(output):
            key = storage_key(tensor)
            # A fused kernel's philox seed and offset are meta tensors: no memory anywhere.
            if key in self.ids or tensor.device.type == "meta" or self.in_host_memory(tensor):
                continue
            storage = tensor.untyped_storage()
            self.ids[key] = len(self.storages)
            self.storages.append(StorageRow(int(storage.nbytes()), "activation", "temporary", ""))
            self.live[key] = self._weak(storage)  # type: ignore[no-untyped-call]
            self._watch(key, storage)
            allocates.append(Allocation(self.ids[key], list(tensor.shape), str(tensor.dtype)[6:]))
        if name.partition("::")[0] in _COMMUNICATION:
            for tensor in _written(func, args, kwargs, output):
                index = self.ids.get(storage_key(tensor))
                if index is not None and self.storages[index].collective is None:
                    self.storages[index].collective = name
        flops = _flops(func, args, kwargs, output)
        fresh = self._fresh_operand(name, args, allocates)
        if fresh is None:
            fresh = self._summed_in_place(name, args, allocates)
        scratch = self._kernel_scratch(func, name, args, kwargs)
        allocates = [*scratch.before, *allocates, *scratch.after]
        if allocates or releases or flops:
            self.nodes.append(NodeRow(_op_name(func), self.phase, self._module(), self._stack(),
                                      releases, allocates, flops))
            if fresh is not None:
                self.written_in_place = (fresh, len(self.nodes) - 1)
        for released, taken in (*scratch.then, (scratch.last_released(), [])):
            if released or taken:
                self.nodes.append(NodeRow("memtrace::kernel_scratch", self.phase,
                                          self._module(), self._stack(), released, taken))
        return output

    def _kernel_scratch(self, func: Any, name: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> KernelScratch:
        """Note [What a CUDA kernel allocates inside itself]: the temporaries the device's kernel
        of this op makes before its outputs and after them, all freed before it returns (the
        profile's `kernels.temporaries`)."""
        import torch
        kernels = self.device_kernels
        if kernels is None:
            return KernelScratch()
        if name == "aten::_scaled_dot_product_efficient_attention_backward":
            # Not a temporary of the profile's list: its shapes are not an operand's.
            return (self._efficient_backward_scratch(args) if kernels.rules.device == "cuda"
                    else KernelScratch())
        if name in _CUBLAS_MATRIX_OPERANDS and kernels.rules.device == "cuda":
            return KernelScratch(after=self._cublas_operand_copies(name, args))
        columns = native_convolution_columns(name, args) if kernels.rules.device == "cuda" \
            else None
        if columns is not None:  # Note [CUDA's convolution without cuDNN]
            return KernelScratch(after=[self._scratch(
                args[0], args[0].dtype, "the convolution's im2col columns (cuDNN off)", columns)])
        entries = [entry for entry in kernels.rules.temporaries if entry.op == name]
        if not entries:
            return KernelScratch()
        by_name = dict(kwargs)
        for argument, value in zip(_torch_internals.op_schema(func).arguments, args):
            by_name[argument.name] = value
        before: list[Allocation] = []
        after: list[Allocation] = []
        for entry in entries:
            like = by_name.get(entry.like)
            if not isinstance(like, torch.Tensor) or (entry.only_if_not_contiguous
                                                      and like.is_contiguous()):
                continue
            dtype = like.dtype
            for index, operand in enumerate(by_name.get(n) for n in entry.dtype_of):
                if isinstance(operand, torch.Tensor):
                    dtype = operand.dtype if index == 0 else torch.promote_types(dtype,
                                                                                 operand.dtype)
            (before if entry.before_outputs else after).append(
                self._scratch(like, dtype, entry.what))
        return KernelScratch(before, after)

    def _scratch(self, like: Any, dtype: Any, name: str, shape: list[int] | None = None) -> \
            Allocation:
        """A temporary storage of `like`'s elements (or of `shape`'s) in `dtype`, allocated by
        the node at hand."""
        shape = list(like.shape) if shape is None else shape
        index = len(self.storages)
        self.storages.append(StorageRow(math.prod(shape) * dtype.itemsize, "activation",
                                        "temporary", name))
        return Allocation(index, shape, str(dtype)[6:])

    def _cublas_operand_copies(self, name: str, args: tuple[Any, ...]) -> list[Allocation]:
        """The contiguous copies CUDA's mm takes of the operands cuBLAS cannot read as they are
        (Note [A matrix cuBLAS cannot read])."""
        import torch
        copies = []
        for operand in args[_CUBLAS_MATRIX_OPERANDS[name]:][:2]:
            if isinstance(operand, torch.Tensor) and operand.dim() == 2 and \
                    not cublas_reads_as_is(operand):
                copies.append(self._scratch(operand, operand.dtype,
                                            "cuBLAS's contiguous copy of a matrix operand"))
        return copies

    def _efficient_backward_scratch(self, args: tuple[Any, ...]) -> KernelScratch:
        """What CUDA's memory-efficient attention backward allocates beside its outputs (Note
        [The efficient attention backward's buffers]): a copy of a gradient it cannot read as it
        is, the key's and value's gradients at the query's heads where it took grouped key heads
        (Note [What a CUDA kernel allocates inside itself]), the rows' float `delta` (in float32,
        through a product and its sum) and the kernel's workspace."""
        import torch
        grad, query, key, value = (args[:4] + (None,) * 4)[:4]
        if not all(isinstance(tensor, torch.Tensor) and tensor.dim() == 4
                   for tensor in (grad, query, key, value)):
            return KernelScratch()
        batch, heads, queries, head_dim = (int(size) for size in query.shape)
        keys, value_dim = int(key.size(2)), int(value.size(3))
        before: list[Allocation] = []
        if not grad.transpose(1, 2).is_contiguous():  # `grad_out_.contiguous()`, (B, L, H, D)
            before.append(self._scratch(grad, grad.dtype, "efficient attention backward's "
                                        "grad_out.contiguous()",
                                        [batch, queries, heads, int(grad.size(3))]))
        after: list[Allocation] = []
        if key.size(1) != heads:
            after += [self._scratch(tensor, tensor.dtype, f"efficient attention backward's "
                                    f"{what} gradient at the query's heads",
                                    [batch, heads, int(tensor.size(2)), int(tensor.size(3))])
                      for tensor, what in ((key, "key"), (value, "value"))]
        rows = [batch, heads, queries]
        then: list[tuple[list[int], list[Allocation]]] = []
        half = query.dtype in (torch.float16, torch.bfloat16)
        partial: list[Allocation] = []
        if not half:  # (grad_out * out).sum(-1).transpose(-2, -1).contiguous(), in float
            partial = [self._scratch(grad, torch.float32, "efficient attention backward's "
                                     "grad_out * out", [batch, queries, heads, value_dim]),
                       self._scratch(grad, torch.float32, "efficient attention backward's "
                                     "(grad_out * out).sum(-1)", [batch, queries, heads])]
        delta = self._scratch(query, torch.float32, "efficient attention backward's delta", rows)
        after += [*partial, delta]
        size = efficient_backward_workspace_bytes(
            half=half, batch=batch, heads=heads, queries=queries, keys=keys,
            head_dim=head_dim, value_dim=value_dim)
        workspace = []
        if size:
            index = len(self.storages)
            self.storages.append(StorageRow(size, "activation", "temporary",
                                            "efficient attention backward's workspace"))
            workspace = [Allocation(index, [size], "uint8")]
        if partial:
            then.append(([partial[1].storage, partial[0].storage], workspace))
        else:
            after += workspace
        # Freed as the card frees them: delta with the kernel's launch, then the workspace, the
        # gradients at the query's heads, the gradient's copy.
        last = [delta.storage, *(a.storage for a in workspace),
                *(a.storage for a in after if a is not delta and a not in workspace
                  and a not in partial),
                *(a.storage for a in before)]
        return KernelScratch(before, after, then, last)

    def _fresh_operand(self, name: str, args: tuple[Any, ...],
                       allocates: list[Allocation]) -> int | None:
        """Note [Backward formulas that write in place on the device]: the storage of `args[0]`
        where this out-of-place op is a backward formula's subclass branch over a zero tensor
        the node before made; else None."""
        import torch
        if self.phase is not Phase.BACKWARD or name.partition(".")[0] not in _IN_PLACE_ON_DEVICE \
                or not self.nodes or len(allocates) != 1 or not args or \
                not isinstance(args[0], torch.Tensor):
            return None
        before = self.nodes[-1]
        index = self.ids.get(storage_key(args[0]))
        if before.op.partition(".")[0] not in _ZEROS or before.phase is not Phase.BACKWARD or \
                [allocation.storage for allocation in before.allocates] != [index] or \
                index is None or self.storages[index].bytes != \
                self.storages[allocates[0].storage].bytes:
            return None
        return index

    def _summed_in_place(self, name: str, args: tuple[Any, ...],
                         allocates: list[Allocation]) -> int | None:
        """Note [The engine's gradient sums in place]: the storage of `args[0]` where this add is
        the autograd engine's sum of two gradients into a node's input buffer; else None."""
        import torch
        kernels = self.device_kernels
        if kernels is None or kernels.rules.device != "cuda" or self.phase is not Phase.BACKWARD \
                or name != "aten::add.Tensor" or \
                self.evaluated_node is None or len(allocates) != 1 or len(args) < 2 or \
                not all(isinstance(arg, torch.Tensor) for arg in args[:2]) or \
                _torch_internals.current_autograd_node() is not self.evaluated_node:
            return None
        old = args[0]
        index = self.ids.get(storage_key(old))
        # Non-overlapping and dense: its elements fill its storage, each once.
        dense = old.storage_offset() == 0 and \
            old.numel() * old.element_size() == self.storages[index if index is not None else 0].bytes
        if index is None or not dense or \
                self.storages[index].bytes != self.storages[allocates[0].storage].bytes:
            return None
        return index

    def resized(self, storage: Any, size: int) -> None:
        """`storage` was resized in place to `size` bytes (Note [Storages resized in place]):
        while the step is recorded, what it held is released and what it holds now allocated,
        by a node of its own; before, the size it will carry into the step is kept."""
        key = _torch_internals.storage_key(storage)
        if not self.recording:
            entry = self.earlier.get(key)
            if entry is not None:
                self.earlier[key] = entry._replace(bytes=size)
            elif size and self.collect is None:
                self.earlier[key] = Carried(self._weak(storage),  # type: ignore[no-untyped-call]
                                            size, [size], "uint8")
            return
        releases = self._sweep()
        index = self.ids.pop(key, None)
        if index is not None:
            self._watches.pop(key, None)
            if self.live.pop(key, None) is None:
                raise StepGraphError(f"{self.storages[index].name} was resized in place: a "
                                     "storage that lives through the step cannot change size")
            releases.append(index)
        allocates = []
        if size:
            self.ids[key] = len(self.storages)
            self.storages.append(StorageRow(size, "activation", "temporary", ""))
            self.live[key] = self._weak(storage)  # type: ignore[no-untyped-call]
            self._watch(key, storage)
            allocates.append(Allocation(self.ids[key], [size], "uint8"))
        self.nodes.append(NodeRow("memtrace::resize_storage", self.phase, self._module(),
                                  self._stack(), sorted(releases), allocates))

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
            self.storages.append(StorageRow(size, "activation", "temporary",
                                            "held from the step before"))
            self.live[key] = ref
            self._watch(key, _torch_internals.storage_of_weak_ref(ref.cdata))
            allocates.append(Allocation(self.ids[key], shape, dtype))
        self.earlier.clear()
        if allocates:
            self.nodes.append(NodeRow("memtrace::step_before", Phase.NONE, None, [], [],
                                      allocates))

    def in_host_memory(self, tensor: Any) -> bool:
        ref = self.host.get(storage_key(tensor))
        return ref is not None and not ref.expired()

    def choice(self, made: KernelChoice) -> None:
        """A kernel the device runs for a call (device_kernels.DeviceKernels.on_choice)."""
        if self.recording:
            self.kernels.append(KernelRow(made.op, made.kernel, made.why, self._stack()))

    def rnn(self, spaces: CudnnRnnSpaces, call: Callable[[], Any]) -> Any:
        """An RNN call cuDNN runs on the device (Note [cuDNN's RNN reserve, bracketed] in
        device_kernels.py): `call()`'s result, made as cuDNN makes it (spaces.plan) or else by
        the CPU's kernels; recording, with an "approximate" assumption that brackets what real
        cuDNN may hold against what the recording holds."""
        if not self.recording:
            return call()
        if spaces.plan is not None:
            output = call()
            # Real cuDNN's reserve and work space: between nothing and twice the simulated ones.
            spread = spaces.reserve + spaces.work
            self.assumptions.append(AssumptionRow(
                "approximate", spaces.op, self._stack(),
                f"{spaces.op}: recorded as cuDNN runs it, with the simulated cuDNN's reserve "
                f"space ({_mib(spaces.reserve)}, kept for the backward) and work space "
                f"({_mib(spaces.work)}); real cuDNN chooses both and documents neither (taken "
                f"to be at most twice those): the peak may be up to {_mib(spread)} lower or "
                f"higher (Note [cuDNN's RNN reserve, bracketed])",
                spread, spread))
            return output
        before = {key for key, ref in self.live.items() if not ref.expired()}
        first = len(self.nodes)
        output = call()
        outputs = {storage_key(tensor) for tensor in tensors_in(output)}
        # What the call allocated and still holds but its outputs: what autograd saved.
        kept = sum(self.storages[self.ids[key]].bytes for key, ref in self.live.items()
                   if key not in before and key not in outputs and not ref.expired())
        # The most the call held at once beyond what it returns (saved tensors, temporaries).
        inside, held = {}, 0
        most = 0
        for node in self.nodes[first:]:
            for allocation in node.allocates:
                inside[allocation.storage] = self.storages[allocation.storage].bytes
                held += inside[allocation.storage]
            most = max(most, held)
            for index in node.releases:
                held -= inside.pop(index, 0)
        returned = sum(self.storages[self.ids[key]].bytes for key in outputs if key in self.ids)
        over = max(kept, most - returned)
        under = spaces.reserve_at_most + spaces.work_at_most
        state = ""
        if spaces.dropout_state_at_most and not self.dropout_state_bracketed:
            # cuDNN's dropout state, made by the first such call of the process and kept: once.
            self.dropout_state_bracketed = True
            under += spaces.dropout_state_at_most
            state = (f" and its dropout state, made once and kept, of at most "
                     f"{_mib(spaces.dropout_state_at_most)}")
        self.assumptions.append(AssumptionRow(
            "approximate", spaces.op, self._stack(),
            f"{spaces.op}: recorded as the CPU runs it ({_mib(kept)} kept for the backward); "
            f"cuDNN keeps a reserve space instead (about {_mib(spaces.reserve)}, taken to be at "
            f"most {_mib(spaces.reserve_at_most)}), a work space of at most "
            f"{_mib(spaces.work_at_most)}{state}: the peak may be up to {_mib(over)} lower or "
            f"{_mib(under)} higher (Note [cuDNN's RNN reserve, bracketed])",
            over, under))
        return output

    def mask_dropped(self, decision: str) -> None:
        """transformers' `decision` (known_values.MASK_SKIPS) dropped an attention mask after
        reading the example's values (Note [The example's mask, said with what keeping it
        costs]): said once a place, in the recorded step."""
        if not self.recording:
            return
        stack = self._stack()
        if any(row.op == decision and row.stack == stack for row in self.example_values):
            return
        self.example_values.append(AssumptionRow(
            EXAMPLE_VALUE, decision, stack,
            f"{decision}: the example's attention mask gives every position, so transformers "
            "dropped it (sdpa without a mask); a batch with padding keeps it"))

    def index_of(self, tensor: Any) -> int | None:
        """The storage's index, while it lives (a freed storage's key can be reused)."""
        return self.ids.get(storage_key(tensors_in(tensor)[0]))

    def _replayed(self, name: str, site: tuple[Frame, ...], args: tuple[Any, ...]) -> Any:
        import torch
        assert self.replay is not None
        ran = [example.value for example in self.replay
               if example.op == name and example.site == site]
        count = self.replayed.get((name, site), 0)
        if count >= len(ran):
            where = f" at {site[0].file}:{site[0].line}" if site else ""
            raise StepGraphError(f"{name}{where} is data-dependent, and the step on the example "
                                 f"input ran it there {len(ran)} times, not {count + 1}: the "
                                 "model takes another path on fake tensors")
        summary = ran[count]
        self.replayed[(name, site)] = count + 1
        device = next((a.device for a in tensors_in(args)), torch.device("cpu"))
        output = _from_summary(summary, device)
        if self.recording:
            what = (f"{summary}" if not isinstance(summary, list) else
                    ", ".join("x".join(map(str, shape)) for shape, _ in summary))
            self.assumptions.append(AssumptionRow(
                "data_dependent_size", name, self._stack(),
                f"{name}: {what}, as on the example input (the step ran once on it)"))
        return output

    def _watch(self, key: int, storage: Any) -> None:
        """Note [Releases as storages die]: `key` is noted in `_died` as `storage` dies."""
        watch = _Watch(storage, self._storage_died)
        watch.key = key
        self._watches[key] = watch

    def _sweep(self) -> list[int]:
        """What the step allocated and died since the last sweep (Note [Releases as storages
        die])."""
        called_back = dict.fromkeys(self._died)  # once each: a key watched again can come twice
        self._died.clear()
        dead = []
        for key in called_back:
            ref = self.live.get(key)
            if ref is None:  # released already (a storage resized in place)
                continue
            if ref.expired():
                dead.append(key)
            else:  # called back alive (resurrected by a finalizer): looked at again next sweep
                self._died.append(key)
        if CHECK_SWEEP:
            polled = sorted(key for key, ref in self.live.items() if ref.expired())
            SWEEP_CHECKS["sweeps"] += 1
            if polled != sorted(dead):
                SWEEP_CHECKS["mismatches"].append(
                    (len(self.nodes), sorted(self.ids[key] for key in polled),
                     sorted(self.ids[key] for key in dead)))
        released = []
        for key in dead:
            del self.live[key]
            released.append(self.ids.pop(key))
        if self.written_in_place is not None:
            # Note [Backward formulas that write in place on the device]: the zero tensor died
            # as its out-of-place op returned: on the device that op wrote into it.
            fresh, node = self.written_in_place
            self.written_in_place = None
            if fresh in released:
                released.remove(fresh)
                self.nodes[node].releases = sorted([*self.nodes[node].releases, fresh])
        return sorted(released)

    def finish(self, gradients: dict[int, str]) -> None:
        """The step is over: what died after the last op is released by a last node, and every
        storage the step allocated gets its category (a gradient before a saved activation);
        a gradient, its parameter's module (`gradients`: storage index -> module path)."""
        releases = self._sweep()
        self._watches.clear()  # nothing is released after the step: no death to note
        if releases:
            self.nodes.append(NodeRow("memtrace::step_end", Phase.NONE, None, [], releases, []))
        for index, storage in enumerate(self.storages):
            if storage.origin != "activation":
                continue
            if index in gradients:
                storage.category = "gradient"
                storage.module = gradients[index]
            elif index in self.saved:
                storage.category = "activation"


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


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


# Note [What a CUDA kernel allocates inside itself]
# Most device kernels allocate their outputs only, which the fake kernels size. Some take a
# temporary from the caching allocator after their output and free it before they return;
# max_memory_allocated counts it. Recorded so far (the others: Note [The device's kernels on
# fake tensors] in device_kernels.py):
# - CUDA's softmax backward (aten/src/ATen/native/cuda/SoftMax.cu, softmax_backward_cuda_out)
#   computes `Tensor tmp = grad * output;` and reduces that: a tensor of the gradient's size
#   (in the product's dtype) beside grad_input. Seen on the simulated H100 under torch 2.14.1
#   (PyTorch's own CUDA code around the simulated kernels): `_softmax_backward_data`'s
#   allocation, then `mul`'s inside structured_softmax_backward_cuda_out, freed as it returns.
#   internvl_vision's eager AdamW step (2x4 heads of 1025x1025 float scores: 33.6 MB each) has
#   its peak there: −13.58 % without it. log_softmax's backward makes none.
# - CUDA's layer norm (aten/src/ATen/native/cuda/layer_norm_kernel.cu) takes
#   `input.expect_contiguous()` before it allocates its outputs, forward and backward, and the
#   backward `dY.contiguous()` after them: a copy of each operand that is not contiguous. Seen
#   on the simulated H100 (torch 2.14.1): gemma4_audio's layer norms over a transposed
#   convolution output, whose AdamW step's peak is inside layer_norm_backward_cuda with both
#   copies live (−3.01 % without them).
# The rules are data, the CUDA profiles' `kernels.temporaries` (the CPU's kernels are not
# checked here, and its profile lists none): for each, the op, the argument whose elements the
# temporary has (`like`), the arguments whose result type is its dtype (`dtype_of`; else
# `like`'s), whether the kernel takes it before its outputs or after them, and whether it is a
# copy made only of an operand that is not contiguous. The recording adds the temporaries to
# the op's node (before its outputs or after them) and releases them by a node of its own,
# `memtrace::kernel_scratch`, right after. memtrace-estimate's TorchScript front end reads the
# same entries for inference graphs (GraphBuilder::addKernelTemporaries), where the op a graph
# names may be a composite that hands its arguments to the entry's (aten::layer_norm).
# One more is code, not data, its shape not an operand's:
# - CUDA's memory-efficient attention backward (aten/src/ATen/native/transformers/cuda/
#   attention_backward.cu, _efficient_attention_backward) given grouped key heads (enable_gqa,
#   which the kernel takes from torch 2.14: `gqa_from_torch` in the CUDA profiles) allocates,
#   right after grad_query, grad_key and grad_value (at the key's heads), a key and a value
#   gradient at the query's heads (the kernel works a query head at a time; its outputs are the
#   groups' sums), freed as it returns. Seen on the simulated H200 (torch 2.14.1): (2, 4, 16,
#   16) float query against (2, 1, 16, 16) keys: two 8,192 B tensors after the 8,192 + 2,048 +
#   2,048 B outputs; none with equal heads. laguna's sdpa AdamW step (48 query heads, 2 key
#   heads): −2.32 % → −2.06 %; the rest, 1,586,688 B, is what the kernel takes after them: a
#   (B, H, L) float buffer (12,288 B) and its workspace (1,574,400 B), live together at the
#   step's peak (Note [The efficient attention backward's buffers]).


# Note [A matrix cuBLAS cannot read]
# CUDA's mm and addmm (aten/src/ATen/native/cuda/Blas.cpp, addmm_out_cuda_impl: cublasCommonArgs
# and prepare_matrix_for_cublas) hand cuBLAS each operand as it is where it is non-overlapping
# and dense, or a column- or row-major matrix with a leading dimension (strides (1, >= rows) or
# (>= columns, 1)); any other operand it clones contiguous, after the output is allocated, and
# frees the clone as it returns. The common one: the gradient of `output.sum()` is an expanded
# scalar (strides 0), which reaches the backward's matmuls as it is: GPT-2's logits gradient in
# its language-model head's two mm's (4 x 128 x 50,257 float, 102,926,336 B each), the step's
# backward peak on the simulated H200 (torch 2.14.1: both clones seen inside
# addmm_out_cuda_impl). CUDA profiles only (the CPU's kernels read strides as they are); bmm's
# batched operands are not modelled, nor is the copy in the TorchScript front end's inference
# graphs (an expanded operand there is rare: said, not measured).
_CUBLAS_MATRIX_OPERANDS = {"aten::mm": 0, "aten::addmm": 1}  # where the two matrices start


def cublas_reads_as_is(matrix: Any) -> bool:
    """Whether prepare_matrix_for_cublas passes this 2-d operand without a copy (Note [A matrix
    cuBLAS cannot read])."""
    (rows, columns), (row_stride, column_stride) = matrix.shape, matrix.stride()
    # Non-overlapping and dense: its dimensions by stride, each stride the product before it.
    expected = 1
    for size, stride in sorted(((int(size), int(stride)) for size, stride in
                                zip(matrix.shape, matrix.stride(), strict=True) if size != 1),
                               key=lambda pair: pair[1]):
        if stride != expected:
            break
        expected *= size
    else:
        return True
    return bool((row_stride == 1 and column_stride >= max(1, rows)) or
                (column_stride == 1 and row_stride >= max(1, columns)))


# Note [The efficient attention backward's buffers]
# CUDA's memory-efficient attention backward (aten/src/ATen/native/transformers/cuda/
# attention_backward.cu, _efficient_attention_backward, with the CUTLASS kernels of
# mem_eff_attention/kernel_backward.h chosen in the order of kernels/cutlassB.h) allocates,
# besides its outputs (B, H, M queries, N keys, D = the query's head dim, Dv = the value's):
# - `grad_out_.contiguous()` of the (B, M, H, Dv) gradient it is given, before its outputs,
#   where that view is not contiguous (sdpa's own backward passes it transposed);
# - the gradients at the query's heads where the key heads are grouped (Note [What a CUDA
#   kernel allocates inside itself]);
# - `delta`, a (B, H, M) float tensor: `at::empty` where the kernel computes it (float16 and
#   bfloat16, kKernelComputesDelta on sm80 and later), else `(grad_out.float() * out.float())
#   .sum(-1).transpose(-2, -1).contiguous()`: in float32 a (B, M, H, Dv) float product and a
#   (B, M, H) sum before it, both freed before the workspace;
# - the kernel's workspace, `workspace_size()` bytes, B * H * align4(gq + gk + gv) floats: the
#   query gradient's partial sums, ceil(M / BI) * ceil(D / BJ) blocks of (4 + BI * BJ) floats
#   (kNeedsAccumGradQ: always, split keys being enabled from sm70), and where a half kernel
#   cannot keep the key's and value's gradients in registers (kOutputInRF: kMaxK <= BI) their
#   accumulators, splits * BJ * align_up(D, BI) and splits * BJ * align_up(Dv, BI) floats, with
#   splits = ceil(N / BJ) at most 200 / (B * H) and at least 1. (BI, BJ) is the first kernel of
#   the list whose kMaxK holds max(D, Dv): float32 (64, 64) to 64, (128, 64) to 128, (128, 64)
#   beyond; float16 and bfloat16 (64, 64) to 64, (128, 128) to 128, (128, 64) beyond. Freed as
#   it returns: delta, the workspace, the gradients at the query's heads, the copy.
# Seen on the simulated H100 and A100 (torch 2.14.1: PyTorch's own host code around the
# simulated kernels, which reports each card's shared memory, so the kernel the list gives is
# the one that fits): the same sizes on both, for float32/float16/bfloat16, head dims 32 to 256,
# 100 and 300 queries (not multiples of the blocks) and 128, 8 to 320 batch x heads, causal or
# not, with dropout or not (test_front_end.py). laguna's sdpa AdamW step, 2 x 48 heads of 32
# float queries: a 12,288 B delta and a 1,574,400 B workspace at the step's peak (-2.06 % ->
# 0). Assumed for every CUDA profile: the sm80/sm90 kernels. Not modelled: sm86/sm89's extra
# (128, 64) kernel to head dim 96 in half precision, sm70/sm75's lists, the deterministic
# mode's single split, the batches beyond 65,535 that sdpa's backward takes in chunks.
def efficient_backward_workspace_bytes(*, half: bool, batch: int, heads: int, queries: int,
                                       keys: int, head_dim: int, value_dim: int) -> int:
    """The memory-efficient attention backward's workspace (Note [The efficient attention
    backward's buffers])."""
    widest = max(head_dim, value_dim)
    block_i, block_j, max_k = next(kernel for kernel in _EFFICIENT_BACKWARD_KERNELS[half]
                                   if kernel[2] >= widest)
    gradient_q = -(-queries // block_i) * -(-head_dim // block_j) * (4 + block_i * block_j)
    accumulated = half and max_k > block_i  # the key's and value's gradients not in registers
    splits = max(1, min(-(-keys // block_j), 200 // max(1, batch * heads))) if accumulated else 1

    def aligned(size: int, to: int) -> int:
        return -(-size // to) * to

    gradient_kv = splits * block_j * (aligned(head_dim, block_i) + aligned(value_dim, block_i)) \
        if accumulated else 0
    return batch * heads * aligned(gradient_q + gradient_kv, 4) * 4


# (BI, BJ, kMaxK) of kernels/cutlassB.h's sm80 lists (sm80 to sm100), in their order, by
# whether the inputs are half precision; the last holds any head dim.
_EFFICIENT_BACKWARD_KERNELS = {
    False: ((64, 64, 64), (128, 64, 128), (128, 64, 1 << 30)),
    True: ((64, 64, 64), (128, 128, 128), (128, 64, 1 << 30)),
}


# Note [Backward formulas that write in place on the device]
# Some of autograd's backward formulas (torch/csrc/autograd/FunctionsManual.cpp) branch on
# areAnyTensorSubclassLike(): for a tensor subclass they take an out-of-place op, for a plain
# tensor its in-place form. gather_backward makes `grad.new_zeros(self.sizes())` and then
# `result.scatter_add(dim, index, grad)` for a subclass, `result.scatter_add_(...)` else. The
# recording's fake tensors are a subclass, the device's never: the recording held the zero
# tensor and the sum at once where the device holds one. inkling_text's relative position bias
# (`rel_logits.gather(-1, index)`, 8 MiB of float a layer at 2x32 tokens) made its AdamW step
# +5.27 % (eager) and +3.64 % (sdpa) against the simulated H100: the backward's peak held a
# second 8 MiB. So in backward, an out-of-place op of _IN_PLACE_ON_DEVICE whose first operand
# is the zero tensor the node before made (_ZEROS), of its output's size, and which dies as the
# op returns (the formula's local) is released by that op's node, before its output is
# allocated: what the in-place form holds. A zero tensor that lives on (Python's own backward
# holding it) keeps both.
_IN_PLACE_ON_DEVICE = {"aten::scatter_add", "aten::scatter", "aten::index_add", "aten::put",
                       "aten::index_put", "aten::masked_scatter", "aten::index_copy",
                       "aten::scatter_reduce", "aten::index_reduce"}
_ZEROS = {"aten::new_zeros", "aten::zeros", "aten::zeros_like"}


# Note [The engine's gradient sums in place]
# Where two backward nodes give a gradient to the same input, autograd's engine sums them into
# the next node's input buffer (torch/csrc/autograd/input_buffer.cpp, accumulate): with grad
# mode off, `old_var.add_(var)` when the buffer holds the last reference to `old_var` and its
# storage and `old_var` is dense and not a tensor subclass, nor is `var`; `old_var + var` else.
# The recording's fake tensors are a subclass: every sum there is out of place, where the device
# sums in place into the buffer's gradient and allocates nothing. Requested bytes peak the same
# where no sum is at the peak, but the caching allocator's blocks do not: pp_lcnet_v4's AdamW
# step on the simulated H100 (its residual blocks' 196,608-byte gradients summed 14 times) was
# estimated 917,504 B low in max_memory_allocated (−1.45 %) with requested_bytes exact, as were
# pp_ocrv6_small_rec's and pp_ocrv6_tiny_rec's. So the loop registers a post hook on every node
# of the backward's graph (engine_sums), which names the node whose formula ran last; an
# `aten::add.Tensor` the engine then runs for that node (torch._C._current_autograd_node is still
# it) over a dense first operand of the output's size, which dies as the add returns (the
# buffer's reference was the last), is released by the add's node before its output is
# allocated, as for Note [Backward formulas that write in place on the device]. A first operand
# that lives on (a gradient Python still holds) keeps both, as on the device. CUDA profiles
# only: checked on the simulated H100 (test_device_step.py's TwoBranches: requested_bytes'
# peak within 64 B of the card's); on the CPU's profile it moved test_training_estimate's GRU
# step (CPU truth) from within its bar to −1.17 %, not understood, so the CPU keeps both.
# Withdrawn once (it left GPT-2's H200 row gpt2/adamw-loop/none/b4 peaking in the optimizer
# phase, the out-of-place sum of its tied embedding's two gradients having been its backward's
# peak): the backward's real peak is elsewhere, the language-model head's mm's copies of the
# expanded logits gradient (Note [A matrix cuBLAS cannot read]), recorded since.
@contextlib.contextmanager
def engine_sums(recorder: Recorder, root: Any) -> Iterator[None]:
    """While `root.backward()` runs: a post hook on each node of its graph that tells the
    recorder which node's formula ran last (Note [The engine's gradient sums in place])."""
    handles: list[Any] = []
    seen: dict[int, Any] = {}  # held: a node's Python object is the one the engine names
    pending = [getattr(root, "grad_fn", None)]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        following = [edge[0] for edge in node.next_functions]
        if any(next_node is not None for next_node in following):
            def evaluated(grad_inputs: Any, grad_outputs: Any, node: Any = node) -> None:
                recorder.evaluated_node = node
            handles.append(node.register_hook(evaluated))
        pending.extend(following)
    try:
        yield
    finally:
        recorder.evaluated_node = None
        for handle in handles:
            handle.remove()


# Note [Data-dependent values]
# An op whose output size or value depends on tensor data (nonzero, a boolean mask, .item(),
# unique) cannot run on fake tensors. When the step meets one, record() runs the step once on
# a real copy of the model with the example inputs, keeps what each such op gave and where (the
# model's frames it ran in), and records the fake step again giving those back, each place its
# own in the order they ran there: sizes as on the example input, said in the graph file's
# assumptions (as memtrace-estimate's --example-counts does for TorchScript). By place, not by
# order alone: a model's Python may take a path of its own on real tensors (transformers'
# warn_if_padding_and_no_attention_mask reads a value unless is_tracing(), which a fake tensor
# is unless its value is known: Note [Values Python knows on fake tensors]), and a value given back at another op's place is wrong (longformer: a bool where the
# chunking's view wants a size). A fake tensor made from numbers alone holds its value
# (torch.div of two sizes): read back, it is known, neither replayed nor assumed.
_DATA_DEPENDENT = {"aten::nonzero", "aten::_local_scalar_dense", "aten::masked_select",
                   "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
                   "aten::repeat_interleave.Tensor", "aten::bincount", "aten::nonzero_numpy"}


def _is_data_dependent(name: str, args: tuple[Any, ...]) -> bool:
    if name in _DATA_DEPENDENT:
        # A fake tensor made from numbers alone holds them (torch.div(size, 2) in longformer's
        # chunking, read back with .item()): its value is known, not the example's.
        return not (args and _torch_internals.fake_constant(args[0]) is not None)
    if name == "aten::index.Tensor" and len(args) > 1:
        import torch
        return any(isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)
                   for index in (args[1] or []))
    return False


def _model_frames() -> Iterator[Any]:
    """The Python frames of the op being dispatched, innermost first, without the dispatch
    machinery and this package."""
    frame: Any = sys._getframe(1)
    found = 0
    while frame is not None and found < _MAX_FRAMES:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_HERE) or
                any(part in filename for part in _torch_internals.MACHINERY_FILES)):
            found += 1
            yield frame
        frame = frame.f_back


def _site() -> tuple[Frame, ...]:
    """Where a data-dependent op runs: the model's frames, innermost first, outside torch (whose
    Module.__call__ takes another line when hooks are installed, as the recording's are)."""
    import torch
    inside = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    return tuple(Frame(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
                 for frame in _model_frames() if not frame.f_code.co_filename.startswith(inside))


def _summary(output: Any) -> Any:
    """What a data-dependent op gave: a number, or the shapes and dtypes of its tensors."""
    import torch
    if isinstance(output, (torch.Tensor, tuple, list)):
        return [(list(t.shape), str(t.dtype)[6:]) for t in tensors_in(output)]
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


def dispatch_mode(recorder: Recorder) -> Any:
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
def storage_resizes(recorder: Recorder) -> Iterator[None]:
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
    return tensors_in(values)


@contextlib.contextmanager
def module_hooks(recorder: Recorder) -> Iterator[None]:
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
        seen = {id(t.grad_fn) for t in tensors_in(args) if t.grad_fn is not None}
        for tensor in tensors_in(output):
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
