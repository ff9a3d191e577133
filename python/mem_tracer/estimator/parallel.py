"""A training step of DistributedDataParallel or FSDP2 (`fully_shard`), predicted per rank:
recorded on one process, on fake tensors, through PyTorch's fake process group.

Note [One rank on the fake process group]
Every rank of a DDP or FSDP job runs the same step on its own shard of the batch, so one
rank's step is what each holds, and one process can record it: the model is copied onto fake
tensors (step_graph), a process group of the "fake" backend (torch.testing._internal.
distributed.fake_pg: a process group of `world_size` ranks that answers every collective
without sending anything) stands for the job's, and the copy is wrapped, inside the recording,
as the user's script wraps it: `DistributedDataParallel(model, ...)`, or `fully_shard` on each
block and then on the root. The wrappers' own code then runs: DDP's Reducer makes its
gradient buckets (a flat buffer per bucket, by `bucket_cap_mb`, rebuilt at the second
forward in the order gradients became ready: DDP's `_rebuild_buckets`), copies each gradient
into its bucket or, with `gradient_as_bucket_view`, makes the gradient a view of it; FSDP2
shards each parameter on dim 0 (padded to equal shards), all-gathers a group's parameters into
a flat buffer and copies them out into the unsharded parameters before its forward and its
backward, frees them after the forward when `reshard_after_forward` (and after the backward),
and reduce-scatters the gradients into sharded ones; the optimizer then runs on the shards.
Collectives run in place, or into buffers their callers allocate: the fake process group's
answer leaves every buffer's size and lifetime as the real one's, so the recorded step is
the rank's. What the recording cannot run as is, and runs instead:
- DDP's check that every rank's parameters have the same shapes reads their values: it is
  skipped (one process has one set of shapes).
- DDP's built-in all-reduce waits on a future the fake process group leaves empty; a
  communication hook does the same in place (the bucket divided by the world size, then
  all-reduced), so the Reducer copies each gradient into its bucket without dividing it.
  Memory is the same: both write into the bucket.
- The step recorded is DDP's third (its buckets are rebuilt at the second forward: that
  step is not the steady state) and FSDP's second (the first makes the optimizer's state).
A rank's memory differs from another's only where FSDP's shards are uneven (a dimension 0
that the world size does not divide: torch.chunk gives the first ranks the larger shards,
and the last may get less, or nothing): every shard is padded to the largest, but the
optimizer's state is made for the shard itself. The first rank then holds the most, the last
the least, and the others lie between: both are recorded, and said.
Not recorded: what the backend allocates outside PyTorch's allocator (NCCL's and gloo's own
buffers), the communication streams' separate pools of the CUDA caching allocator (FSDP's
all-gather and reduce-scatter buffers are allocated on their own streams on a GPU: allocated
bytes are the same, reserved ones higher, which Estimate.parallel.reserved_lower_bound says), and
collectives overlapping compute (on a GPU a prefetched all-gather can be live beside the
layer before it; the CPU's order is the script's). What NCCL holds for a while after a
collective is said beside the prediction (Note [NCCL holds DDP's first buckets]).

Note [NCCL holds DDP's first buckets]
ProcessGroupNCCL keeps every tensor of a collective alive (its TensorShelf stash instead of
record_stream: torch 2.14's libtorch_cuda says TORCH_NCCL_AVOID_RECORD_STREAMS "is the
default now") until the caller waits on the Work, or until its watchdog thread, which wakes
every 100 ms (ProcessGroupNCCL::kWatchdogThreadSleepMillis), sees the collective complete.
DDP's Reducer waits on the Work's future, not on the Work, so its all-reduces are let go by
the watchdog (seen below: the bucket outlives the rebuild by the watchdog's timing alone).
That costs nothing for the steady buckets, which live on anyway; but DDP's first step runs
with one bucket per dtype holding every gradient (it does not know the order gradients
become ready: DistributedDataParallel's bucket size limits are [sys.maxsize] at first), and
the rebuild at the second forward replaces it: that bucket then lives on until the
watchdog's next look, up to 100 ms after the first step's all-reduce ended. A rank whose
steps are shorter (a small model, a fast card) holds it at the second step's peak, and
possibly the third's, and max_memory_allocated() says so; one whose steps are longer never
does. gloo has no stash (the same jobs on gloo are exact), and FSDP2 waits on its Works.
Measured on the simulated H100 with NCCL simulated (docs/simulated-gpu.md, "A torchrun job
on simulated cards"): with a pause of a second between steps every rank's peak is the
prediction to the byte; without one a rank's peak is the prediction plus the bucket (the
allocator's figure for it) or, when the watchdog looked during the step, between the two.
The prediction is the steady state, after NCCL let go; Estimate.parallel.held_by_nccl says
how much more a rank can hold, and its peak then (the step replayed with the bucket live
throughout), on a CUDA profile (the CPU's backend, gloo, holds nothing).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .. import _torch_internals
from .._modules import module_blocks
from ..errors import MemTracerError

Strategy = Literal["ddp", "fsdp"]


@dataclass(frozen=True)
class DDP:
    """DistributedDataParallel's settings that change a rank's memory, with DDP's defaults:
    ``bucket_cap_mb`` (None: 25 MiB) and ``gradient_as_bucket_view``."""

    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool = False


@dataclass(frozen=True)
class FSDP:
    """FSDP2's ``fully_shard`` as a script applies it: on each of ``modules`` (paths of
    named_modules(); None: the model's blocks, as plan() finds them: the layers of its
    ModuleLists and Sequentials, else the root's children with parameters), then on the root,
    each with ``reshard_after_forward``."""

    reshard_after_forward: bool = True
    modules: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Job:
    """What one rank of the job runs: the wrapper's settings, the world size, and the rank."""

    settings: DDP | FSDP
    world_size: int
    rank: int = 0

    @property
    def strategy(self) -> Strategy:
        return "ddp" if isinstance(self.settings, DDP) else "fsdp"


