"""Ground truth for a training step on the CPU: every storage alive at once during step 2.

The model is copied (real tensors) and trained for two steps with a fresh optimizer of the
same kind, in a loop written out as a user writes it (the loop's names hold the output and the
loss as long as Python says); a TorchDispatchMode watches both steps (forward, loss, backward,
optimizer.step(), zero_grad(set_to_none=True)): after each op it drops the storages that died
and adds the new ones. The peak is the largest total during step 2, counting from its start
the parameters, buffers and inputs, the optimizer state step 1 made, and whatever else step 1
left alive (what the loop still names). At the peak, each live storage is told
apart by what it is, independently of mem_tracer's code: a parameter or buffer of the model,
the `.grad` of a parameter, a tensor of `optimizer.state`, an argument of the forward, a tensor
autograd saved during the forward (seen by a saved_tensors_hooks pack, if it is none of the
others), or a temporary (the loss's targets among them).

A model wrapped for a job (measure_step's `wrap`: DistributedDataParallel, FSDP2's fully_shard)
is wrapped inside the watch, so that what the wrapper allocates (DDP's gradient buckets, FSDP's
shards) counts as any other storage. A tensor subclass that wraps others (DTensor) counts as
the tensors it wraps (its local shard), and a storage resized in place
(`UntypedStorage.resize_`, as FSDP frees and refills an unsharded parameter) is freed at 0
bytes and allocated anew when it grows again. In a job, what the communication backend
allocates inside a collective is the backend's, not counted (_Tracker says how it is told).
"""

import contextlib
import copy
from dataclasses import dataclass, field

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _key(tensor):
    return tensor.untyped_storage()._cdata


def _tensors(value):
    return [inner for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)
            for inner in _inner(leaf)]


def _inner(tensor):
    """The tensors whose storages hold a tensor's memory: its own, or a wrapper subclass's
    inner tensors (a DTensor's local shard)."""
    if type(tensor) in (torch.Tensor, torch.nn.Parameter) or not hasattr(tensor, "__tensor_flatten__"):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    return [inner for name in names if isinstance(getattr(tensor, name), torch.Tensor)
            for inner in _inner(getattr(tensor, name))]


@dataclass
class StepTruth:
    peak: int = 0
    categories: dict = field(default_factory=dict)  # at the peak
    phase: str = ""  # at the peak
    backend_peak: int = 0  # in a job: the most the backend held at once (not in `peak`)


class _Tracker(TorchDispatchMode):
    """Live storages, each with an id of its own (a freed storage's address can be reused)."""

    def __init__(self, in_a_job=False):
        super().__init__()
        self.live = {}  # storage key -> (weak ref, bytes, id)
        # In a job, a storage first seen as the view an op returns was allocated out of the
        # watch's sight, inside a collective: the backend's own (gloo's reduce-scatter is an
        # all-reduce of a copy of its input), not the job's. Kept apart, its most at once said.
        self.in_a_job = in_a_job
        self.backend = {}  # storage key -> (weak ref, bytes)
        self.backend_peak = 0
        self.current = 0
        self.next_id = 0
        self.peak = 0
        self.peak_live = []  # (id, bytes)
        self.phase = "none"
        self.peak_phase = ""
        self.counting = False  # the peak is step 2's: set when it starts

    def add(self, tensor):
        tensor = _inner(tensor)[0]
        key = _key(tensor)
        self.backend.pop(key, None)
        if key not in self.live:
            storage = tensor.untyped_storage()
            self.live[key] = (StorageWeakRef(storage), storage.nbytes(), self.next_id)
            self.next_id += 1
            self.current += storage.nbytes()
        return self.live[key][2]

    def id_of(self, tensor):
        entry = self.live.get(_key(_inner(tensor)[0]))
        return None if entry is None or entry[0].expired() else entry[2]

    def resized(self, storage):
        """A storage resized in place: what it held is freed, what it holds now is new."""
        entry = self.live.pop(storage._cdata, None)
        if entry is not None:
            self.current -= entry[1]
        if storage.nbytes():
            self.live[storage._cdata] = (StorageWeakRef(storage), storage.nbytes(), self.next_id)
            self.next_id += 1
            self.current += storage.nbytes()
        self.note_peak()

    def note_peak(self):
        if self.counting and self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.phase
            self.peak_live = [(entry[2], entry[1]) for entry in self.live.values()]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for key in [key for key, entry in self.live.items() if entry[0].expired()]:
            self.current -= self.live.pop(key)[1]
        for key in [key for key, entry in self.backend.items() if entry[0].expired()]:
            del self.backend[key]
        views = self.in_a_job and any(value.alias_info is not None for value in func._schema.returns)
        for tensor in _tensors(out):
            if tensor.device.type == "meta" or _key(tensor) in self.live:
                continue
            if views:
                storage = tensor.untyped_storage()
                self.backend[_key(tensor)] = (StorageWeakRef(storage), storage.nbytes())
            else:
                self.add(tensor)
        if self.counting:
            self.backend_peak = max(self.backend_peak,
                                    sum(entry[1] for entry in self.backend.values()))
        self.note_peak()
        return out


@contextlib.contextmanager
def _resizes(tracker):
    original = torch.UntypedStorage.resize_

    def resize_(storage, size):
        result = original(storage, size)
        tracker.resized(storage)
        return result

    torch.UntypedStorage.resize_ = resize_
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original


