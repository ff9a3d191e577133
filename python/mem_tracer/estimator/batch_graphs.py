"""A recorded graph at any batch from 2 on, from recordings at three batches (Note [A budget
search from three recordings])."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Note [A budget search from three recordings]
# A recorded graph has its shapes fixed: each batch a budget search tries is a recording (0.4 s
# on a 2-layer GPT-2; a training step, more) and a call of memtrace-estimate (0.7 s, most of it
# loading LibTorch), and the search tries tens of batches (doubling, then bisecting: 20 for that
# GPT-2 in 1 GiB, 26 s). But a graph recorded at batch n differs from the one at another batch
# only in its numbers: the bytes and shapes of what depends on the batch, and FLOPs. Where the
# recordings at batches 2, 3 and 4 have the same structure (every op, storage, frame, kernel
# choice and string equal) and each number is affine in the batch (its three values equally
# spaced), the graph at any batch from 2 on is those numbers extended, and memtrace-estimate on
# it answers each batch the search tries (batch 1 is recorded: a forward often takes another
# path there, a broadcast or a squeezed dimension; the demo's does). The search also starts
# where the requested bytes at 3 and 4, on a straight line, cross the budget, and gallops and
# bisects from there: about 8 calls where doubling from 1 made 20. Three points can miss what
# changes later (a kernel chosen by size, a size rounded up): so the answer is then recorded
# for real, at the largest batch found and the one after it; if either disagrees with the
# extended graphs the search records every batch it tries instead. estimate() says which
# (Estimate.search_note): never a silent approximation. A forward whose graphs are not affine
# in the batch is recorded at each batch, as before, and the note says why.
BASES = (2, 3, 4)


class NotAffine(Exception):
    """The three recordings do not extend to other batches (where, in a phrase)."""


def affine(graphs: Mapping[int, Any]) -> Callable[[int], Any]:
    """The graph at any batch from 2 on, from the graphs at BASES; NotAffine when their
    structure differs or a number is not affine in the batch."""
    first, second, third = (graphs[batch] for batch in BASES)
    template = _template(first, second, third, "")

    def at(batch: int) -> Any:
        if batch < BASES[0]:
            raise NotAffine(f"batch {batch} is below the recordings at {BASES}")
        return _filled(template, batch - BASES[0])

    return at


def _template(a: Any, b: Any, c: Any, where: str) -> Any:
    """The graph with each number that changes replaced by (its first value, its step)."""
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
            raise NotAffine(f"{where} is {a}, {b}, {c} at batches 2, 3, 4: not affine")
        return _Affine(a, b - a)
    if a != b or a != c:
        raise NotAffine(f"{where} is {a!r}, {b!r}, {c!r} at batches 2, 3, 4")
    return a


class _Affine:
    __slots__ = ("first", "step")

    def __init__(self, first: int, step: int) -> None:
        self.first, self.step = first, step


def _filled(template: Any, steps: int) -> Any:
    """The template `steps` batches past the first recording."""
    if isinstance(template, _Affine):
        value = template.first + template.step * steps
        if value < 0:
            raise NotAffine(f"a size would be negative ({value}) at batch {BASES[0] + steps}")
        return value
    if isinstance(template, dict):
        return {key: _filled(value, steps) for key, value in template.items()}
    if isinstance(template, list):
        return [_filled(value, steps) for value in template]
    return template