# What a storage touched by communication is, by the first op that touched it
# (step_graph's "collective"): the kinds Estimate.parallel.communication names.
_KINDS = {
    "c10d::allreduce_": "gradient buckets",  # DDP's buckets (with gradient_as_bucket_view, the gradients)
    "c10d::broadcast_": "broadcast buffers",  # DDP's model buffers, flattened at each forward
    "fsdp::all_gather_copy_in": "all-gather buffers",  # FSDP's flat input and output
    "c10d::_allgather_base_": "all-gather buffers",
    "fsdp::split_with_sizes_copy": "unsharded parameters",  # copied out of the all-gather
    "fsdp::chunk_cat": "reduce-scatter buffers",  # FSDP's flat gradient input
    "c10d::_reduce_scatter_base_": "reduce-scatter buffers",  # its output: the sharded gradients
}


@dataclass(frozen=True)
class HeldByNccl:
    """DDP's first-step buckets, which NCCL holds until its watchdog lets them go (Note [NCCL
    holds DDP's first buckets]), and the rank's step replayed with them live throughout: the
    most max_memory_allocated() can say. Sizes in bytes."""

    bytes: int
    buckets: tuple[int, ...]
    peak_requested_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int


@dataclass
class ParallelEstimate:
    """One rank of a DDP or FSDP job (Estimate.parallel). Sizes in bytes."""

    strategy: Strategy
    world_size: int
    settings: dict[str, Any]
    # The communication buffers live at the step's peak, by kind ("gradient buckets",
    # "all-gather buffers", "unsharded parameters", "reduce-scatter buffers", "broadcast
    # buffers"): their bytes, and the categories of the breakdown they are counted in.
    communication: dict[str, int] = field(default_factory=dict)
    communication_categories: dict[str, dict[str, int]] = field(default_factory=dict)
    # The training peak of each rank recorded: rank 0, and the last rank when FSDP's shards
    # are uneven (then every rank between lies between the two).
    ranks: dict[int, int] = field(default_factory=dict)
    uneven: str | None = None  # which parameters shard unevenly, when they do
    # The same ranks' peak as PyTorch's caching allocator counts it (max_memory_allocated()).
    ranks_allocated: dict[int, int] = field(default_factory=dict)
    # DDP on a CUDA profile: what NCCL can still hold after the first step, and the rank's
    # peak while it does (Note [NCCL holds DDP's first buckets]); None otherwise.
    held_by_nccl: HeldByNccl | None = None
    # FSDP on a CUDA profile: the reserved figure is a lower bound (the collectives' streams
    # keep pools of their own, which the replay leaves out).
    reserved_lower_bound: bool = False

    def __str__(self) -> str:
        def mib(size: int) -> str:
            return f"{size / 2**20:.2f} MiB"

        settings = ", ".join(f"{key}={value!r}" for key, value in self.settings.items())
        lines = [f"  per rank of {self.world_size} ({self.strategy.upper()}, {settings})"]
        if self.uneven:
            lines.append(f"  ranks differ (uneven shards: {self.uneven}): " + ", ".join(
                f"rank {rank} {mib(size)}" for rank, size in sorted(self.ranks.items()))
                + (", the others between" if self.world_size > 2 else ""))
        if self.held_by_nccl is not None:
            held = self.held_by_nccl
            lines.append(f"  the peak is once NCCL let go of DDP's first-step bucket "
                         f"({mib(held.bytes)}: every gradient): its watchdog does within 100 ms "
                         f"of the first step's all-reduce; until then a rank holds up to "
                         f"{mib(held.peak_allocated_bytes)} allocated (steps shorter than that "
                         "peak between the two)")
        if self.reserved_lower_bound:
            lines.append("  reserved is a lower bound: FSDP's all-gathers and reduce-scatters "
                         "run on streams of their own, whose freed blocks PyTorch's caching "
                         "allocator keeps for them (not modelled; max_memory_reserved() was 24 "
                         "to 32 % higher on simulated H100s)")
        if self.communication:
            lines.append("  communication buffers at the peak: " + ", ".join(
                f"{kind} {mib(size)} (in " + ", ".join(
                    category for category in self.communication_categories.get(kind, {}))
                + ")" for kind, size in self.communication.items()))
        return "\n".join(lines)


