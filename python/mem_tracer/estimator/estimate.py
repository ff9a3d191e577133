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

from .. import _native
from ..errors import MemTracerError
from .parallel import ParallelEstimate, estimate_of
from .torchscript_export import (
    Method,
    _data_dependent_options,
    _first_line,
    _input_spec,
    _NotExportable,
    _to_torchscript,
    trace_model,
)
from .training_step import FORWARD, Loop, RecordedStep, TrainingStep, training_step

__all__ = ["BatchPoint", "Device", "Estimate", "FrontEnd", "LineEntry", "Loop", "Method", "ModuleEntry",
           "Semantics", "TrainingStep", "call_inputs", "estimate", "trace_model",
           "write_prediction"]

# How long a value lives: as the eager nn.Module keeps it (Python names) or as the TorchScript
# interpreter does (freed at last use); memtrace-estimate's --semantics.
Semantics = Literal["eager", "torchscript"]
# memtrace-estimate's device profiles (`memtrace-estimate --list-devices`), or "auto": the GPU
# in hand. A profile of one's own is a .json file, given as a path object.
Device = Literal["auto", "cuda", "cuda-sm90", "cuda-no-cublas-workspace", "cpu"]
# How estimate() reaches a graph (Note [Choosing the front end]): "auto" (TorchScript first,
# then fake tensors), or "record" (fake tensors only: no TorchScript at all).
FrontEnd = Literal["auto", "record"]
FRONT_ENDS: tuple[str, ...] = ("auto", "record")


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
class Estimate:
    """What one forward pass of the model is predicted to take on a GPU. Sizes in bytes."""

    method: Method  # how the model reached TorchScript: "script", "trace", or "file" (a saved .pt)
    method_note: str  # why, in a sentence (e.g. why scripting failed)
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
    # training=True: the step's peak, every storage live at once (parameters, gradients,
    # optimizer state, activations, inputs, temporaries), and those six at the peak.
    training_peak_bytes: int | None = None
    training_breakdown: dict[str, int] | None = None
    optimizer_state_bytes: int = 0
    training_peak_phase: str | None = None  # "forward", "backward", "optimizer" or "none"
    # training=True: what the recorded step ran and assumed: the optimizer's implementation on
    # the device ("foreach", "fused", "for-loop"), and the loop (LOOPS[loop] says it).
    optimizer_implementation: str | None = None
    loop: Loop | None = None
    # parallel=: one rank of a DDP or FSDP job (its communication buffers, the ranks recorded).
    parallel: ParallelEstimate | None = None

    def __str__(self) -> str:
        def mib(size: int) -> str:
            return f"{size / 2**20:.2f} MiB"

        lines = [f"memtrace-estimate ({self.semantics} semantics): peak {mib(self.peak_requested_bytes)} "
                 f"requested, {mib(self.peak_allocated_bytes)} allocated, "
                 f"{mib(self.peak_reserved_bytes)} reserved"
                 + (" (a lower bound: some sizes were unknown)" if self.lower_bound else ""),
                 (f"  weights {mib(self.weight_bytes)}, inputs {mib(self.input_bytes)}, "
                  f"activations at their peak {mib(self.activation_peak_bytes)}"),
                 f"  exported by {self.method}: {self.method_note}",
                 f"  model file: {self.model_path}" if self.model_path is not None else
                 "  model file: none kept (estimate(..., keep_model=PATH) keeps it)"]
        if self.training_peak_bytes is not None and self.training_breakdown is not None:
            from .step_graph import LOOPS
            lines.append(f"  training step peak {mib(self.training_peak_bytes)}"
                         f" (in the {self.training_peak_phase} phase): " + ", ".join(
                             f"{name} {mib(size)}" for name, size in self.training_breakdown.items()))
            if self.optimizer_implementation:
                lines.append(f"  the optimizer as the device runs it: "
                             f"{self.optimizer_implementation}")
            if self.loop is not None:
                lines.append(f"  assumed loop={self.loop!r}: {LOOPS[self.loop]}")
            if self.parallel is not None:
                lines.append(str(self.parallel))
        if self.batches:
            shown = self.batches[:8]  # a summary: Estimate.batches has them all
            lines.append("  by batch: " + ", ".join(
                f"{point.batch}: {mib(point.peak_reserved_bytes)} reserved" for point in shown)
                + (", ..." if len(self.batches) > len(shown) else ""))
        if self.largest_batch is not None:
            lines.append(f"  the largest batch within the budget: {self.largest_batch}")
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

    ``model``: an nn.Module or the path of a saved TorchScript file. A module is scripted
    (torch.jit.script); when that fails (it does on most Hugging Face models) it is traced
    with torch.jit.trace(strict=False), so dict and ModelOutput outputs trace too; when neither
    takes it (BLOOM's Python autograd.Function), one forward is recorded on fake tensors, with
    eager semantics (Note [A forward that cannot be exported]).
    ``Estimate.method`` and ``Estimate.method_note`` (and ``str(Estimate)``) say which and why.
    ``method="record"`` records the forward on fake tensors without trying TorchScript, whose
    entry points torch deprecates (torch.jit.trace warns from 2.13, torch.jit.script from 2.14):
    eager semantics, no TorchScript file (no ``keep_model``), and a ``budget`` search records
    the forward once per batch it tries (Note [Choosing the front end]).
    ``example_inputs``: one per positional ``forward`` argument, tensors (their shape and
    dtype are used) or shapes; or a dict of keyword inputs (a tokenizer's output).
    ``example_kwargs``: keyword inputs (``attention_mask=...``); non-tensor ones
    (``use_cache=False``) are fixed in the trace.
    ``batch_sizes`` sweeps the batch dimension (``Estimate.batches``); ``budget`` (bytes, or
    a string such as "24GiB") finds the largest batch that fits (``Estimate.largest_batch``).
    Data-dependent ops (nonzero, boolean masks, where(cond), MoE routing): with example tensors,
    the model runs once on them and their counts size those ops (scaled to other batches);
    ``assume_worst_case=True`` bounds them instead (every element selected). The estimate's
    assumptions say which.
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
    ``Estimate.training_peak_bytes`` and ``Estimate.training_breakdown`` (parameter, gradient,
    optimizer_state, activation, input, temporary) are its figures, ``batch_sizes`` and
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
    if method == "record" and step is None and not _is_export_archive(model):
        _refuse_for_recording(model, semantics, keep_model, assume_worst_case)
        return _estimate_recorded(
            model, example_inputs, kwargs, profile=_device_profile(device), output=output,
            batch_sizes=batch_sizes, budget=budget, step=FORWARD,
            note="recorded on fake tensors: one forward as Python runs it, without TorchScript")
    if step is not None or _is_export_archive(model):
        return _estimate_recorded(
            model, example_inputs, kwargs, profile=_device_profile(device), output=output,
            batch_sizes=batch_sizes, budget=budget,
            step=RecordedStep.of(step) if step is not None else FORWARD)
    return _estimate_exported(model, example_inputs, kwargs, batch_sizes=batch_sizes,
                              budget=budget, semantics=semantics, device=device, output=output,
                              keep_model=keep_model, assume_worst_case=assume_worst_case)


# Note [Choosing the front end]
# TorchScript is deprecated upstream: torch.jit.trace warns on every call from torch 2.13,
# torch.jit.script and torch.jit.save from 2.14. estimate() still exports a module to TorchScript
# first by default (method="auto": its torchscript semantics, the command line's file and the
# fast batch sweeps in C++ rest on it), and hides the warnings of its own calls, which are not
# the user's to act on. method="record" takes the other front end, which needs no TorchScript
# at all: one forward recorded on fake tensors (Note [A forward that cannot be exported]), as
# Python runs it. It gives the same figures wherever both take the model (the test models and
# the demo's, to the byte), but it is eager only, keeps no model file, and a budget search
# records the forward again for each batch it tries (seconds, where the C++ sweep takes a
# fraction of one). `make demo`, the first screen a newcomer sees, takes it: nothing
# deprecated runs on its path, and its estimate line says so.
def _refuse_for_recording(model: Any, semantics: Semantics,
                          keep_model: str | os.PathLike[str] | None,
                          assume_worst_case: bool) -> None:
    """MemTracerError when estimate(method="record") is asked for what only TorchScript gives."""
    if isinstance(model, (str, os.PathLike)):
        raise MemTracerError("estimate(): method='record' records a module's forward; a saved "
                             "TorchScript file is read as it is (method='auto')")
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
                       assume_worst_case: bool) -> Estimate:
    """estimate() of a forward exported to TorchScript (scripted, traced, or a file) and read by
    memtrace-estimate; recorded on fake tensors instead where no exporter takes it (Note [A
    forward that cannot be exported])."""
    with tempfile.TemporaryDirectory(prefix="mem_tracer-") as temporary:
        work = Path(temporary)
        export = Path(keep_model) if keep_model is not None else work / "model.pt"
        try:
            method, note, model_path, ordered, wrapped = _to_torchscript(
                model, example_inputs, export, kwargs)
        except _NotExportable as error:
            # Note [A forward that cannot be exported]
            return _estimate_recorded(
                model, example_inputs, kwargs, profile=_device_profile(device), output=output,
                batch_sizes=batch_sizes, budget=budget, step=FORWARD,
                note=("recorded on fake tensors: one forward as Python runs it, eager "
                      f"semantics ({error})"))
        inputs = [_input_spec(value) for value in ordered]
        options = ["--semantics", semantics, "--device", _device_profile(device)]
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
                         held: bool = False) -> dict[str, Any]:
    """The estimator's JSON of the step recorded on fake tensors (of one rank of a job, with
    step.job: mem_tracer.estimator.parallel; `held`: with what NCCL can hold beside it, Note
    [NCCL holds DDP's first buckets])."""
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
                       step: RecordedStep, note: str | None = None) -> Estimate:
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
                                 f"{_first_line(error)}") from error
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
        document = _record_and_estimate(model, args, kwargs, profile, step, work, json_path,
                                        held=True)
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
        if batch_sizes:
            for batch in batch_sizes:
                point = _record_and_estimate(model, args, kwargs, profile, step, work,
                                             work / f"batch-{batch}.json", batch=int(batch))
                summary = point["summary"]
                result.batches.append(BatchPoint(int(batch), summary["peak_requested_bytes"],
                                                 summary["peak_allocated_bytes"],
                                                 summary["peak_reserved_bytes"],
                                                 bool(point.get("lower_bound"))))
        if budget is not None:
            result.largest_batch = _largest_batch(
                lambda batch: _fits(_record_and_estimate(model, args, kwargs, profile, step, work,
                                                         work / f"fit-{batch}.json", batch=batch,
                                                         budget=budget)))
        return result


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
    while high - low > 1:
        middle = (low + high) // 2
        if check(middle)[0]:
            low = middle
        else:
            high = middle
    return low


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
        training_peak_bytes=summary.get("training_peak_bytes"),
        training_breakdown=_in_order(summary.get("training_breakdown")),
        optimizer_state_bytes=summary.get("optimizer_state_bytes", 0),
        training_peak_phase=step.get("peak_phase") if summary.get("training_peak_bytes") else None,
        optimizer_implementation=step.get("optimizer_implementation"),
        loop=step.get("loop"), parallel=estimate_of(document))


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
