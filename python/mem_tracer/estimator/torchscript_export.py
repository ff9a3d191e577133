"""A model exported for memtrace-estimate: scripted (torch.jit.script) or traced
(torch.jit.trace), or a saved TorchScript file; its inputs as the estimator's --input, and the
counts of its data-dependent ops (estimate() runs these before the estimator)."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ..errors import MemTracerError, first_line

# How the model reached the estimator: scripted, traced, given as a saved TorchScript file, or
# recorded on fake tensors (a training step, or a torch.export archive;
# mem_tracer.estimator.step_graph).
Method = Literal["script", "trace", "file", "record"]


# The dtypes memtrace-estimate names are its own list (estimator/input_spec.cpp); an input of
# another dtype is refused there, with the list.


def _input_spec(value: Any) -> str:
    """`--input` for one example input: a tensor, or a shape (a sequence of ints)."""
    import torch

    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        shape = "x".join(str(size) for size in value.shape) or "1"
        return f"{shape}:{dtype}"
    if isinstance(value, (tuple, list)) and all(isinstance(size, int) for size in value):
        return "x".join(str(size) for size in value)
    raise MemTracerError(f"estimate(): an example input must be a tensor or a shape, not {type(value).__name__}")


def _tensors_of(value: Any, depth: int = 0) -> list[Any]:
    """The tensors in a model's output, in order: through tuples, lists, dicts (a Hugging Face
    ModelOutput is one) and plain objects (a KV cache), so that a trace can return them all."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 8 or value is None or isinstance(value, (str, bytes, int, float, bool)):
        return []
    if isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, (tuple, list)):
        items = list(value)
    elif hasattr(value, "__dict__"):
        items = list(vars(value).values())
    else:
        return []
    return [tensor for item in items for tensor in _tensors_of(item, depth + 1)]