def job(parallel: Strategy | DDP | FSDP, world_size: int | None) -> Job:
    """The Job of estimate()'s and plan()'s ``parallel=`` and ``world_size=``."""
    if isinstance(parallel, str):
        if parallel not in ("ddp", "fsdp"):
            raise MemTracerError(f"parallel must be 'ddp', 'fsdp', mem_tracer.DDP(...) or "
                                 f"mem_tracer.FSDP(...), not {parallel!r}")
        settings: DDP | FSDP = DDP() if parallel == "ddp" else FSDP()
    elif isinstance(parallel, (DDP, FSDP)):
        settings = parallel
    else:
        raise MemTracerError(f"parallel must be 'ddp', 'fsdp', mem_tracer.DDP(...) or "
                             f"mem_tracer.FSDP(...), not {type(parallel).__name__}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise MemTracerError(f"parallel={parallel!r} needs world_size=N, the number of ranks "
                             f"(a positive int), not {world_size!r}")
    return Job(settings, world_size)


def _fake_backend() -> Any:
    """torch.distributed with its fake backend registered, or one line saying why not."""
    _torch_internals.require("estimate(parallel=...)")
    try:
        import torch.distributed as dist
        if not dist.is_available():
            raise ImportError("this build of torch has no torch.distributed")
        _torch_internals.register_fake_backend()
        if not hasattr(dist.Backend, "FAKE"):
            raise ImportError("torch.distributed has no fake backend")
    except ImportError as error:
        import torch
        raise MemTracerError(f"estimate(parallel=...) records with PyTorch's fake process "
                             f"group, which torch {torch.__version__} lacks ({error})") from error
    return dist


@contextlib.contextmanager
def _fake_process_group(job: Job) -> Iterator[Any]:
    """The default process group of the fake backend, as rank `job.rank` of `world_size`,
    for the recording; and the device mesh FSDP shards over (made outside the fake tensors:
    a mesh holds a real tensor of its ranks)."""
    dist = _fake_backend()
    if dist.is_initialized():
        raise MemTracerError("estimate(parallel=...) records with a fake process group, and this "
                             "process already has one: call it before init_process_group(), or "
                             "in a process of its own")
    import sys

    excepthook = sys.excepthook  # init_process_group prefixes it with the rank, for good
    dist.init_process_group("fake", store=_torch_internals.fake_store(), rank=job.rank,
                            world_size=job.world_size)
    try:
        mesh = None
        if job.strategy == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            mesh = init_device_mesh("cpu", (job.world_size,))
        yield mesh
    finally:
        dist.destroy_process_group()
        sys.excepthook = excepthook


