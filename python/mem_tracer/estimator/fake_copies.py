"""The copies a step is recorded on: the model, its inputs and its optimizer made again over
fake tensors (no memory, no compute) or real ones, with the rows a batch asks for."""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import _torch_internals
from .step_recorder import StepGraphError, storage_key


@contextlib.contextmanager
def quiet_fake_tensors() -> Iterator[None]:
    """FakeTensorMode logs the error of an op that fails on fake tensors, with its stack, on
    top of raising it: the error is said once, in StepGraphError's one line."""
    import logging
    logger = logging.getLogger(_torch_internals.FAKE_TENSOR_LOGGER)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def fake_copy_mode(fake_mode: Any) -> Any:
    """A TorchFunctionMode under which copy.deepcopy makes fake CPU tensors (Note [The
    device's kernels on fake tensors] says why the CPU): each tensor, real or fake, on any
    device, becomes one of its shape, strides, dtype and requires_grad, over a fake storage of
    its storage's size shared with the tensors that share it. Only metadata is read, so a model
    on a GPU is copied without touching its memory (torch's FakeCopyMode keeps each tensor's
    device, and Module.to() on its copies fails: `_apply(): Couldn't swap`)."""
    import torch
    from torch.overrides import TorchFunctionMode

    storages: dict[int, Any] = {}
    clone = _torch_internals.tensor_base_clone()

    def fake(tensor: Any) -> Any:
        key = storage_key(tensor)
        with fake_mode:
            base = storages.get(key)
            if base is None:
                base = storages[key] = torch.empty(tensor.untyped_storage().nbytes(),
                                                   dtype=torch.uint8)
            copied = torch.empty(0, dtype=tensor.dtype)
            copied.set_(base.untyped_storage(), tensor.storage_offset(), tensor.size(),
                        tensor.stride())
        return copied.requires_grad_(tensor.requires_grad)

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            if func is clone:  # nn.Parameter's __deepcopy__ clones
                with fake_mode:
                    return fake(args[0]).detach().clone(**kwargs)
            if func is torch.Tensor.__deepcopy__:
                tensor, memo = args
                if id(tensor) not in memo:
                    memo[id(tensor)] = fake(tensor)
                return memo[id(tensor)]
            with _torch_internals.disable_torch_function_subclass():
                return func(*args, **kwargs)

    return Mode()


def with_rows(value: Any, batch: int) -> Any:
    """`value` with `batch` rows, the example's repeated (a tensor with a batch dimension)."""
    import torch
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] == batch:
        return value
    index = torch.arange(batch, device=value.device) % value.shape[0]
    return value[index].contiguous()


def fake_optimizer(optimizer: Any, model: Any, fake_model: Any,
                    implementation: Sequence[Mapping[str, Any]]) -> Any:
    """The same optimizer (class, hyperparameters, parameter groups) over the fake model, each
    group with the implementation the device runs (device_optimizer.implementation)."""
    if optimizer is None:
        return None
    fake_of = {id(real): fake for real, fake in zip(model.parameters(), fake_model.parameters())}
    groups = []
    for index, group in enumerate(optimizer.param_groups):
        settings = {key: value for key, value in group.items() if key != "params"}
        settings.update(implementation[index] if index < len(implementation) else {})
        parameters = [fake_of[id(p)] for p in group["params"] if id(p) in fake_of]
        if parameters:
            groups.append({**settings, "params": parameters})
    if not groups:
        raise StepGraphError("the optimizer updates none of the model's parameters")
    # Each group carries every hyperparameter; the constructor's own keywords come from the
    # optimizer's defaults (AdamW's defaults name one its constructor does not take).
    accepted = inspect.signature(type(optimizer).__init__).parameters
    settings = {key: value for key, value in optimizer.defaults.items() if key in accepted}
    try:
        return type(optimizer)(groups, **settings)
    except TypeError as error:
        raise StepGraphError(f"cannot make another {type(optimizer).__name__} over the model's "
                             f"parameters: {error}") from error