def _flattening_module(model: Any, positional: int, keywords: Sequence[str],
                       constants: Mapping[str, Any]) -> Any:
    """model wrapped so that its forward takes tensors positionally (the estimator's --input
    order) and returns a tuple of tensors: what torch.jit.trace can record for any call."""
    import torch

    class CallFlattened(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> tuple[Any, ...]:
            arguments = dict(zip(keywords, tensors[positional:]), **constants)
            return tuple(_tensors_of(self.model(*tensors[:positional], **arguments)))

    return CallFlattened()


def trace_model(model: Any, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
                ) -> tuple[Any, list[Any], str]:
    """Traces ``model(*args, **kwargs)`` with torch.jit.trace(strict=False) for the estimator.

    Returns (traced module, its tensor inputs in order, how it was traced). Tensor keyword arguments
    become inputs after the positional ones; other keyword arguments (use_cache=False) are
    baked into the trace. A call with keyword inputs, or whose output is not tensors, tuples,
    lists and dicts of tensors (a KV cache object), is traced through a wrapper whose forward
    takes every tensor positionally and returns the output's tensors as a tuple; its module
    paths then start with "model."."""
    import warnings

    import torch

    kwargs = dict(kwargs or {})
    args = tuple(args)
    if not all(isinstance(value, torch.Tensor) for value in args):
        raise MemTracerError("estimate(): tracing needs example tensors, not shapes")
    keywords = [key for key, value in kwargs.items() if isinstance(value, torch.Tensor)]
    constants = {key: value for key, value in kwargs.items() if key not in keywords}
    inputs = [*args, *(kwargs[key] for key in keywords)]
    with torch.no_grad(), warnings.catch_warnings():
        # TracerWarnings (a Python int taken from a shape...) are the trace's, not the user's.
        warnings.simplefilter("ignore")
        if not kwargs:
            try:
                traced = torch.jit.trace(model, args, strict=False, check_trace=False)
                return traced, inputs, "strict=False"
            except Exception as error:  # noqa: BLE001 - the wrapper below records any output
                reason = f"a direct trace failed: {first_line(error)}"
        else:
            reason = "keyword inputs " + ", ".join(keywords or list(constants))
        wrapper = _flattening_module(model, len(args), keywords, constants)
        traced = torch.jit.trace(wrapper, tuple(inputs), strict=False, check_trace=False)
    return traced, inputs, (f"strict=False, through a wrapper that passes the inputs positionally "
                            f"and returns the output's tensors as a tuple ({reason})")


def _scriptable_call(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any] | None:
    """The call's inputs in forward's order when they fill its first parameters (so a scripted
    forward can take them positionally); None otherwise."""
    import inspect

    if not kwargs:
        return list(args)
    try:
        parameters = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return None
    order = parameters[len(args):len(args) + len(kwargs)]
    if sorted(order) != sorted(kwargs):
        return None
    return [*args, *(kwargs[name] for name in order)]


def _to_torchscript(model: Any, example_inputs: Sequence[Any], path: Path,
                    example_kwargs: Mapping[str, Any] | None = None
                    ) -> tuple[Method, str, Path, list[Any], bool]:
    """Saves `model` as TorchScript at `path`; returns (method, note, the file the estimator
    reads, inputs in the saved forward's order, whether the module paths are under the tracing
    wrapper's "model.")."""
    example_kwargs = dict(example_kwargs or {})
    if isinstance(model, (str, os.PathLike)):
        if example_kwargs:
            raise MemTracerError("estimate(): a saved TorchScript file takes positional inputs only")
        return "file", "a saved TorchScript file", Path(model), list(example_inputs), False
    import warnings

    import torch

    was_training = getattr(model, "training", False)
    model.eval()
    try:
        positional = _scriptable_call(model, example_inputs, example_kwargs)
        if positional is None:
            reason = ("keyword inputs " + ", ".join(example_kwargs) +
                      " are not forward's first parameters")
        elif not all(isinstance(value, torch.Tensor) or _is_shape(value) for value in positional):
            reason = "inputs that are not tensors"
        else:
            try:
                with warnings.catch_warnings():  # what scripting trips over is not the user's
                    warnings.simplefilter("ignore")
                    torch.jit.script(model).save(str(path))
                return "script", "scripted with torch.jit.script", path, positional, False
            except Exception as error:  # noqa: BLE001 - any scripting failure falls back to tracing
                reason = first_line(error)
        if not all(isinstance(x, torch.Tensor) for x in example_inputs):
            raise MemTracerError(f"estimate(): the model cannot be scripted ({reason}) and tracing it "
                                 "needs example tensors, not shapes")
        try:
            traced, inputs, how = trace_model(model, example_inputs, example_kwargs)
            traced.save(str(path))  # a Python autograd.Function traces, and fails here
        except Exception as error:  # said, and recorded on fake tensors instead
            raise _NotExportable(f"scripting failed: {reason}; tracing failed: "
                                 f"{first_line(error)}") from error
        return ("trace", f"traced with torch.jit.trace (scripting failed: {reason}); {how}", path,
                inputs, "wrapper" in how)
    finally:
        model.train(was_training)


class _NotExportable(Exception):
    """Neither torch.jit.script nor torch.jit.trace takes the model (why, in a line)."""


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(isinstance(size, int) for size in value)


def _data_dependent_options(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                            assume_worst_case: bool, work: Path) -> list[str]:
    """--assume-worst-case, or the example input's counts of nonzero and boolean masks (one
    forward pass on the example, recorded by example_counts), or nothing for shapes."""
    if assume_worst_case:
        return ["--assume-worst-case"]
    import torch

    from . import example_counts
    values = [*args, *kwargs.values()]
    if not callable(model) or not any(isinstance(value, torch.Tensor) for value in values):
        return []  # shapes only, or a saved file: nothing to run
    if any(_is_shape(value) for value in values):
        return []
    try:
        counts = example_counts.record(lambda: model(*args, **kwargs))
    except Exception:  # noqa: BLE001 - the estimate still runs; those sizes are then unknown, and said so
        return []
    if not counts:
        return []
    path = work / "example_counts.txt"
    example_counts.write(counts, path)
    return ["--example-counts", str(path)]
