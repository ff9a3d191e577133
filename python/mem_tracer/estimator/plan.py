"""plan(): the largest batch whose training step fits a memory budget, and which modules to
wrap in activation checkpointing to fit a larger one.

Every candidate batch is a training step recorded on fake tensors and estimated by
memtrace-estimate (estimate(training=True)): nothing runs, nothing is allocated. The search is
estimate(budget=...)'s: three recordings extended to the other batches where the step's graph is
affine in the batch, the answer then recorded to check it, every batch recorded otherwise (Note
[A budget search from three recordings]); Plan.search_note says which. Fitting is
decided by the estimator's replay of PyTorch's caching allocator on a device of the budget's
size, so rounding and segments count, not only the bytes the tensors ask for.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._modules import module_blocks
from ..errors import MemTracerError
from .estimate import (
    Device,
    _device_profile,
    _fits,
    _RecordedBatches,
    call_inputs,
)
from .parallel import DDP, FSDP, Strategy
from .training_step import Loop, RecordedStep, TrainingStep

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(size: int | str) -> int:
    """A byte count: an int, or "24GiB", "8 MiB", "1.5GB" (binary and decimal units, as
    memtrace-estimate --budget reads them)."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size <= 0:
            raise MemTracerError(f"plan(): the budget must be positive, not {size}")
        return size
    text = str(size).strip().lower().replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or value <= 0:
        raise MemTracerError(f"plan(): cannot read the budget {size!r} (say 24GiB or 8000000000)")
    return int(value * _UNITS[unit])


@dataclass
class Plan:
    """What plan() found. Batches are the size of the inputs' first dimension."""

    budget_bytes: int
    largest_batch: int | None  # without checkpointing; None: batch 1 does not fit
    peak_bytes: int | None  # the step's peak (requested) at largest_batch
    # checkpoint=True: the modules to wrap (their paths in named_modules()), the largest batch
    # that fits with them wrapped, and what the recomputation costs per step at that batch.
    checkpoint_modules: list[str] = field(default_factory=list)
    largest_batch_checkpointed: int | None = None
    peak_bytes_checkpointed: int | None = None
    recompute_flops: int = 0  # the wrapped modules' forward, run again in backward
    # How the batches were searched: extended from three recordings, or each recorded, and
    # why (Note [A budget search from three recordings]; estimate()'s search_note).
    search_note: str | None = None

    def apply(self, model: Any) -> Any:
        """Wraps the planned modules of `model` in torch.utils.checkpoint (non-reentrant), in
        place; returns the model."""
        return checkpoint_modules(model, self.checkpoint_modules)

    def __str__(self) -> str:
        def mib(size: int | None) -> str:
            return "-" if size is None else f"{size / 2**20:.2f} MiB"

        lines = [f"plan for a budget of {mib(self.budget_bytes)}: "
                 + (f"batch {self.largest_batch} ({mib(self.peak_bytes)} at the step's peak)"
                    if self.largest_batch else "not even batch 1 fits")]
        if self.checkpoint_modules:
            lines.append(f"  with activation checkpointing of {len(self.checkpoint_modules)} "
                         f"module(s) ({', '.join(self.checkpoint_modules[:6])}"
                         f"{', ...' if len(self.checkpoint_modules) > 6 else ''}): batch "
                         f"{self.largest_batch_checkpointed} ({mib(self.peak_bytes_checkpointed)}"
                         f"), recomputing {self.recompute_flops / 1e9:.3f} GFLOP a step")
        if self.search_note:
            lines.append(f"  batches: {self.search_note}")
        return "\n".join(lines)


