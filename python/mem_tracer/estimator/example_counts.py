"""How many elements each data-dependent selection picks on the example input.

nonzero, where(cond), masked_select and indexing by a boolean mask make outputs whose size
depends on the data; the estimator cannot know it from shapes (Note [Data-dependent sizes] in
estimator/torchscript/graph_builder_data.cpp). estimate() runs the model once on its example
input under this mode and passes the counts, in the order the ops ran, with --example-counts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .. import _torch_internals


def _is_mask(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in (torch.bool, torch.uint8)


class _Counts(_torch_internals.torch_dispatch_mode()):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.counts: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = _torch_internals.op_schema(func).name  # "aten::nonzero"
        if name in ("aten::nonzero", "aten::argwhere"):
            self.counts.append((name, args[0].numel(), result.shape[0]))
        elif name == "aten::masked_select":
            self.counts.append((name, torch.broadcast_shapes(args[0].shape, args[1].shape).numel(),
                                result.numel()))
        elif name == "aten::index" and len(args) > 1:
            for index in args[1]:
                if _is_mask(index):
                    self.counts.append((name, index.numel(), int(index.count_nonzero())))
        return result


def record(run: Callable[[], Any]) -> list[tuple[str, int, int]]:
    """The (op, elements, count) of every data-dependent selection `run()` makes, in order."""
    _torch_internals.require("estimate() of a model with data-dependent ops")
    mode = _Counts()
    with torch.no_grad(), mode:
        run()
    return mode.counts


def write(counts: list[tuple[str, int, int]], path: Path) -> None:
    path.write_text("".join(f"{op} {elements} {count}\n" for op, elements, count in counts))