def _allreduce_in_place(world_size, bucket):  # type: ignore[no-untyped-def]
    """DDP's all-reduce of a bucket, as its built-in one does it, in place, through the fake
    process group (Note [One rank on the fake process group]). Unannotated: DDP refuses a
    hook whose annotations are not its own types, and this module's are strings."""
    import torch
    import torch.distributed as dist
    buffer = bucket.buffer()
    buffer.div_(world_size)
    dist.all_reduce(buffer)
    future = torch.futures.Future()  # type: ignore[var-annotated]
    future.set_result(buffer)
    return future


def _real_bookkeeping() -> Any:
    """A TorchDispatchMode under which the Reducer's integer bookkeeping runs on real tensors:
    an integer `empty` is made real, and an op whose tensors are all real runs as it is. DDP's
    bucket rebuild writes the new buckets' parameter indices into such tensors and reads them
    back after broadcasting them from rank 0 (Reducer::sync_bucket_indices): a fake tensor has
    no data to read. A few ints a parameter, freed by the rebuild: not counted."""
    import torch
    fake = _torch_internals.fake_tensor_type()

    class Mode(_torch_internals.torch_dispatch_mode()):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            tensors = [leaf for leaf in _torch_internals.tree_leaves((args, kwargs))
                       if isinstance(leaf, torch.Tensor)]
            integer_empty = (func is torch.ops.aten.empty.memory_format and
                             not kwargs.get("dtype", torch.float).is_floating_point)
            if integer_empty or (tensors and not any(isinstance(t, fake) for t in tensors)):
                with _torch_internals.disable_current_modes():
                    return func(*args, **kwargs)
            return func(*args, **kwargs)

    return Mode()


def _wrap_ddp(model: Any, settings: DDP, world_size: int) -> Any:
    from torch.nn.parallel import DistributedDataParallel
    with _torch_internals.ddp_shape_check_skipped():
        wrapped = DistributedDataParallel(model, bucket_cap_mb=settings.bucket_cap_mb,
                                          gradient_as_bucket_view=settings.gradient_as_bucket_view)
    wrapped.register_comm_hook(world_size, _allreduce_in_place)
    _torch_internals.wrap_ddp_pre_forward(wrapped, _real_bookkeeping)  # where buckets rebuild
    return wrapped


def sharded_modules(model: Any, settings: FSDP) -> list[str]:
    """The modules fully_shard wraps before the root, deepest first (fully_shard goes from
    the leaves up)."""
    paths = list(settings.modules) if settings.modules is not None else module_blocks(model)
    for path in paths:
        try:
            model.get_submodule(path)
        except AttributeError as error:
            raise MemTracerError(f"FSDP(modules=...): the model has no module {path!r}") from error
    return sorted((path for path in paths if path), key=lambda path: -path.count("."))


def _wrap_fsdp(model: Any, settings: FSDP, mesh: Any) -> Any:
    from torch.distributed.fsdp import fully_shard
    for path in sharded_modules(model, settings):
        fully_shard(model.get_submodule(path), mesh=mesh,
                    reshard_after_forward=settings.reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=settings.reshard_after_forward)


def uneven_parameters(model: Any, world_size: int) -> list[str]:
    """The parameters FSDP shards unevenly over `world_size` ranks (dim 0 not a multiple)."""
    return [name for name, parameter in model.named_parameters()
            if parameter.dim() > 0 and parameter.shape[0] % world_size]


