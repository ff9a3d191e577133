"""The implementation of an optimizer PyTorch runs on a device: for-loop, foreach or fused.

Note [The device's optimizer on fake tensors]
torch.optim's optimizers (Adam, AdamW, SGD, RMSprop, ...) run one of three implementations of
the same update: a for-loop over the parameters, `foreach` (one `torch._foreach_*` op over
lists of tensors: its intermediates are lists too, e.g. Adam's `exp_avg_sq.sqrt()` for every
parameter at once, about the parameters' size), or `fused` (one kernel, no intermediates). The
user picks with `foreach=` / `fused=`; left at None, the optimizer's functional form asks
`_default_to_fused_or_foreach`, which picks foreach when every parameter is a plain Tensor or
Parameter on a device with foreach kernels (CUDA), else the for-loop (the CPU). A step recorded
on fake tensors asks the same question of FakeTensors, which are neither: it would record the
for-loop where the device runs foreach (an H200 showed GPT-2's AdamW step 163 MiB above the
for-loop's, the step's peak). So the choice is made here, for the estimated device and the
user's real parameters, and given to the recorded copy explicitly: `foreach=True` or `False`
per group, which no type check overrides. Adafactor (foreach only when asked) and optimizers
without the choice (LBFGS, one's own) run as they are.
"""
from __future__ import annotations

import sys
from typing import Any


def _defaults_to_foreach(optimizer: Any) -> bool:
    """Whether the optimizer's functional form picks foreach itself when foreach is None:
    torch.optim's modules that ask `_default_to_fused_or_foreach` (Adafactor's does not)."""
    for klass in type(optimizer).__mro__:  # AdamW's step is Adam's (torch >= 2.9)
        if klass.__module__.startswith("torch.optim.") and \
                klass.__module__ != "torch.optim.optimizer":  # where the function lives
            module = sys.modules.get(klass.__module__)
            if module is not None and hasattr(module, "_default_to_fused_or_foreach"):
                return True
    return False


def _foreach_on(parameters: list[Any], device: str, group: dict[str, Any],
                optimizer: Any) -> bool:
    """_default_to_fused_or_foreach(params, differentiable, use_fused=False) for the user's
    parameters' types on `device`, and Adam's exception for a Tensor lr without capturable."""
    import torch

    from .. import _torch_internals

    if group.get("differentiable", False):
        return False
    if device not in _torch_internals.foreach_kernel_devices():
        return False
    # A fake parameter (a model built on fake tensors to be estimated) stands for a plain one.
    fake = _torch_internals.fake_tensor_type()
    supported = _torch_internals.foreach_supported_types()
    if not all(type(p) in supported or isinstance(p, fake) for p in parameters):
        return False
    adam = isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))
    return not (adam and isinstance(group.get("lr"), torch.Tensor)
                and not group.get("capturable", False))


def implementation(optimizer: Any, device: str) -> tuple[list[dict[str, Any]], str]:
    """What `optimizer` runs on `device` ("cuda", "cpu"): for each parameter group the settings
    that make a copy over fake tensors run the same ({"foreach": True}, or {} where nothing
    is to choose), and the implementation's name: "foreach", "fused", "for-loop" (with
    ", capturable"), or "its own" for an optimizer without the choice."""
    settings: list[dict[str, Any]] = []
    names: list[str] = []
    for group in optimizer.param_groups:
        if "foreach" not in group and "fused" not in group:
            settings.append({})
            names.append("its own")
            continue
        fused, foreach = group.get("fused"), group.get("foreach")
        if fused:
            name = "fused"
        elif foreach is None and _defaults_to_foreach(optimizer):
            foreach = _foreach_on(list(group["params"]), device, group, optimizer)
        if not fused:
            name = "foreach" if foreach else "for-loop"
        chosen = {"foreach": bool(foreach)} if "foreach" in group and not fused else {}
        settings.append(chosen)
        names.append(name + (", capturable" if group.get("capturable") else ""))
    distinct = list(dict.fromkeys(names))
    return settings, distinct[0] if len(distinct) == 1 else " / ".join(distinct)


__all__ = ["implementation"]
