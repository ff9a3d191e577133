"""A recorded graph at any batch, from recordings at three batches (Note [A budget search from
three recordings])."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Note [A budget search from three recordings]
# Recording a forward on fake tensors costs about a second on a small GPT-2 (a training step,
# more); a budget search tries tens of batches (doubling, then bisecting: 20 for GPT-2 in 1 GiB),
# so recording each took 26 s there. But a graph recorded at batch n differs from the one at
# batch 1 only in its numbers: the bytes and shapes of what depends on the batch, and FLOPs.
# Where the recordings at batches 1, 2 and 3 have the same structure (every op, storage, frame,
# kernel choice and string equal) and each number is affine in the batch (its three values
# equally spaced), the graph at any batch is those numbers extended, and memtrace-estimate (C++,
# a fraction of a second a graph) answers each batch the search tries. Three points can miss
# what changes later (a kernel chosen by size, a size rounded up): so the answer is then
# recorded for real, at the largest batch found and the one after it; if either disagrees with
# the extended graphs the search records every batch it tries instead. estimate() says which
# (Estimate.search_note), never a silent approximation. A forward whose graphs are not affine
# in the batch is recorded per batch, as before, and the note says why.
BASES = (1, 2, 3)


class NotAffine(Exception):
    """The three recordings do not extend to other batches (where, in a phrase)."""


def affine(graphs: Mapping[int, Any]) -> Callable[[int], Any]:
    """The graph at any batch from the graphs at batches 1, 2 and 3; NotAffine when their
    structure differs or a number is not affine in the batch."""
    first, second, third = (graphs[batch] for batch in BASES)
    template = _template(first, second, third, "")

    def at(batch: int) -> Any:
        return _filled(template, batch)

    return at


def _template(a: Any, b: Any, c: Any, where: str) -> Any:
    """The graph with each number that changes replaced by (its value at 1, its step)."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or not isinstance(c, dict) or a.keys() != b.keys() \
                or a.keys() != c.keys():
            raise NotAffine(f"{where or 'the graph'} has other keys at another batch")
        return {key: _template(a[key], b[key], c[key], f"{where}.{key}") for key in a}
    if isinstance(a, list):
        if not isinstance(b, list) or not isinstance(c, list) or not len(a) == len(b) == len(c):
            raise NotAffine(f"{where or 'the graph'} has another length at another batch")
        return [_template(x, y, z, f"{where}[{i}]") for i, (x, y, z) in enumerate(zip(a, b, c))]
    if isinstance(a, int) and not isinstance(a, bool) and type(b) is int and type(c) is int:
        if a == b == c:
            return a
        if c - b != b - a:
            raise NotAffine(f"{where} is {a}, {b}, {c} at batches 1, 2, 3: not affine")
        return _Affine(a, b - a)
    if a != b or a != c:
        raise NotAffine(f"{where} is {a!r}, {b!r}, {c!r} at batches 1, 2, 3")
    return a


class _Affine:
    __slots__ = ("at_one", "step")

    def __init__(self, at_one: int, step: int) -> None:
        self.at_one, self.step = at_one, step


def _filled(template: Any, batch: int) -> Any:
    if isinstance(template, _Affine):
        value = template.at_one + template.step * (batch - 1)
        if value < 0:
            raise NotAffine(f"a size would be negative ({value}) at batch {batch}")
        return value
    if isinstance(template, dict):
        return {key: _filled(value, batch) for key, value in template.items()}
    if isinstance(template, list):
        return [_filled(value, batch) for value in template]
    return template
