"""estimate(): the estimator's prediction of a model's GPU memory, before running it, and the
report that puts it beside a measurement (report_stats(predict=...)).

The estimator (memtrace-estimate) reads TorchScript IR on the CPU. estimate() scripts the
model (torch.jit.script), or traces it (torch.jit.trace) when scripting fails, saves it, and
runs the estimator on the example inputs' shapes and dtypes. docs/estimate-format.md
describes the numbers."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import _native
from .errors import MemTracerError


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

    method: str  # how the model reached TorchScript: "script", "trace", or "file" (a saved .pt)
    method_note: str  # why, in a sentence (e.g. why scripting failed)
    model_path: Path  # the TorchScript file the estimator read
    semantics: str  # "eager" (Python frees tensors) or "torchscript" (freed at last use)
    peak_requested_bytes: int  # torch.cuda.memory_stats()["requested_bytes.all.peak"]
    peak_allocated_bytes: int  # torch.cuda.max_memory_allocated()
    peak_reserved_bytes: int  # torch.cuda.max_memory_reserved()
    activation_peak_bytes: int  # the forward's own tensors, at their peak
    weight_bytes: int  # parameters, buffers and constants
    input_bytes: int
    lower_bound: bool  # some sizes were unknown: the true peak may be higher
    by_line: list[LineEntry]  # live at the peak, by innermost frame
    by_user_line: list[LineEntry]  # live at the peak, by innermost frame in user code
    by_module: list[ModuleEntry]
    batches: list[BatchPoint] = field(default_factory=list)  # with batch_sizes
    largest_batch: int | None = None  # with budget: the largest batch that fits
    raw: dict[str, Any] = field(default_factory=dict)  # the estimator's JSON, as written
    path: Path | None = None  # that JSON's file


_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64",
           "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8",
           "bool": "bool", "complex64": "complex64", "complex128": "complex128"}


def _input_spec(value: Any) -> str:
    """`--input` for one example input: a tensor, or a shape (a sequence of ints)."""
    import torch

    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise MemTracerError(f"estimate(): inputs of dtype {value.dtype} are not supported")
        shape = "x".join(str(size) for size in value.shape) or "1"
        return f"{shape}:{dtype}"
    if isinstance(value, (tuple, list)) and all(isinstance(size, int) for size in value):
        return "x".join(str(size) for size in value)
    raise MemTracerError(f"estimate(): an example input must be a tensor or a shape, not {type(value).__name__}")


def _to_torchscript(model: Any, example_inputs: Sequence[Any], directory: Path) -> tuple[str, str, Path]:
    """Saves `model` as TorchScript; returns (method, note, path)."""
    if isinstance(model, (str, os.PathLike)):
        return "file", "a saved TorchScript file", Path(model)
    import torch

    path = directory / "model.pt"
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        try:
            torch.jit.script(model).save(str(path))
            return "script", "scripted with torch.jit.script", path
        except Exception as error:  # noqa: BLE001 - any scripting failure falls back to tracing
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        tensors = tuple(x for x in example_inputs)
        if not all(isinstance(x, torch.Tensor) for x in tensors):
            raise MemTracerError(f"estimate(): the model cannot be scripted ({reason}) and tracing it "
                                 "needs example tensors, not shapes")
        with torch.no_grad():
            torch.jit.trace(model, tensors, check_trace=False).save(str(path))
        return "trace", f"traced with torch.jit.trace (scripting failed: {reason})", path
    finally:
        model.train(was_training)


def _run_estimator(model_path: Path, inputs: list[str], extra: list[str], out: Path) -> dict[str, Any]:
    command = [str(_native.tool_path("memtrace-estimate")), str(model_path), *(arg for spec in inputs for arg in ("--input", spec)),
               "--format", "json", "--output", str(out), *extra]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exited {result.returncode}"
        raise MemTracerError(f"estimate(): {message.removeprefix('memtrace-estimate: error: ')}")
    return json.loads(out.read_text())


def _lines(entries: list[dict[str, Any]]) -> list[LineEntry]:
    return [LineEntry(e.get("file"), e.get("line"), e.get("function"), e["bytes"], e.get("tensors", 0))
            for e in entries]


def _device_profile(device: str) -> str:
    """"auto": the profile of the GPU PyTorch sees (cuBLAS keeps 32 MiB on sm90 and newer,
    8.125 MiB before), or "cuda" without one."""
    if device != "auto":
        return device
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9:
            return "cuda-sm90"
    except Exception:  # noqa: BLE001 - no usable CUDA: the default profile
        pass
    return "cuda"


def estimate(model: Any, example_inputs: Sequence[Any], batch_sizes: Sequence[int] | None = None,
             budget: int | str | None = None, *, semantics: str = "eager", device: str = "auto",
             output: str | os.PathLike[str] | None = None) -> Estimate:
    """Predicts the GPU memory of one forward pass, without running it on a GPU.

    ``model``: an nn.Module (scripted, or traced when scripting fails; ``Estimate.method``
    says which) or the path of a saved TorchScript file. ``example_inputs``: one per
    ``forward`` argument, tensors (their shape and dtype are used) or shapes.
    ``batch_sizes`` sweeps the batch dimension (``Estimate.batches``); ``budget`` (bytes, or
    a string such as "24GiB") finds the largest batch that fits (``Estimate.largest_batch``).
    ``semantics``: "eager" (default; what Python runs) or "torchscript". ``device``: a
    profile of memtrace-estimate (``cuda``, ``cuda-sm90``, ``cuda-no-cublas-workspace``), or
    "auto" for the GPU in hand. ``output`` keeps the estimator's JSON there (memtrace-report
    --estimate reads it)."""
    if semantics not in ("eager", "torchscript"):
        raise MemTracerError(f"estimate(): semantics must be 'eager' or 'torchscript', not {semantics!r}")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    inputs = [_input_spec(value) for value in example_inputs]
    with tempfile.TemporaryDirectory(prefix="mem_tracer-") as work:
        work = Path(work)
        method, note, model_path = _to_torchscript(model, example_inputs, work)
        options = ["--semantics", semantics, "--device", _device_profile(device)]
        json_path = Path(output) if output is not None else work / "estimate.json"
        document = _run_estimator(model_path, inputs, options, json_path)
        summary, peak = document["summary"], document.get("peak") or {}
        result = Estimate(
            method=method, method_note=note,
            model_path=Path(model_path) if method == "file" else Path(document.get("model", model_path)),
            semantics=document.get("semantics", semantics),
            peak_requested_bytes=summary["peak_requested_bytes"],
            peak_allocated_bytes=summary["peak_allocated_bytes"],
            peak_reserved_bytes=summary["peak_reserved_bytes"],
            activation_peak_bytes=summary["activation_peak_requested_bytes"],
            weight_bytes=summary["weight_bytes"], input_bytes=summary["input_bytes"],
            lower_bound=bool(document.get("lower_bound")),
            by_line=_lines(peak.get("by_frame", [])), by_user_line=_lines(peak.get("by_user_frame", [])),
            by_module=[ModuleEntry(e["module_path"], e["bytes"], e.get("tensors", 0))
                       for e in peak.get("by_module", [])],
            raw=document, path=json_path if output is not None else None)
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


def report_with_prediction(trace: Path, predict: Any, *, top: int, group_by: str, frame: str,
                           own: bool = False) -> str:
    """The report of `trace` with the estimator's prediction beside it (report_stats(predict=...)).

    ``predict``: an Estimate, a saved estimate JSON path, or (model, example_inputs) /
    (saved TorchScript path, example_inputs) to estimate now."""
    from .report import _report_arguments, _run

    with tempfile.TemporaryDirectory(prefix="mem_tracer-") as work:
        if isinstance(predict, Estimate):
            json_path = Path(work) / "estimate.json"
            json_path.write_text(json.dumps(predict.raw))
        elif isinstance(predict, (str, os.PathLike)) and str(predict).endswith(".json"):
            json_path = Path(predict)
        elif isinstance(predict, (tuple, list)) and len(predict) == 2:
            model, example_inputs = predict
            json_path = Path(work) / "estimate.json"
            estimate(model, example_inputs, output=json_path)
        else:
            raise MemTracerError("report_stats(predict=...) takes (model, example_inputs), "
                                 "(saved_model.pt, example_inputs), an Estimate or an estimate .json")
        return _run(_report_arguments(trace, top, group_by, frame, own) + ["--estimate", str(json_path)])