def record(model: Any, example_inputs: Sequence[Any] = (), *, parallel: Job,
           **step: Any) -> dict[str, Any]:
    """step_graph.record() of one rank of the job `parallel` (Note [One rank on the fake
    process group]): the graph document, with the job under "parallel"."""
    from . import step_graph
    if not step.get("training", True):
        raise MemTracerError("estimate(parallel=...) predicts a training step: give training=True")
    with _fake_process_group(parallel) as mesh:
        settings = parallel.settings
        if isinstance(settings, DDP):
            def wrap(copy: Any) -> Any:
                return _wrap_ddp(copy, settings, parallel.world_size)
            warmup = 2
        else:
            assert isinstance(settings, FSDP)

            def wrap(copy: Any) -> Any:
                return _wrap_fsdp(copy, settings, mesh)
            warmup = 1
        document = step_graph.record(model, example_inputs, wrap=wrap, warmup=warmup, **step)
    if isinstance(parallel.settings, DDP):
        _own_ddp_buckets(document)
    document["parallel"] = {"strategy": parallel.strategy, "world_size": parallel.world_size,
                            "rank": parallel.rank, "settings": _settings(parallel)}
    return document


# The owner a trace names DDP's gradient buckets by (Note [Owners that are not modules] in
# training.py): the estimate's module x category cells name them the same.
DDP_BUCKETS_OWNER = "<DDP buckets>"


def _own_ddp_buckets(document: dict[str, Any]) -> None:
    """DDP's buckets (the storages its all-reduce first wrote) owned by `<DDP buckets>`, as a
    trace owns them; a bucket that is the gradients (gradient_as_bucket_view) stays theirs."""
    for storage in document["storages"]:
        if (storage.get("collective") == "c10d::allreduce_" and "module" not in storage
                and storage["category"] != "gradient"):
            storage["module"] = DDP_BUCKETS_OWNER


def _settings(job: Job) -> dict[str, Any]:
    settings = job.settings
    if isinstance(settings, DDP):
        return {"bucket_cap_mb": settings.bucket_cap_mb,
                "gradient_as_bucket_view": settings.gradient_as_bucket_view}
    return {"reshard_after_forward": settings.reshard_after_forward,
            "modules": list(settings.modules) if settings.modules is not None else None}