def checkpoint_modules(model: Any, paths: Sequence[str]) -> Any:
    """Wraps each named module's forward in torch.utils.checkpoint.checkpoint (non-reentrant:
    the default PyTorch recommends), in place."""
    import torch.utils.checkpoint

    for path in paths:
        module = model.get_submodule(path)
        original = module.forward

        def forward(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            return torch.utils.checkpoint.checkpoint(_original, *args, use_reentrant=False,
                                                     **kwargs)

        module.forward = forward
    return model


def plan(model: Any, example_inputs: Sequence[Any] | Mapping[str, Any] = (), *,
         budget: int | str, optimizer: Any = None, loss_fn: Callable[..., Any] | None = None,
         targets: Sequence[Any] = (), example_kwargs: Mapping[str, Any] | None = None,
         autocast: Any = None, scaler: bool = False, accumulate: int = 1,
         checkpoint: bool = False, device: Device | os.PathLike[str] = "auto",
         limit: int = 1 << 16, loop: Loop = "until-next-forward",
         parallel: Strategy | DDP | FSDP | None = None, world_size: int | None = None) -> Plan:
    """The largest batch whose training step (as estimate(training=True) predicts it) fits
    ``budget`` (bytes, or "24GiB"), searched up to ``limit``; the example inputs' first
    dimension is the batch (they are repeated to make larger ones, on fake tensors).

    ``checkpoint=True`` also finds modules to wrap in activation checkpointing
    (torch.utils.checkpoint) to fit a larger batch: the model's blocks (the layers of its
    ModuleLists and Sequentials), all of them first (the largest batch checkpointing reaches),
    then as few as still fit that batch, each left out in turn; and what recomputing their
    forward in backward costs, in FLOPs (torch.utils.flop_counter's count). ``Plan.apply(model)``
    wraps them. ``loop`` and ``device`` are estimate()'s.

    ``parallel`` ("ddp", "fsdp", mem_tracer.DDP(...), mem_tracer.FSDP(...)) and ``world_size``
    plan one rank of a job, as estimate() predicts it: the batch is a rank's, and the rank that
    holds the most (rank 0) must fit."""
    budget_bytes = parse_bytes(budget)
    args, kwargs = call_inputs(example_inputs, example_kwargs)
    profile = _device_profile(device)
    step = RecordedStep.of(TrainingStep(
        optimizer=optimizer, loss_fn=loss_fn, targets=tuple(targets), autocast=autocast,
        scaler=scaler, accumulate=accumulate, loop=loop, parallel=parallel,
        world_size=world_size))
    with tempfile.TemporaryDirectory(prefix="mem_tracer-plan-") as temporary:
        work = Path(temporary)

        def batches(modules: Sequence[str] = ()) -> _RecordedBatches:
            """The step's estimates at any batch, with `modules` checkpointed (Note [A budget
            search from three recordings], as estimate(budget=...) searches)."""
            prepare = (lambda copy: checkpoint_modules(copy, modules)) if modules else None
            return _RecordedBatches(model, args, kwargs, profile, step, work, prepare=prepare)

        plain = batches()
        largest, said = plain.largest(budget_bytes, limit)
        notes = [f"the budget search {said}"]
        result = Plan(budget_bytes, largest,
                      plain.recorded(largest, budget_bytes)["summary"]["peak_requested_bytes"]
                      if largest else None, search_note=notes[0])
        if not checkpoint:
            return result
        blocks = module_blocks(model)
        if not blocks:
            raise MemTracerError("plan(): found no modules to checkpoint (no ModuleList, "
                                 "Sequential or child module with parameters)")
        reached, said = batches(blocks).largest(budget_bytes, limit)
        notes.append(f"with every block checkpointed, the budget search {said}")
        result.search_note = "; ".join(notes)
        if reached is None or (largest is not None and reached <= largest):
            return result  # checkpointing does not fit a larger batch
        chosen = list(blocks)
        for block in list(blocks):  # as few as still fit that batch: one recording each
            fewer = [other for other in chosen if other != block]
            if fewer and _fits(batches(fewer).recorded(reached, budget_bytes))[0]:
                chosen = fewer
        with_checkpoints = batches(chosen).recorded(reached, budget_bytes)
        without = plain.recorded(reached, budget_bytes)
        result.checkpoint_modules = chosen
        result.largest_batch_checkpointed = reached
        result.peak_bytes_checkpointed = with_checkpoints["summary"]["peak_requested_bytes"]
        result.recompute_flops = max(0, with_checkpoints["summary"]["total_flops"]
                                     - without["summary"]["total_flops"])
        return result