def measure_step(model, args=(), kwargs=None, *, loss_fn=None, targets=(), optimizer=None,
                 autocast=None, scaler=False, accumulate=1, prepare=None,
                 loop="until-next-forward", wrap=None, steps=2):
    """The live-storage peak of the last of `steps` steps (step 2 by default) of training a
    copy of `model` (see the module's doc); `wrap(model_copy)` returns what is trained (a
    DistributedDataParallel, a fully_shard'ed model), made inside the watch.
    `optimizer` is an optimizer of `model` whose kind and hyperparameters are copied;
    `prepare(model_copy)` may change the copy before training (activation checkpointing).
    `loop` is how the training loop is written (mem_tracer's loop=, each written out below as
    a user writes it): what it still names when step 2 starts counts from the start.
    Categories are those of a storage's whole life, as memtrace gives them: a storage that
    becomes a parameter's `.grad` is a gradient from its allocation on."""
    kwargs = dict(kwargs or {})
    torch.manual_seed(0)
    model = copy.deepcopy(model).train()
    if prepare is not None:
        prepare(model)
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    settings = optimizer.param_groups[0] if optimizer is not None else None
    scaler_object = torch.amp.GradScaler("cpu") if scaler else None
    tracker = _Tracker(in_a_job=wrap is not None)
    saved, gradients = set(), set()
    persistent = {}

    def pack(tensor):
        found = tracker.id_of(tensor)
        if found is not None and tracker.phase == "forward":
            saved.add(found)
        # A detached alias: the tensor itself would keep an output its own node saved, and the
        # node, alive for good when backward never reaches it (Note [Saved tensors packed
        # without a cycle] in mem_tracer/estimator/step_loop.py).
        return tensor.detach()

    def loss_of(output):
        if loss_fn is not None:
            return loss_fn(output, *targets)
        loss = getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor):
            return loss
        return [t for t in _tensors(output) if t.is_floating_point()][0].float().sum()

    def backward(loss):
        tracker.phase = "backward"
        (scaler_object.scale(loss) if scaler_object else loss).backward()

    def optimizer_step():
        tracker.phase = "optimizer"
        for parameter in model.parameters():
            if parameter.grad is not None and tracker.id_of(parameter.grad) is not None:
                gradients.add(tracker.id_of(parameter.grad))
        if optimizer is not None:
            if scaler_object:
                scaler_object.step(optimizer)
                scaler_object.update()
            else:
                optimizer.step()
            tracker.phase = "none"
            optimizer.zero_grad(set_to_none=True)
        else:
            for parameter in model.parameters():
                parameter.grad = None
        tracker.phase = "none"

    def begin(step):
        """The last step starts: the peak counts from here, the persistent storages by
        category."""
        if step < steps - 1:
            return
        saved.clear()
        gradients.clear()
        for tensor in [*model.parameters(), *model.buffers()]:
            persistent.setdefault(tracker.add(tensor), "parameter")
        if optimizer is not None:
            for state in optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        persistent.setdefault(tracker.add(value), "optimizer_state")
        for tensor in _tensors((args, kwargs)):
            persistent.setdefault(tracker.add(tensor), "input")
        for tensor in _tensors(list(targets)):  # no argument of the forward: a temporary
            persistent.setdefault(tracker.add(tensor), "temporary")
        tracker.counting = True

    hooks = lambda: torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)  # noqa: E731
    amp = lambda: (torch.autocast("cpu", dtype=autocast) if autocast  # noqa: E731
                   else contextlib.nullcontext())
    with tracker, _resizes(tracker):
        if wrap is not None:
            model = wrap(model)
        if settings is not None:
            optimizer = type(optimizer)([{**{k: v for k, v in settings.items() if k != "params"},
                                          "params": list(model.parameters())}])
        # Step 1 makes the optimizer's state; the tracker sees it (and what the loop keeps
        # into step 2) but counts from the last step on.
        if loop == "until-next-forward":
            for step in range(steps):
                begin(step)
                for _ in range(accumulate):
                    tracker.phase = "forward"
                    with hooks(), amp():
                        out = model(*args, **kwargs)
                        loss = loss_of(out)
                    backward(loss)
                optimizer_step()
        elif loop == "until-loss":
            for step in range(steps):
                begin(step)
                for _ in range(accumulate):
                    tracker.phase = "forward"
                    with hooks(), amp():
                        loss = loss_of(model(*args, **kwargs))
                    backward(loss)
                optimizer_step()
        elif loop == "until-step-end":
            def train_step():
                for _ in range(accumulate):
                    tracker.phase = "forward"
                    with hooks(), amp():
                        out = model(*args, **kwargs)
                        loss = loss_of(out)
                    backward(loss)
                optimizer_step()

            for step in range(steps):
                begin(step)
                train_step()
        else:
            raise ValueError(f"unknown loop {loop!r}")

    totals = dict.fromkeys(("parameter", "gradient", "optimizer_state", "activation", "input",
                            "temporary"), 0)
    for storage, size in tracker.peak_live:
        if storage in persistent:
            category = persistent[storage]
        elif storage in gradients:
            category = "gradient"
        elif storage in saved:
            category = "activation"
        else:
            category = "temporary"
        totals[category] += size
    return StepTruth(tracker.peak, totals, tracker.peak_phase, tracker.backend_peak)