def communication_at_peak(graph: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """The communication buffers live where the recorded step peaks (every storage live at
    once, as memtrace-estimate's training peak): for each kind, the bytes by category."""
    storages = graph["storages"]
    live = {index for index, storage in enumerate(storages) if storage["origin"] != "activation"}
    total = sum(storages[index]["bytes"] for index in live)
    peak, at_peak = total, set(live)
    for node in graph["nodes"]:
        for index in node["releases"]:
            live.discard(index)
            total -= storages[index]["bytes"]
        for index, _, _ in node["allocates"]:
            live.add(index)
            total += storages[index]["bytes"]
        if total > peak:
            peak, at_peak = total, set(live)
    found: dict[str, dict[str, int]] = {}
    for index in sorted(at_peak):
        storage = storages[index]
        collective = storage.get("collective")
        if collective is None:
            continue
        kind = _KINDS.get(collective, "other collectives")
        by_category = found.setdefault(kind, {})
        by_category[storage["category"]] = by_category.get(storage["category"], 0) + storage["bytes"]
    return found


def summary(graph: Mapping[str, Any], estimated: Mapping[str, Any]) -> dict[str, Any]:
    """What estimate()'s JSON says of the rank (its "parallel"): the job, its peaks (of
    `estimated`, memtrace-estimate's summary), and the communication buffers at the peak."""
    communication = communication_at_peak(graph)
    return {**graph["parallel"], "training_peak_bytes": estimated["training_peak_bytes"],
            "peak_allocated_bytes": estimated["peak_allocated_bytes"],
            "reserved_lower_bound": (graph["parallel"]["strategy"] == "fsdp"
                                     and graph.get("device") == "cuda"),
            "communication": {kind: {"bytes": sum(by_category.values()),
                                     "categories": by_category}
                              for kind, by_category in communication.items()}}


def record_other_ranks(document: dict[str, Any], model: Any, job: Job,
                       estimate_rank: Callable[[Job], Mapping[str, Any]]) -> None:
    """Where FSDP's shards are uneven, the last rank too (`estimate_rank(job)` estimates
    one): it holds the least, rank 0 the most, and the others lie between (Note [One rank on
    the fake process group]); `document["parallel"]` says which and why."""
    uneven = uneven_parameters(model, job.world_size) if job.strategy == "fsdp" else []
    if not uneven:
        return
    last = estimate_rank(replace(job, rank=job.world_size - 1))
    document["parallel"]["other_ranks"] = [last["parallel"]]
    document["parallel"]["uneven"] = (f"dim 0 of {', '.join(uneven[:4])}"
                                      f"{', ...' if len(uneven) > 4 else ''} is not a multiple "
                                      f"of {job.world_size}")


def first_step_buckets(model: Any, job: Job, device: str) -> list[int]:
    """The bytes of each bucket NCCL holds after DDP's first step (Note [NCCL holds DDP's
    first buckets]): one per dtype of the trainable parameters (DDP's first buckets have no
    size limit; a shared parameter counts once). None on the CPU (gloo), nor under FSDP2."""
    if job.strategy != "ddp" or device != "cuda":
        return []
    by_dtype: dict[Any, int] = {}
    for parameter in model.parameters():  # each parameter once, as DDP takes them
        if parameter.requires_grad:
            by_dtype[parameter.dtype] = (by_dtype.get(parameter.dtype, 0)
                                         + parameter.numel() * parameter.element_size())
    return [size for size in by_dtype.values() if size]


def with_first_step_buckets(graph: Mapping[str, Any], buckets: Sequence[int]) -> dict[str, Any]:
    """The graph document of the step with `buckets` live throughout, as NCCL holds them
    (a first node allocates them; nothing releases them)."""
    storages = list(graph["storages"])
    allocates = []
    for size in buckets:
        allocates.append([len(storages), [size], "uint8"])
        storages.append({"bytes": size, "origin": "activation", "category": "temporary",
                         "name": "DDP's first-step bucket, held by NCCL",
                         "collective": "c10d::allreduce_"})
    node = {"op": "memtrace::held_by_nccl", "phase": "none", "module": "", "stack": [],
            "releases": [], "allocates": allocates}
    return {**graph, "storages": storages, "nodes": [node, *graph["nodes"]]}


def held_summary(buckets: Sequence[int], estimated: Mapping[str, Any]) -> dict[str, Any]:
    """estimate()'s JSON "parallel"."held_by_nccl": the buckets, and the peaks of the step
    replayed with them (`estimated`: memtrace-estimate's summary of that)."""
    return {"bytes": sum(buckets), "buckets": list(buckets),
            **{key: estimated[key] for key in ("peak_requested_bytes", "peak_allocated_bytes",
                                               "peak_reserved_bytes")}}


def estimate_of(document: Mapping[str, Any]) -> ParallelEstimate | None:
    """Estimate.parallel, from estimate()'s JSON."""
    rank = document.get("parallel")
    if not rank:
        return None
    entries = [rank, *rank.get("other_ranks", [])]
    ranks = {int(entry["rank"]): int(entry["training_peak_bytes"]) for entry in entries}
    held = rank.get("held_by_nccl")
    return ParallelEstimate(
        strategy=rank["strategy"], world_size=rank["world_size"], settings=rank["settings"],
        communication={kind: entry["bytes"] for kind, entry in rank["communication"].items()},
        communication_categories={kind: entry["categories"]
                                  for kind, entry in rank["communication"].items()},
        ranks=ranks, uneven=rank.get("uneven"),
        reserved_lower_bound=bool(rank.get("reserved_lower_bound")),
        ranks_allocated={int(entry["rank"]): int(entry["peak_allocated_bytes"])
                         for entry in entries if "peak_allocated_bytes" in entry},
        held_by_nccl=None if held is None else HeldByNccl(
            bytes=int(held["bytes"]), buckets=tuple(int(size) for size in held["buckets"]),
            peak_requested_bytes=int(held["peak_requested_bytes"]),
            peak_allocated_bytes=int(held["peak_allocated_bytes"]),
            peak_reserved_bytes=int(held["peak_reserved_bytes"])))


__all__ = ["DDP", "FSDP", "HeldByNccl", "Job", "ParallelEstimate", "Strategy", "job",
           "record"]
