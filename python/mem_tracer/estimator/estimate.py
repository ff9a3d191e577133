"""estimate(): the estimator's prediction of a model's GPU memory, before running it, and the
report that puts it beside a measurement (report_stats(predict=...)).

The estimator (memtrace-estimate) reads TorchScript IR, or a graph recorded on fake tensors, on
the CPU. estimate() scripts the model (torch.jit.script), or traces it (torch.jit.trace) when
scripting fails, saves it, and runs the estimator on the example inputs' shapes and dtypes;
with method="record" it records one forward on fake tensors instead, and calls none of
TorchScript's entry points (Note [Choosing the front end]). docs/estimate-format.md describes
the numbers."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .. import _native, _torch_internals
from ..errors import MemTracerError, first_line
from .parallel import ParallelEstimate, estimate_of
from .step_recorder import EXAMPLE_VALUE
from .torchscript_export import (
    Method,
    _data_dependent_options,
    _input_spec,
    _is_shape,
    _NotExportable,
    _to_torchscript,
    trace_model,
)
from .training_step import FORWARD, Loop, RecordedStep, TrainingStep, training_step

__all__ = ["ApproximateBracket", "BatchPoint", "Device", "Estimate", "FrontEnd", "LineEntry", "Loop",
           "Method", "ModuleEntry", "Semantics", "TrainingStep", "call_inputs", "estimate", "trace_model",
           "write_prediction"]

# How long a value lives: as the eager nn.Module keeps it (Python names) or as the TorchScript
# interpreter does (freed at last use); memtrace-estimate's --semantics.
Semantics = Literal["eager", "torchscript"]
# memtrace-estimate's device profiles (`memtrace-estimate --list-devices`), or "auto": the GPU
# in hand. A profile of one's own is a .json file, given as a path object.
Device = Literal["auto", "cuda", "cuda-sm90", "cuda-no-cublas-workspace", "cpu"]
# How estimate() reaches a graph (Note [Choosing the front end]): "auto" (a module's forward
# recorded on fake tensors, TorchScript where only it gives what is asked), "record" (fake
# tensors only: no TorchScript at all) or "torchscript" (scripted, else traced).
FrontEnd = Literal["auto", "record", "torchscript"]
FRONT_ENDS: tuple[str, ...] = ("auto", "record", "torchscript")


@dataclass
class LineEntry:
    """Bytes the estimator predicts live at its peak, made on one source line."""

    file: str | None
    line: int | None
    function: str | None
    bytes: int
    tensors: int


@dataclass
class ModuleEntry:
    """Bytes the estimator predicts live at its peak, made inside one nn.Module (its path as
    named_modules() gives it; "" is the root module)."""

    module_path: str
    bytes: int
    tensors: int


@dataclass
class BatchPoint:
    """The prediction at one batch size (estimate(batch_sizes=...))."""

    batch: int
    peak_requested_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    lower_bound: bool


@dataclass
class ApproximateBracket:
    """Calls whose memory the device's library chooses and the recording can only bound
    (cuDNN's RNNs in training: Note [cuDNN's RNN reserve, bracketed] in device_kernels.py):
    max_memory_allocated()'s peak lies between
    peak_allocated_low_bytes and peak_allocated_high_bytes (the figure less over_by, plus
    under_by), as far as those calls go."""

    calls: int
    over_by_at_most_bytes: int
    under_by_at_most_bytes: int
    peak_allocated_low_bytes: int
    peak_allocated_high_bytes: int


# Note [The training figures named]
# A user holds an estimate against torch.cuda.max_memory_allocated(). For a training step the
# estimate used to lead with training_peak_bytes, the six categories' sum at the step's peak:
# on every transformers model on sm90 it is 64 MiB below max_memory_allocated(), cuBLAS's two
# 32 MiB workspaces (forward's thread and backward's), which belong to no category. So
# str(Estimate) now leads with the figure named max_memory_allocated() (peak_allocated_bytes:
# the categories, the workspaces and the caching allocator's rounding), then requested_bytes'
# peak and max_memory_reserved(); the categories' sum is training_categories_peak_bytes, said
# "the categories' sum", with the workspaces beside it (training_workspace_bytes =
# peak_requested_bytes - training_categories_peak_bytes). training_peak_bytes still answers,
# with a DeprecationWarning naming both figures. The JSON's summary.training_peak_bytes keeps
# its name (docs/estimate-format.md defines it as the categories' sum).
@dataclass
class Estimate:
    """What one forward pass of the model is predicted to take on a GPU. Sizes in bytes."""

    # The front end: "record" (recorded on fake tensors), "script" or "trace" (exported to
    # TorchScript), or "file" (a saved .pt); Note [Choosing the front end].
    method: Method
    method_note: str  # why, in a sentence (e.g. why TorchScript was needed, why scripting failed)
    # The TorchScript file the estimator read: the file given, or estimate(keep_model=...)'s;
    # None when estimate() exported the model to a temporary file, deleted when it returned.
    model_path: Path | None
    semantics: Semantics  # "eager" (Python frees tensors) or "torchscript" (freed at last use)
    peak_requested_bytes: int  # torch.cuda.memory_stats()["requested_bytes.all.peak"]
    peak_allocated_bytes: int  # torch.cuda.max_memory_allocated()
    peak_reserved_bytes: int  # torch.cuda.max_memory_reserved()
    activation_peak_bytes: int  # the forward's own tensors, at their peak
    weight_bytes: int  # parameters, buffers and constants
    input_bytes: int
    lower_bound: bool  # some sizes were unknown: the true peak may be higher
    # The tables and the JSON are left out of repr(), which they would make thousands of
    # characters long; str() summarizes them.
    by_line: list[LineEntry] = field(repr=False)  # live at the peak, by innermost frame
    # live at the peak, by innermost frame in user code
    by_user_line: list[LineEntry] = field(repr=False)
    by_module: list[ModuleEntry] = field(repr=False)
    batches: list[BatchPoint] = field(default_factory=list, repr=False)  # with batch_sizes
    largest_batch: int | None = None  # with budget: the largest batch that fits
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # the estimator's JSON
    path: Path | None = None  # that JSON's file
    # training=True: the six categories' sum at the step's peak (parameters, gradients,
    # optimizer state, activations, inputs, temporaries: every storage of the step live then),
    # and each of them. Not max_memory_allocated(): that is peak_allocated_bytes, which also
    # holds the library workspaces (cuBLAS's, cuBLASLt's), outside the categories:
    # training_workspace_bytes (Note [The training figures named]).
    training_categories_peak_bytes: int | None = None
    training_breakdown: dict[str, int] | None = None
    optimizer_state_bytes: int = 0
    training_peak_phase: str | None = None  # "forward", "backward", "optimizer" or "none"
    # training=True: what the recorded step ran and assumed: the optimizer's implementation on
    # the device ("foreach", "fused", "for-loop"), and the loop (LOOPS[loop] says it).
    optimizer_implementation: str | None = None
    loop: Loop | None = None
    # parallel=: one rank of a DDP or FSDP job (its communication buffers, the ranks recorded).
    parallel: ParallelEstimate | None = None
    # batch_sizes= or budget= of a recorded estimate: how the other batches were made (each
    # recorded, or extended from three recordings: Note [A budget search from three
    # recordings]); None otherwise.
    search_note: str | None = field(default=None, repr=False)
    # Some call recorded otherwise than the device runs it: the figure is approximate, within
    # this bracket (None: no such call).
    approximate: ApproximateBracket | None = None

    @property
    def training_workspace_bytes(self) -> int | None:
        """training=True: the bytes at the step's peak outside the six categories, the library
        workspaces (cuBLAS's: 32 MiB a stream on sm90, forward's and backward's threads):
        peak_requested_bytes less training_categories_peak_bytes."""
        if self.training_categories_peak_bytes is None:
            return None
        return self.peak_requested_bytes - self.training_categories_peak_bytes

    @property
    def training_peak_bytes(self) -> int | None:
        """Deprecated: training_categories_peak_bytes, the name that says what it is."""
        import warnings
        warnings.warn("Estimate.training_peak_bytes is the categories' sum at the step's peak, "
                      "without the library workspaces: it is now named "
                      "training_categories_peak_bytes (max_memory_allocated() is "
                      "peak_allocated_bytes)", DeprecationWarning, stacklevel=2)
        return self.training_categories_peak_bytes

    def __str__(self) -> str:
        def mib(size: int) -> str:
            return f"{size / 2**20:.2f} MiB"

        # Note [The training figures named]: the first figure is max_memory_allocated()'s.
        what = "one training step" if self.training_categories_peak_bytes is not None else \
            f"{self.semantics} semantics"
        lines = [f"memtrace-estimate ({what}): max_memory_allocated() "
                 f"{mib(self.peak_allocated_bytes)}, requested_bytes peak "
                 f"{mib(self.peak_requested_bytes)}, max_memory_reserved() "
                 f"{mib(self.peak_reserved_bytes)}"
                 + (" (a lower bound: some sizes were unknown)" if self.lower_bound else "")
                 + (f" (approximate: between {mib(self.approximate.peak_allocated_low_bytes)} "
                    f"and {mib(self.approximate.peak_allocated_high_bytes)}, "
                    f"{self.approximate.calls} call(s) not recorded as the device runs them)"
                    if self.approximate is not None else ""),
                 (f"  weights {mib(self.weight_bytes)}, inputs {mib(self.input_bytes)}, "
                  f"activations at their peak {mib(self.activation_peak_bytes)}"),
                 f"  front end: {self.method}: {self.method_note}"]
        if self.method != "record":
            lines.append(f"  model file: {self.model_path}" if self.model_path is not None else
                         "  model file: none kept (estimate(..., keep_model=PATH) keeps it)")
        if self.training_categories_peak_bytes is not None and self.training_breakdown is not None:
            from .step_graph import LOOPS
            lines.append(f"  at the step's peak (in the {self.training_peak_phase} phase): the "
                         f"categories' sum {mib(self.training_categories_peak_bytes)} (" + ", ".join(
                             f"{name} {mib(size)}" for name, size in self.training_breakdown.items())
                         + f"), and library workspaces {mib(self.training_workspace_bytes or 0)}"
                         " beside them")
            if self.optimizer_implementation:
                lines.append(f"  the optimizer as the device runs it: "
                             f"{self.optimizer_implementation}")
            if self.loop is not None:
                lines.append(f"  assumed loop={self.loop!r}: {LOOPS[self.loop]}")
            if self.parallel is not None:
                lines.append(str(self.parallel))
        for assumption in self.raw.get("assumptions") or ():
            if assumption.get("kind") == EXAMPLE_VALUE:  # Note [The example's mask, said ...]
                frame = assumption.get("frame") or {}
                where = f"{frame['file']}:{frame['line']}: " if frame else ""
                lines.append(f"  assumed from the example: {where}{assumption['detail']}")
        if self.batches:
            shown = self.batches[:8]  # a summary: Estimate.batches has them all
            lines.append("  by batch: " + ", ".join(
                f"{point.batch}: {mib(point.peak_reserved_bytes)} reserved" for point in shown)
                + (", ..." if len(self.batches) > len(shown) else ""))
        if self.largest_batch is not None:
            lines.append(f"  the largest batch within the budget: {self.largest_batch}")
        if self.search_note:
            lines.append(f"  other batches: {self.search_note}")
        if self.by_user_line:
            lines.append("  live at the peak, by line of your code:")
        for entry in self.by_user_line[:5]:
            lines.append(f"  {mib(entry.bytes):>12}  {entry.file}:{entry.line} ({entry.function})")
        return "\n".join(lines)


def _run_estimator(model_path: Path, inputs: list[str], extra: list[str], out: Path) -> dict[str, Any]:
    command = [str(_native.estimator_path()), str(model_path),
               *(arg for spec in inputs for arg in ("--input", spec)),
               "--format", "json", "--output", str(out), "--force", *extra]
    result = subprocess.run(command, capture_output=True, text=True, check=False,
                            env=_native.estimator_environment())
    if result.returncode != 0:
        stderr = result.stderr.strip()
        message = stderr.splitlines()[-1] if stderr else f"exited {result.returncode}"
        raise MemTracerError(f"estimate(): {message.removeprefix('memtrace-estimate: error: ')}")
    document: dict[str, Any] = json.loads(out.read_text())
    return document


def _lines(entries: list[dict[str, Any]]) -> list[LineEntry]:
    return [LineEntry(e.get("file"), e.get("line"), e.get("function"), e["bytes"], e.get("tensors", 0))
            for e in entries]


def _device_profile(device: Device | os.PathLike[str]) -> str:
    """"auto": the profile of the GPU PyTorch sees, or "cuda" without one. cuBLAS keeps 32 MiB
    on compute capability 9.0, and from torch 2.12 on also on 10.x to 12.x (Blackwell); 8.125
    MiB elsewhere (the cuda-sm90 profile's source says where this was read)."""
    if device != "auto":
        return os.fspath(device)
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            from .._torch_internals import torch_release
            release = torch_release(torch.__version__)
            if (major, minor) == (9, 0) or (9 <= major <= 12 and release >= (2, 12)):
                return "cuda-sm90"
    except Exception:  # noqa: BLE001 - no usable CUDA: the default profile
        return "cuda"
    return "cuda"


def estimate(model: Any, example_inputs: Sequence[Any] | Mapping[str, Any] = (),
             batch_sizes: Sequence[int] | None = None, budget: int | str | None = None, *,
             example_kwargs: Mapping[str, Any] | None = None, semantics: Semantics = "eager",
             device: Device | os.PathLike[str] = "auto",
             output: str | os.PathLike[str] | None = None,
             keep_model: str | os.PathLike[str] | None = None,
             assume_worst_case: bool = False, training: bool | TrainingStep = False,
             method: FrontEnd = "auto", **training_options: Any) -> Estimate:
    """Predicts the GPU memory of one forward pass (or, with ``training=True``, of one training
    step), without running it on a GPU.

    ``model``: an nn.Module or the path of a saved TorchScript file. By default
    (``method="auto"``) a module's forward is recorded once on fake tensors, as Python runs it
    (eager semantics), calling nothing of TorchScript, which torch deprecates; TorchScript is
    taken where only it gives what is asked: a saved ``.pt`` file, ``semantics="torchscript"``,
    ``keep_model=``, ``assume_worst_case=True``, shapes instead of example tensors, or a forward
    the recording fails on (Note [Choosing the front end]). ``method="torchscript"`` scripts
    the module (torch.jit.script), or traces it with torch.jit.trace(strict=False) when that
    fails; ``method="record"`` records and refuses what it cannot give.
    ``Estimate.method`` and ``Estimate.method_note`` (and ``str(Estimate)``) say which front end
    ran and why. A ``budget`` search on a recording extends recordings at batches 2, 3 and 4 and
    records its answer to check it (Note [A budget search from three recordings];
    ``Estimate.search_note`` says so).
    ``example_inputs``: one per positional ``forward`` argument, tensors (their shape and
    dtype are used) or shapes; or a dict of keyword inputs (a tokenizer's output).
    ``example_kwargs``: keyword inputs (``attention_mask=...``); non-tensor ones
    (``use_cache=False``) are fixed in the trace.
    ``batch_sizes`` sweeps the batch dimension (``Estimate.batches``); ``budget`` (bytes, or
    a string such as "24GiB") finds the largest batch that fits (``Estimate.largest_batch``).
    Data-dependent ops (nonzero, boolean masks, where(cond), MoE routing): with example tensors,
    the model runs once on them and their counts size those ops (scaled to other batches);
    ``assume_worst_case=True`` bounds them instead (every element selected). The estimate's
    assumptions say which. Where the example's all-ones ``attention_mask`` let transformers
    drop the mask, the assumptions say so (kind ``example_value``) with what a padded batch,
    which keeps it, adds; a training step with ``assume_worst_case=True`` takes the costlier
    of the two (Note [The example's mask, said with what keeping it costs]).
    ``semantics``: "eager" (default; what Python runs) or "torchscript". ``device``: a
    profile of memtrace-estimate (``cuda``, ``cuda-sm90``, ``cuda-no-cublas-workspace``), or
    "auto" for the GPU in hand, or the path of a profile .json. ``output`` keeps the
    estimator's JSON there (memtrace-report --estimate reads it), replacing a file of that name.
    ``keep_model``: where to keep the TorchScript the model was exported to (then
    ``Estimate.model_path`` names it, for memtrace-estimate and ``memtrace plan``). Without it
    the export is a temporary file, deleted before estimate() returns: ``model_path`` is
    None, and so is the JSON's ``"model"``.

    ``training=mem_tracer.TrainingStep(optimizer=..., loss_fn=..., targets=...)`` predicts one
    steady-state training step instead (``training=True``: TrainingStep(), no optimizer), as
    TrainingStep says: forward, the loss, backward, ``optimizer.step()`` and
    ``zero_grad(set_to_none=True)``, its micro-batches, autocast, GradScaler and, with
    ``parallel=``, one rank of a DDP or FSDP job. The step's options given to estimate() itself
    (``training=True, optimizer=opt, ...``, the form before TrainingStep) still work, with a
    DeprecationWarning saying what to write. The step is recorded on fake
    tensors (no memory, no compute; mem_tracer.estimator.step_graph) and estimated by
    memtrace-estimate:
    ``Estimate.peak_allocated_bytes`` is its ``max_memory_allocated()``;
    ``Estimate.training_categories_peak_bytes`` and ``Estimate.training_breakdown`` (parameter,
    gradient, optimizer_state, activation, input, temporary) the categories' sum at its peak and
    each of them, ``Estimate.training_workspace_bytes`` the library workspaces beside them, ``batch_sizes`` and
    ``budget`` record it again per batch. The step runs what the ``device`` profile's device
    runs, wherever the model is: the optimizer's implementation PyTorch picks there (foreach by
    default on CUDA; ``Estimate.optimizer_implementation``), its sdpa kernel and dropout.
    TrainingStep's ``loop`` says what the training loop's own names hold:
    ``"until-next-forward"`` (default:
    ``out = model(x); loss = f(out, y)`` in the loop's body, as PyTorch's examples write it; the
    output lives into the next step's forward), ``"until-loss"`` (``loss = f(model(x), y)``,
    or a function returning the loss, as transformers' Trainer), ``"until-step-end"`` (a
    train_step function, or ``del out, loss`` after zero_grad); str(Estimate) says it. A ``model`` path ending in ``.pt2`` (torch.export)
    is recorded the same way, one forward."""
    if semantics not in ("eager", "torchscript"):
        raise MemTracerError(f"estimate(): semantics must be 'eager' or 'torchscript', not {semantics!r}")
    step = training_step(training, training_options)
    _native.estimator_path()  # without torch, say so in one line before anything imports it
    example_inputs, kwargs = call_inputs(example_inputs, example_kwargs)
    if not example_inputs and not kwargs:
        raise MemTracerError("estimate(): give example inputs (positional, a dict, or example_kwargs)")
    if method not in FRONT_ENDS:
        raise MemTracerError(f"estimate(): method must be one of {', '.join(FRONT_ENDS)}, "
                             f"not {method!r}")
    if step is not None or _is_export_archive(model):
        if method == "torchscript":
            raise MemTracerError("estimate(): method='torchscript' exports a forward; a training "
                                 "step and a torch.export archive are recorded on fake tensors")
        return _estimate_recorded(
            model, example_inputs, kwargs, profile=_device_profile(device), output=output,
            batch_sizes=batch_sizes, budget=budget,
            step=RecordedStep.of(step) if step is not None else FORWARD,
            worst_case=assume_worst_case)
    if method == "record":
        _refuse_for_recording(model, semantics, keep_model, assume_worst_case, example_inputs,
                              kwargs)
    if method == "auto":
        # Note [Choosing the front end]
        needs = _needs_torchscript(model, semantics, keep_model, assume_worst_case,
                                   example_inputs, kwargs)
        if needs is None:
            try:
                return _estimate_recorded(
                    model, example_inputs, kwargs, profile=_device_profile(device),
                    output=output, batch_sizes=batch_sizes, budget=budget, step=FORWARD,
                    note=RECORDED_NOTE, fallible=True)
            except _NotRecordable as error:
                # Hidden from nobody: method_note says the recording failed, and why.
                reason = str(error).removeprefix(f"{FORWARD_FAILED}: ")
                fallback = f"{FORWARD_FAILED} ({reason}), so TorchScript instead"
                return _estimate_exported(
                    model, example_inputs, kwargs, batch_sizes=batch_sizes, budget=budget,
                    semantics=semantics, device=device, output=output, keep_model=keep_model,
                    assume_worst_case=assume_worst_case, why=fallback)
        return _estimate_exported(model, example_inputs, kwargs, batch_sizes=batch_sizes,
                                  budget=budget, semantics=semantics, device=device,
                                  output=output, keep_model=keep_model,
                                  assume_worst_case=assume_worst_case, why=needs)
    if method == "record":
        return _estimate_recorded(
            model, example_inputs, kwargs, profile=_device_profile(device), output=output,
            batch_sizes=batch_sizes, budget=budget, step=FORWARD, note=RECORDED_NOTE)
    return _estimate_exported(model, example_inputs, kwargs, batch_sizes=batch_sizes,
                              budget=budget, semantics=semantics, device=device, output=output,
                              keep_model=keep_model, assume_worst_case=assume_worst_case,
                              why="method='torchscript'")


RECORDED_NOTE = "recorded on fake tensors: one forward as Python runs it, without TorchScript"
# How a forward's recording that failed begins (step_graph._Step.record says "step" for a
# training step): method_note of the TorchScript that stands in quotes it once.
FORWARD_FAILED = "recording the forward on fake tensors failed"


# Note [Choosing the front end]
# TorchScript is deprecated upstream: torch.jit.script warns on every call from torch 2.14
# ("switch to torch.compile or torch.export"). So estimate() of an nn.Module records one forward
# on fake tensors by default (method="auto"): the front end the training step already uses
# (Note [A forward that cannot be exported]), which runs any Python, gives Python's own
# lifetimes (eager semantics by construction, no bracket where an export names a value
# nowhere) and calls nothing deprecated. We chose it over torch.export because it needs no
# export to succeed (graph breaks, dict outputs, data-dependent shapes, a Python
# autograd.Function all record as they run) and its figures are the training step's, already
# held against the CPU and the simulated card. TorchScript stays where only it gives what is
# asked, and method="auto" takes it per request, saying why in method_note:
#   - a saved TorchScript file (.pt), as the command line reads it;
#   - semantics="torchscript" (the interpreter's frees at last use);
#   - keep_model= (a TorchScript file for memtrace-estimate and `memtrace plan`);
#   - assume_worst_case=True (the C++ bounds data-dependent ops; the recording sizes them by
#     the example it runs on);
#   - shapes instead of example tensors (a recording needs values to run on).
# If the recording itself fails (an op fake tensors cannot run), auto falls back to TorchScript
# and method_note says so. method="torchscript" asks for the former default (script, else
# trace); method="record" for the recording, refusing what it cannot give. memtrace's own
# TorchScript calls hide torch's deprecation warnings: they are not the user's to act on.
# Batches: the C++ sweeps a TorchScript file's batches in one process, but a recorded graph
# has its shapes fixed: each batch is a recording (0.4 s on a small GPT-2) and a call of
# memtrace-estimate (0.7 s, most of it loading LibTorch); a budget search tries tens of
# batches, so it is made from three recordings instead (Note [A budget search from three
# recordings]).
def _needs_torchscript(model: Any, semantics: Semantics,
                       keep_model: str | os.PathLike[str] | None, assume_worst_case: bool,
                       args: list[Any], kwargs: Mapping[str, Any]) -> str | None:
    """Why method="auto" takes TorchScript for this request (a phrase), or None to record."""
    if isinstance(model, (str, os.PathLike)):
        return "a saved TorchScript file"
    if semantics != "eager":
        return "semantics='torchscript' asks for the TorchScript interpreter's lifetimes"
    if keep_model is not None:
        return "keep_model= asks for a TorchScript file"
    if assume_worst_case:
        return "assume_worst_case=True bounds data-dependent ops in the TorchScript estimator"
    if any(_is_shape(value) for value in [*args, *kwargs.values()]):
        return "shapes, not example tensors, cannot be recorded"
    return None


def _refuse_for_recording(model: Any, semantics: Semantics,
                          keep_model: str | os.PathLike[str] | None,
                          assume_worst_case: bool, args: list[Any],
                          kwargs: Mapping[str, Any]) -> None:
    """MemTracerError when estimate(method="record") is asked for what only TorchScript gives."""
    if isinstance(model, (str, os.PathLike)):
        raise MemTracerError("estimate(): method='record' records a module's forward; a saved "
                             "TorchScript file is read as it is (method='auto')")
    if any(_is_shape(value) for value in [*args, *kwargs.values()]):
        raise MemTracerError("estimate(): method='record' runs the forward on example tensors; "
                             "shapes need method='auto' or 'torchscript'")
    if semantics != "eager":
        raise MemTracerError("estimate(): method='record' gives eager semantics only (the "
                             "forward as Python runs it); semantics='torchscript' needs method='auto'")
    if keep_model is not None:
        raise MemTracerError("estimate(): method='record' makes no TorchScript file to keep; "
                             "keep_model= needs method='auto'")
    if assume_worst_case:
        raise MemTracerError("estimate(): method='record' sizes data-dependent ops by the example "
                             "inputs it runs on; assume_worst_case=True needs method='auto'")


def _estimate_exported(model: Any, example_inputs: list[Any], kwargs: dict[str, Any], *,
                       batch_sizes: Sequence[int] | None, budget: int | str | None,
                       semantics: Semantics, device: Device | os.PathLike[str],
                       output: str | os.PathLike[str] | None,
                       keep_model: str | os.PathLike[str] | None,
                       assume_worst_case: bool, why: str) -> Estimate:
    """estimate() of a forward exported to TorchScript (scripted, traced, or a file) and read by
    memtrace-estimate; recorded on fake tensors instead where no exporter takes it (Note [A
    forward that cannot be exported])."""
    with tempfile.TemporaryDirectory(prefix="mem_tracer-") as temporary:
        work = Path(temporary)
        export = Path(keep_model) if keep_model is not None else work / "model.pt"
        try:
            method, note, model_path, ordered, wrapped = _to_torchscript(
                model, example_inputs, export, kwargs)
            if method != "file":
                note = f"{note} (TorchScript: {why})"
        except _NotExportable as error:
            # Note [A forward that cannot be exported]
            return _estimate_recorded(
                model, example_inputs, kwargs, profile=_device_profile(device), output=output,
                batch_sizes=batch_sizes, budget=budget, step=FORWARD,
                note=("recorded on fake tensors: one forward as Python runs it, eager "
                      f"semantics ({error})"))
        inputs = [_input_spec(value) for value in ordered]
        # The torch the model runs under is this one, whatever LibTorch memtrace-estimate links:
        # the profile's rules that depend on the release (gqa_from_torch) follow it.
        options = ["--semantics", semantics, "--device", _device_profile(device),
                   "--torch", "{}.{}".format(*_torch_internals.torch_release())]
        options += _data_dependent_options(model, example_inputs, kwargs, assume_worst_case, work)
        json_path = Path(output) if output is not None else work / "estimate.json"
        document = _run_estimator(model_path, inputs, options, json_path)
        approximate = document.get("eager_approximate")
        if approximate and method != "file":
            # Note [A forward that cannot be exported]: Python's lifetimes, recorded, for the
            # values the export left without a name.
            return _estimate_recorded(
                model, example_inputs, kwargs, profile=_device_profile(device), output=output,
                batch_sizes=batch_sizes, budget=budget, step=FORWARD,
                note=("recorded on fake tensors: one forward as Python runs it, eager semantics "
                      f"(the {'scripted' if method == 'script' else 'traced'} model left how long "
                      f"Python holds {approximate['unnamed_values']} value(s) unknown)"))
        kept = method == "file" or keep_model is not None
        if not kept:
            # The JSON must not name a file that is gone when the user (or the HTML page)
            # reads it.
            document["model"] = None
            if output is not None:
                json_path.write_text(json.dumps(document, indent=2) + "\n")
        result = _estimate_from(document, method, note,
                                json_path if output is not None else None,
                                model_path=Path(model_path).resolve() if kept else None,
                                wrapped=wrapped)
        if batch_sizes or budget is not None:
            sweep_options = list(options)
            if batch_sizes:
                sweep_options += ["--batch", ",".join(str(int(b)) for b in batch_sizes)]
            if budget is not None:
                sweep_options += ["--budget", str(budget)]
            sweep = _run_estimator(model_path, inputs, sweep_options, work / "sweep.json")
            result.batches = [BatchPoint(p["batch"], p["summary"]["peak_requested_bytes"],
                                         p["summary"]["peak_allocated_bytes"],
                                         p["summary"]["peak_reserved_bytes"], bool(p.get("lower_bound")))
                              for p in sweep.get("sweep", [])]
            if sweep.get("budget"):
                result.largest_batch = sweep["budget"].get("largest_batch")
        return result


def call_inputs(example_inputs: Sequence[Any] | Mapping[str, Any] | Any,
                example_kwargs: Mapping[str, Any] | None) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword inputs of one call, however they were given: a sequence of
    positional ones, one input alone, or a dict of keyword ones (a tokenizer's output), with
    `example_kwargs` added."""
    kwargs = dict(example_kwargs or {})
    if isinstance(example_inputs, Mapping):
        return [], {**example_inputs, **kwargs}
    if not isinstance(example_inputs, (tuple, list)):
        return [example_inputs], kwargs
    return list(example_inputs), kwargs


def _is_export_archive(model: Any) -> bool:
    return isinstance(model, (str, os.PathLike)) and os.fspath(model).endswith(".pt2")


def _record_and_estimate(model: Any, args: list[Any], kwargs: Mapping[str, Any], profile: str,
                         step: RecordedStep, work: Path, json_path: Path,
                         batch: int | None = None, budget: int | str | None = None,
                         prepare: Callable[[Any], Any] | None = None,
                         held: bool = False, worst_case: bool = False) -> dict[str, Any]:
    """The estimator's JSON of the step recorded on fake tensors (of one rank of a job, with
    step.job: mem_tracer.estimator.parallel; `held`: with what NCCL can hold beside it, Note
    [NCCL holds DDP's first buckets]); where the example's attention mask was dropped, with
    what keeping it costs (`worst_case`: the costlier of the two; Note [The example's mask,
    said with what keeping it costs] in known_values.py)."""
    from . import parallel, step_graph
    job = step.job
    try:
        if job is None:
            document = step_graph.record(model, args, example_kwargs=kwargs, profile=profile,
                                         batch=batch, prepare=prepare, **step.options())
        else:
            document = parallel.record(model, args, example_kwargs=kwargs, profile=profile,
                                       batch=batch, prepare=prepare, parallel=job,
                                       **step.options())
    except step_graph.StepGraphError as error:
        raise MemTracerError(f"estimate(): {error}") from error
    graph = step_graph.write(document, work / f"step-{batch or 0}.json")
    options = ["--device", profile]
    if budget is not None:
        options += ["--budget", str(budget)]
    result = _run_estimator(graph, [], options, json_path)
    if job is None and document.get("example_value_assumptions"):
        kept = step_graph.record(model, args, example_kwargs=kwargs, profile=profile,
                                 batch=batch, prepare=prepare, read_example_masks=False,
                                 **step.options())
        other = _run_estimator(step_graph.write(kept, work / f"step-{batch or 0}-kept.json"), [],
                               options, work / f"kept-{batch or 0}.json")
        result = _example_masks_said(document, result, other, worst_case)
    elif document.get("example_value_assumptions"):  # a rank of a job: said, not costed
        result = _example_masks_said(document, result, None, worst_case)
    if job is not None:
        result["parallel"] = parallel.summary(document, result["summary"])
        buckets = parallel.first_step_buckets(model, job, document["device"]) if held else []
        if buckets:
            graph = step_graph.write(parallel.with_first_step_buckets(document, buckets),
                                     work / f"step-{batch or 0}-held.json")
            replayed = _run_estimator(graph, [], ["--device", profile],
                                      work / f"held-{batch or 0}.json")
            result["parallel"]["held_by_nccl"] = parallel.held_summary(buckets,
                                                                       replayed["summary"])
    return result


def _example_masks_said(document: Mapping[str, Any], dropped: dict[str, Any],
                        kept: dict[str, Any] | None, worst_case: bool) -> dict[str, Any]:
    """The estimator's JSON of the step as the example's mask decided it (`dropped`) or, with
    `worst_case` where it is costlier, of the step with the mask kept (`kept`; None: a rank of
    a parallel job, whose other branch is not recorded), with an assumption a place where a
    read of the example's values dropped a mask (Note [The example's mask, said with what
    keeping it costs] in known_values.py)."""
    added = None if kept is None else \
        kept["summary"]["peak_allocated_bytes"] - dropped["summary"]["peak_allocated_bytes"]
    taken = worst_case and added is not None and added > 0
    frames = document["frames"]
    rows = []
    for row in document["example_value_assumptions"]:
        stack = [dict(zip(("file", "line", "function"), frames[index])) for index in row["stack"]]
        # The model's line: the first frame outside masking_utils, which asked for the mask.
        caller = next((frame for frame in stack
                       if not frame["file"].endswith("masking_utils.py")), None)
        rows.append({
            "kind": row["kind"], "op": row["op"], "frame": caller, "stack": stack,
            "detail": row["detail"] + (
                "; what keeping the mask costs is not recorded for a rank of a parallel job"
                if added is None else
                f"; with the mask kept, max_memory_allocated() {_signed_bytes(added)}"
                + (" (assume_worst_case: the estimate keeps it)" if taken else "")),
            "other_branch_added_bytes": added, "other_branch_taken": taken,
            "lower_bound": False})
    result = kept if taken and kept is not None else dropped
    result["assumptions"] = [*result.get("assumptions", []), *rows]
    return result


def _signed_bytes(size: int) -> str:
    return f"{size:+,} B ({size / 2**20:+.2f} MiB)" if size else "+0 B (the same)"


# Note [A forward that cannot be exported]
# torch.jit.script takes no transformers model and torch.jit.trace refuses some (a Python
# autograd.Function: BLOOM's GeLUFunction). Such a forward is recorded on fake tensors instead, the
# way a training step is (mem_tracer.estimator.step_graph, training=False: one no-grad forward, op
# by op below autograd), where any Python runs and every tensor lives as long as Python holds it:
# eager semantics by construction, with no TorchScript to interpret (so semantics="torchscript" does
# not apply). Estimate.method is then "record" and method_note says why. TorchScript stays the way
# for files and the command line, and for models it takes, unless its eager figure is approximate
# (values the exported code names nowhere, whose lifetime is only bracketed): then the recording
# gives Python's own lifetimes instead of the bracket.
def _estimate_recorded(model: Any, args: list[Any], kwargs: dict[str, Any], *, profile: str,
                       output: str | os.PathLike[str] | None,
                       batch_sizes: Sequence[int] | None, budget: int | str | None,
                       step: RecordedStep, note: str | None = None,
                       fallible: bool = False, worst_case: bool = False) -> Estimate:
    """estimate() of a training step, of a torch.export archive, or of a forward no exporter
    takes: recorded on fake tensors (mem_tracer.estimator.step_graph), estimated from the graph
    file."""
    from . import parallel
    training = step.training
    optimizer, accumulate = step.step.optimizer, step.step.accumulate
    if _is_export_archive(model):
        import torch
        path = Path(os.fspath(model))
        try:
            model = torch.export.load(str(path)).module()
        except Exception as error:
            raise MemTracerError(f"estimate(): {path}: cannot load as a torch.export archive: "
                                 f"{first_line(error)}") from error
        note = f"{path} (torch.export) recorded on fake tensors"
    elif note is None:
        note = "recorded on fake tensors: " + (
            f"one training step ({type(optimizer).__name__ if optimizer else 'no optimizer'}"
            f"{', ' + str(accumulate) + ' micro-batches' if accumulate > 1 else ''})"
            if training else "one forward")
        if step.job is not None:
            job = step.job
            note += f", rank {job.rank} of {job.world_size} under {job.strategy.upper()}"
    with tempfile.TemporaryDirectory(prefix="mem_tracer-") as temporary:
        work = Path(temporary)
        json_path = Path(output) if output is not None else work / "estimate.json"
        try:
            document = _record_and_estimate(model, args, kwargs, profile, step, work, json_path,
                                            held=True, worst_case=worst_case)
        except MemTracerError as error:
            if not fallible:
                raise
            raise _NotRecordable(str(error).removeprefix("estimate(): ")) from error
        if step.job is not None:
            parallel.record_other_ranks(
                document, model, step.job,
                lambda other: _record_and_estimate(model, args, kwargs, profile,
                                                   step.of_rank(other), work,
                                                   work / "other-rank.json"))
        document["model"] = None
        if output is not None:
            json_path.write_text(json.dumps(document, indent=2) + "\n")
        result = _estimate_from(document, "record", note, json_path if output is not None else None)
        batches = _RecordedBatches(model, args, kwargs, profile, step, work)
        notes = []
        if batch_sizes:
            points, said = batches.sweep([int(batch) for batch in batch_sizes])
            notes.append(f"the batches {said}")
            for batch, point in zip(batch_sizes, points):
                summary = point["summary"]
                result.batches.append(BatchPoint(int(batch), summary["peak_requested_bytes"],
                                                 summary["peak_allocated_bytes"],
                                                 summary["peak_reserved_bytes"],
                                                 bool(point.get("lower_bound"))))
        if budget is not None:
            result.largest_batch, said = batches.largest(budget)
            notes.append(f"the budget search {said}")
        if notes and document.get("assumptions") and any(
                row.get("kind") == EXAMPLE_VALUE for row in document["assumptions"]):
            # Note [The example's mask, said with what keeping it costs]: the other batches'
            # inputs are the example's resized, whose values no recording reads.
            notes.append("the other batches keep the attention mask the example's let "
                         "transformers drop, as a padded batch does")
        if notes:
            result.search_note = "; ".join(notes)
        return result


class _RecordedBatches:
    """The estimator's JSON of a recorded step at other batches: each recorded, or extended
    from recordings at batches 2, 3 and 4 (Note [A budget search from three recordings])."""

    def __init__(self, model: Any, args: list[Any], kwargs: dict[str, Any], profile: str,
                 step: RecordedStep, work: Path,
                 prepare: Callable[[Any], Any] | None = None) -> None:
        self.model, self.args, self.kwargs = model, args, kwargs
        self.profile, self.step, self.work = profile, step, work
        self.prepare = prepare  # plan(): the fake copy's modules wrapped in checkpointing
        self.graphs: dict[int, dict[str, Any]] = {}
        self.recordings = 0
        self.estimates: dict[tuple[int, str | None, bool], dict[str, Any]] = {}

    def recorded(self, batch: int, budget: int | str | None = None) -> dict[str, Any]:
        """The estimate of the step recorded at `batch` (kept for extending)."""
        if self.step.job is not None:  # one rank of a job: its own summary, recorded each time
            self.recordings += 1
            return _record_and_estimate(self.model, self.args, self.kwargs, self.profile,
                                        self.step, self.work, self.work / f"job-{batch}.json",
                                        batch=batch, budget=budget, prepare=self.prepare)
        return self._estimated(self.graph(batch), batch, budget, recorded=True)

    def graph(self, batch: int) -> dict[str, Any]:
        """The step recorded at `batch` (once)."""
        if batch not in self.graphs:
            from . import step_graph
            self.recordings += 1
            try:
                self.graphs[batch] = step_graph.record(
                    self.model, self.args, example_kwargs=self.kwargs, profile=self.profile,
                    batch=batch, prepare=self.prepare, **self.step.options())
            except step_graph.StepGraphError as error:
                raise MemTracerError(f"estimate(): {error}") from error
        return self.graphs[batch]

    def _estimated(self, graph: dict[str, Any], batch: int, budget: int | str | None,
                   recorded: bool = False) -> dict[str, Any]:
        """memtrace-estimate on the graph (about 0.7 s a call, most of it loading LibTorch)."""
        from . import step_graph
        key = (batch, None if budget is None else str(budget), recorded)
        if key not in self.estimates:
            path = step_graph.write(graph, self.work / f"graph-{batch}.json")
            options = ["--device", self.profile] + (
                ["--budget", str(budget)] if budget is not None else [])
            self.estimates[key] = _run_estimator(path, [], options,
                                                 self.work / f"estimate-{batch}.json")
        return self.estimates[key]

    def _recorded_here(self, batch: int) -> bool:
        """Whether `batch` is recorded rather than extended (below the recordings, or one)."""
        from . import batch_graphs
        return batch in self.graphs or batch < batch_graphs.BASES[0]

    def extended(self) -> Callable[[int], dict[str, Any]] | str:
        """The graph at any batch, or why the recordings do not extend (a phrase)."""
        from . import batch_graphs
        if self.step.job is not None:
            return "one rank of a job is recorded at each batch"
        for batch in batch_graphs.BASES:
            self.graph(batch)
        try:
            return batch_graphs.affine(self.graphs)
        except batch_graphs.NotAffine as error:
            return f"the graph is not affine in the batch: {error}"

    def sweep(self, batch_sizes: list[int]) -> tuple[list[dict[str, Any]], str]:
        """The estimates at `batch_sizes` and how they were made (a phrase)."""
        from . import batch_graphs
        # Extending costs five recordings (2, 3, 4, 1 and the largest to check): fewer batches
        # are recorded each.
        if len(set(batch_sizes) - set(self.graphs)) <= 8:
            return [self.recorded(batch) for batch in batch_sizes], "each recorded"
        extend = self.extended()
        if isinstance(extend, str):
            return [self.recorded(batch) for batch in batch_sizes], f"each recorded ({extend})"
        try:
            points = [self.recorded(batch) if self._recorded_here(batch)
                      else self._estimated(extend(batch), batch, None) for batch in batch_sizes]
        except batch_graphs.NotAffine as error:
            return [self.recorded(b) for b in batch_sizes], f"each recorded ({error})"
        largest = max(batch_sizes)
        if points[batch_sizes.index(largest)]["summary"] != self.recorded(largest)["summary"]:
            return ([self.recorded(b) for b in batch_sizes],
                    f"each recorded (the recording at {largest} differs from the extended graph)")
        return points, (f"extended from recordings at batches 2, 3, 4 (every size affine in the "
                        f"batch), the largest, {largest}, recorded to check it")

    def largest(self, budget: int | str, limit: int = 1 << 16) -> tuple[int | None, str]:
        """The largest batch up to `limit` that fits `budget`, and how it was found (a
        phrase)."""
        from . import batch_graphs

        def recorded_fit(batch: int) -> tuple[bool, bool]:
            return _fits(self.recorded(batch, budget))

        extend = self.extended()
        if isinstance(extend, str):
            return _largest_batch(recorded_fit, limit), f"recorded each batch it tried ({extend})"

        def extended_fit(batch: int) -> tuple[bool, bool]:
            if self._recorded_here(batch):
                return recorded_fit(batch)
            return _fits(self._estimated(extend(batch), batch, budget))

        try:
            second, third = (self.recorded(batch, budget) for batch in batch_graphs.BASES[1:])
            largest = _guided_largest(extended_fit, second, third, batch_graphs.BASES[2], limit)
        except batch_graphs.NotAffine as error:
            return _largest_batch(recorded_fit, limit), f"recorded each batch it tried ({error})"
        # The batch past the limit is never asked for: the answer there is the limit.
        checked = ([largest] + ([largest + 1] if largest < limit else [])
                   if largest is not None else [1])
        for batch in checked:
            if recorded_fit(batch)[0] != extended_fit(batch)[0]:
                return _largest_batch(recorded_fit, limit), (
                    f"recorded each batch it tried (at batch {batch} the recording and the "
                    "graph extended from batches 2, 3, 4 disagree)")
        return largest, ("extended the recordings at batches 2, 3, 4 (every size affine in the "
                         "batch), then recorded " + " and ".join(map(str, checked)) +
                         " to check the answer")


def _guided_largest(check: Callable[[int], tuple[bool, bool]], before: Mapping[str, Any],
                    last: Mapping[str, Any], at: int, limit: int = 1 << 16) -> int | None:
    """_largest_batch's answer (a batch that fits, the next one not) where each check costs
    a memtrace-estimate call: starting where the bytes at batches at - 1 and at (`before`,
    `last`), on a straight line, cross the budget, then galloping and bisecting around it (a handful of calls where
    doubling from 1 takes twenty)."""
    if not check(1)[0]:
        return None
    # The requested bytes grow smoothly (the reserved ones by whole segments).
    slope = int(last["summary"]["peak_requested_bytes"]) - int(before["summary"]["peak_requested_bytes"])
    if slope <= 0:
        return _largest_batch(check, limit)
    room = last["step"]["budget"]["budget_bytes"] - last["summary"]["peak_reserved_bytes"]
    guess = min(max(at + int(room) // slope, 1), limit)
    stride = 1
    if check(guess)[0]:
        low = guess
        while True:
            if low + stride > limit:
                high = limit + 1
                break
            if check(low + stride)[0]:
                low, stride = low + stride, stride * 2
            else:
                high = low + stride
                break
    else:
        high = guess
        while True:
            candidate = max(high - stride, 1)
            if check(candidate)[0]:
                low = candidate
                break
            high, stride = candidate, stride * 2
    return _bisect(check, low, high)


def _bisect(check: Callable[[int], tuple[bool, bool]], low: int, high: int) -> int:
    """The largest batch in [low, high) that fits, where ``low`` fits and ``high`` does not."""
    while high - low > 1:
        middle = (low + high) // 2
        if check(middle)[0]:
            low = middle
        else:
            high = middle
    return low


class _NotRecordable(Exception):
    """The forward could not be recorded on fake tensors (why, in a line)."""


def _fits(document: Mapping[str, Any]) -> tuple[bool, bool]:
    """(fits, far beyond): the step's verdict for its budget, and whether it asks for more
    than twice the budget (no larger batch will fit again)."""
    verdict = document["step"]["budget"]
    requested = document["summary"]["peak_requested_bytes"]
    return bool(verdict["fits"]), requested > 2 * verdict["budget_bytes"]


def _largest_batch(check: Callable[[int], tuple[bool, bool]], limit: int = 1 << 16) -> int | None:
    """The largest batch in [1, limit] that fits: doubling past a misfit until one is far
    beyond the budget, then bisecting (estimator/batch_search.h says why fitting is not
    monotonic in the batch)."""
    fits, _ = check(1)
    if not fits:
        return None
    best, batch = 1, 2
    while batch <= limit:
        fits, far = check(batch)
        if fits:
            best = batch
        elif far:
            break
        batch *= 2
    low, high = best, min(max(best * 2, 2), limit + 1)
    return _bisect(check, low, high)


def _estimate_from(document: dict[str, Any], method: Method, note: str, path: Path | None, *,
                   model_path: Path | None = None, wrapped: bool = False) -> Estimate:
    """The Estimate of memtrace-estimate's JSON (`path`: where it was kept, if it was)."""
    summary, peak = document["summary"], document.get("peak") or {}
    step = document.get("step") or {}
    return Estimate(
        method=method, method_note=note, model_path=model_path,
        semantics=document.get("semantics", "eager"),
        peak_requested_bytes=summary["peak_requested_bytes"],
        peak_allocated_bytes=summary["peak_allocated_bytes"],
        peak_reserved_bytes=summary["peak_reserved_bytes"],
        activation_peak_bytes=summary["activation_peak_requested_bytes"],
        weight_bytes=summary["weight_bytes"], input_bytes=summary["input_bytes"],
        lower_bound=bool(document.get("lower_bound")),
        by_line=_lines(peak.get("by_frame", [])), by_user_line=_lines(peak.get("by_user_frame", [])),
        by_module=[ModuleEntry(_unwrapped(e["module_path"], wrapped), e["bytes"],
                               e.get("tensors", 0)) for e in peak.get("by_module", [])],
        raw=document, path=path,
        training_categories_peak_bytes=summary.get("training_peak_bytes"),
        training_breakdown=_in_order(summary.get("training_breakdown")),
        optimizer_state_bytes=summary.get("optimizer_state_bytes", 0),
        training_peak_phase=step.get("peak_phase") if summary.get("training_peak_bytes") else None,
        optimizer_implementation=step.get("optimizer_implementation"),
        loop=step.get("loop"), parallel=estimate_of(document),
        approximate=_approximate(document.get("approximate")))


def _approximate(bracket: Mapping[str, int] | None) -> ApproximateBracket | None:
    """The JSON's `approximate` (memtrace-estimate's bracket), or None."""
    if not bracket:
        return None
    return ApproximateBracket(int(bracket["calls"]), int(bracket["over_by_at_most_bytes"]),
                              int(bracket["under_by_at_most_bytes"]),
                              int(bracket["peak_allocated_low_bytes"]),
                              int(bracket["peak_allocated_high_bytes"]))


def _in_order(breakdown: Mapping[str, int] | None) -> dict[str, int] | None:
    """The categories in the order step_graph.CATEGORIES names them (the JSON sorts them)."""
    if breakdown is None:
        return None
    from .step_graph import CATEGORIES
    return {name: int(breakdown.get(name, 0)) for name in CATEGORIES}


def _unwrapped(module_path: str, wrapped: bool) -> str:
    """A module path of the traced wrapper ("model.encoder") as the user's model names it."""
    if not wrapped:
        return module_path
    if module_path in ("", "model"):
        return ""
    return module_path.removeprefix("model.")


def write_prediction(predict: Any, directory: Path) -> Path:
    """The estimate JSON for report_stats(predict=...), written into `directory` if it must be.

    ``predict``: an Estimate, a saved estimate JSON path, or (model, example_inputs) /
    (saved TorchScript path, example_inputs) to estimate now."""
    if isinstance(predict, Estimate):
        json_path = directory / "estimate.json"
        json_path.write_text(json.dumps(predict.raw))
        return json_path
    if isinstance(predict, (str, os.PathLike)) and str(predict).endswith(".json"):
        return Path(predict)
    if isinstance(predict, (tuple, list)) and len(predict) == 2:
        model, example_inputs = predict
        json_path = directory / "estimate.json"
        estimate(model, example_inputs, output=json_path)
        return json_path
    raise MemTracerError("report_stats(predict=...) takes (model, example_inputs), "
                         "(saved_model.pt, example_inputs), an Estimate or an estimate .json")
