"""What a training step is, as estimate() and plan() predict it: one value object instead of
loose keyword options (TrainingStep), and the step the recording runs (RecordedStep)."""
from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import MemTracerError
from .parallel import DDP, FSDP, Job, Strategy, job

# What the training loop's own names hold (step_graph.LOOPS, Note [What the loop holds]): the
# output until the next step's forward rebinds it (`out = model(x)` in the loop's body, the
# default), until the loss is made (transformers' Trainer), or until the step ends.
Loop = Literal["until-next-forward", "until-loss", "until-step-end"]


@dataclass(frozen=True)
class TrainingStep:
    """One steady-state training step: forward, the loss (``loss_fn(output, *targets)``; by
    default the output's ``loss``, else the sum of its first floating-point tensor), backward,
    ``optimizer.step()`` and ``zero_grad(set_to_none=True)``, with ``accumulate`` micro-batches,
    ``autocast`` (a dtype: ``torch.bfloat16``) and a ``GradScaler`` (``scaler=True``).
    ``loop`` says what the training loop's own names hold (Loop). ``parallel`` ("ddp", "fsdp",
    mem_tracer.DDP(...), mem_tracer.FSDP(...)) with ``world_size`` makes it one rank's step of
    a job. Given to ``estimate(model, inputs, training=TrainingStep(...))``."""

    optimizer: Any = None
    loss_fn: Callable[..., Any] | None = None
    targets: Sequence[Any] = ()
    autocast: Any = None
    scaler: bool = False
    accumulate: int = 1
    loop: Loop = "until-next-forward"
    parallel: Strategy | DDP | FSDP | None = None
    world_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))


_FIELDS = tuple(field.name for field in dataclasses.fields(TrainingStep))


def training_step(training: bool | TrainingStep, options: Mapping[str, Any],
                  caller: str = "estimate") -> TrainingStep | None:
    """The step `training` names (None: not a training step), with the loose options of the
    old keyword form folded in, said deprecated with what to write instead."""
    unknown = sorted(set(options) - set(_FIELDS))
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    if isinstance(training, TrainingStep):
        if options:
            raise MemTracerError(f"{caller}(): give {', '.join(sorted(options))} inside "
                                 f"TrainingStep(...), not beside it")
        return training
    if options:
        given = ", ".join(f"{name}=..." for name in _FIELDS if name in options)
        warnings.warn(f"{caller}(training=True, {given}) is deprecated: write "
                      f"{caller}(..., training=mem_tracer.TrainingStep({given}))",
                      DeprecationWarning, stacklevel=3)
        if not training:
            if "parallel" in options and options["parallel"] is not None:
                raise MemTracerError(f"{caller}(parallel=...) predicts a training step: give "
                                     "training=True")
            return None
        return TrainingStep(**options)
    return TrainingStep() if training else None


@dataclass(frozen=True)
class RecordedStep:
    """What step_graph records: a training step (and the rank of its job, if any) or one
    no-grad forward."""

    training: bool
    step: TrainingStep
    job: Job | None = None

    @classmethod
    def of(cls, step: TrainingStep) -> RecordedStep:
        return cls(True, step, job(step.parallel, step.world_size)
                   if step.parallel is not None else None)

    def options(self) -> dict[str, Any]:
        """step_graph.record()'s keyword options for this step."""
        step = self.step
        return {"training": self.training, "loss_fn": step.loss_fn,
                "targets": tuple(step.targets), "optimizer": step.optimizer,
                "autocast": step.autocast, "scaler": step.scaler,
                "accumulate": step.accumulate, "loop": step.loop}

    def of_rank(self, other: Job) -> RecordedStep:
        return dataclasses.replace(self, job=other)


# Note [A forward that cannot be exported] (estimate.py): one forward, recorded.
FORWARD = RecordedStep(False, TrainingStep())
