"""The values the recording can know on fake tensors (Note [Values Python knows on fake tensors]).

Note [Values Python knows on fake tensors]
The step is recorded on fake tensors (step_graph.py), which have no values. A library may
branch on that: transformers' `is_tracing(tensor)` is true for any FakeTensor (it takes fake
tensors for torch.compile's tracing) and then skips every read of a value, taking the branch
that is safe for an exported graph. Its mask functions are the costly case: a decoder without
an attention mask checks its position ids for packed sequences
(`find_packed_sequence_indices`, reading `(mask[:, -1] == 0).all()`) and only when they are
not packed lets sdpa take `is_causal` with no mask (`allow_is_causal_skip`); on fake tensors
it keeps the packed-sequence mask, so every full-attention layer gets a bool mask, sdpa's
integration repeats the key and value heads (`repeat_kv`) instead of `enable_gqa`, and the
device's kernel choice differs. On the simulated H100 (torch 2.14.1+cu130, transformers
5.23.0), inkling_text's sdpa forward at batch 2 was estimated 59,003,904 B against the card's
61,603,840 B (−4.22 %): with the mask kept, the key and value heads were repeated (contiguous
copies) and the efficient kernel took the call; on the card sdpa got `enable_gqa` and the key
and value as the model made them (last dimension strided), which no fused kernel takes: the
math fallback.

The program on the device never sees a fake tensor. So the recording keeps, beside each fake
tensor whose value the program itself fixes, whatever its inputs and weights, that value on
real CPU tensors: what factories make (arange, zeros, full; never empty or random ones), and
what any op makes from known values alone, when its outputs hold at most LIMIT elements
(computed for real, outside the fake mode). An op that writes a tensor from an unknown value
makes its storage unknown. A read of a known value (`.item()`, `bool()`, torch.equal) gives it:
a constant of the program, neither replayed from a run on the example (Note [Data-dependent
values] in step_recorder.py) nor said as an assumption. And while the step is recorded,
transformers' `is_fake_tensor` is false for a tensor whose value is known, so its Python takes
the branch the device's run takes there. A value that comes from the example's inputs or the
weights stays unknown: transformers keeps its tracing branch there, and a read of it is the
example's, replayed and said, as before (a choice: the example's values are not the user's
other inputs), but for one place, the Note below. What a known value costs: the small index
tensors it is made of, computed once.

Which side a real GPU follows (settled 2026-11-30, after this was withdrawn once): a real GPU
computes `arange`, so GPT-2's position ids read there as 0..15, `find_packed_sequence_indices`
finds one sequence a row and sdpa is called with `is_causal` and no mask. The simulated card
does the same where its known values are installed (Note [Known values on the simulated
card]: `memtrace run --gpu`, the referee). The scripts behind simulator.module_cells and
simulator.zoo_lines ran GPT-2 on the card without them: its position ids read as zeros there,
transformers took them for packed sequences and built a (2, 1, 16, 16) bool mask a layer, which
a real GPU does not build; that is what the recording's known values were compared with (512 B
of the forward's temporaries, 4,064 B of the step's attention activations). Those scripts now
install the card's known values (zoo_lines.on_the_card), and both sides take the real GPU's
branch.

Note [The example's attention mask, where transformers decides to skip it]
One read of the example's values is taken, in one place: transformers' choice to drop an
attention mask that gives every position (masking_utils' `_ignore_bidirectional_mask_sdpa`
and `_ignore_causal_mask_sdpa`, which read `padding_mask.all()` unless `is_tracing`). On fake
tensors it kept the mask, so sdpa got a bool mask: the integration repeated the key and value
heads (`repeat_kv`, contiguous copies) instead of `enable_gqa`, and the efficient kernel took
the additive mask. The device, given the same mask, drops it. On the simulated H100 (torch
2.14.1+cu130, transformers 5.23.0) Idefics2's perceiver resampler (16 query heads over 2 key
heads, an all-ones `attention_mask` input) was estimated 39,040,000 B against the card's
37,844,992 B at batch 1 (+3.16 %; 1,195,008 B, about the key and value repeated to 16 heads,
2 x 589,824 B), +6.15 % at batch 2 and +6.63 % in a training step at batch 2.
So the recording keeps the example inputs' values (at most LIMIT elements) apart, carries them
through ops as it does known values (never through an op that writes in place), and gives them
to those two functions only: there `is_fake_tensor` is false for such a tensor and its reads
are the example's. Anywhere else they stay unknown, as above. It decides whether a mask is made,
as the device decides it for the same input; an example with padding keeps the mask on both
sides (tests/estimator/test_front_end.py). Where such a read dropped a mask, the estimate says
so (Note [The example's mask, said with what keeping it costs]).
The two functions are wrapped while the step is recorded (libraries_see_values): the wrapper
says when a decision is under way (KnownValues.deciding), which is what the reads and
`is_fake_tensor` ask, and what it decided. It replaced a walk up the stack on every
`is_fake_tensor` call of a fake tensor and every read with unknown inputs: measured on small
GPT-2 and Llama configs (2 layers, 2x128 tokens), that walk ran 2 to 6 times a recording and
took 0.01 to 0.05 ms of 73 to 601 ms (load 1.3 on 2 cores), so it was not cut for its cost;
the wrapper is needed to know the decision anyway, and a counter is all the reads then need.

Note [The example's mask, said with what keeping it costs]
A user whose real batches are padded keeps the mask that the example's all-ones mask let
transformers drop: for a model with grouped key heads, sdpa's integration then repeats the key
and value heads (`repeat_kv`, contiguous copies), and the kernel choice changes. So where a read
of the example's values dropped a mask (the wrapped function returned True after reading one),
the recording adds an assumption of kind "example_value" (the function, the model's line), kept
apart from the graph's `assumptions` in the graph file's `example_value_assumptions`: the
assumptions memtrace-estimate reads are those that change what it computes, and this one does
not. estimate() then records the step once more with the example's values hidden from those
functions (the behaviour before the read: the mask kept, as for a padded batch), estimates it,
and gives the difference of the two max_memory_allocated() figures in each such row
(`other_branch_added_bytes`, the same for every row: the other recording keeps every such mask).
That costs a second recording and a second memtrace-estimate call, only where a mask was dropped
so: Idefics2's perceiver resampler on cuda-sm90 (the referee's rows) took 2.12 s against 1.10 s
a forward at batch 1 and 4.71 s against 3.56 s a training step at batch 2 (medians of 3, load 5
to 7 on 2 cores: approximate), and said +1,195,008 B, +2,388,992 B (forward, batch 2) and
+6,045,696 B (the step) for a padded batch: the figures the recording gave before the read, held
against the card's then. Why not something cheaper: what keeping the mask costs is the repeated
heads, the mask itself and another kernel choice, whose effect on the peak only a recording of
that branch gives. A difference of 0 B is said too: the read still decided something the user's
batches may decide otherwise, and "+0 B" tells them it does not matter, where silence would not
tell them it was checked. A difference may be negative (dropping the mask can leave the key and
value strided, which no fused kernel takes: the math fallback, Note [Values Python knows on fake
tensors]), so which branch is costlier is measured, never assumed: with assume_worst_case=True a
training step's estimate takes the costlier of the two (a forward's is exported to TorchScript
then, whose trace keeps the mask: transformers reads no value while tracing). The estimate is
not made "approximate" by it: it is exact for the example's input (the simulated card gives the
same figure), and the row names the input it holds for. A rank of a parallel job says the row
without its cost (its other branch is not recorded). The other batches of a sweep
(`batch_sizes`, `budget`) are recorded from the example's inputs resized, whose values no
recording reads: they keep the mask, as a padded batch does, and the estimate's search note
says so.
"""
from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .. import _torch_internals

# The ops that give a tensor's value to Python.
_READS = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::item", "aten::equal",
          "aten::allclose"}

# Elements an op's known outputs (or an example input) may hold: index tensors, position ids
# and masks, not activations.
LIMIT = 1 << 16


class KnownValues:
    """Fake tensor -> its value on a real CPU tensor, where Python could know it."""

    def __init__(self) -> None:
        self._values: dict[int, tuple[Any, Any]] = {}  # id(fake) -> (weak ref to it, real)
        self._unknown: set[int] = set()  # storage keys an unknown value wrote
        # id(fake) -> (weak ref, real): a value that follows from the example's inputs (Note
        # [The example's attention mask, where transformers decides to skip it]).
        self._examples: dict[int, tuple[Any, Any]] = {}
        # How many of transformers' mask-skip decisions are under way (libraries_see_values),
        # and whether the innermost one read a value of the example's.
        self.deciding = 0
        self.read_example = False

    def value(self, tensor: Any) -> Any:
        """The real tensor holding `tensor`'s value, or None."""
        entry = self._values.get(id(tensor))
        if entry is not None and entry[0]() is tensor and \
                _torch_internals.storage_key(tensor.untyped_storage()) not in self._unknown:
            return entry[1]
        constant = _torch_internals.fake_constant(tensor)
        return constant

    def example_value(self, tensor: Any) -> Any:
        """The real tensor holding `tensor`'s value on the example's inputs where no known value
        holds it (a caller asks value() first), or None."""
        entry = self._examples.get(id(tensor))
        if entry is not None and entry[0]() is tensor and \
                _torch_internals.storage_key(tensor.untyped_storage()) not in self._unknown:
            return entry[1]
        return None

    def example_input(self, fake: Any, real: Any) -> None:
        """`fake` is the recording's copy of the example input `real`."""
        import torch
        if isinstance(fake, torch.Tensor) and isinstance(real, torch.Tensor) and \
                not real.is_nested and real.numel() <= LIMIT and \
                fake.shape == real.shape and fake.dtype == real.dtype:
            self._examples[id(fake)] = (weakref.ref(fake), real.detach().cpu().clone())

    def _keep(self, fake: Any, real: Any, example: bool = False) -> None:
        (self._examples if example else self._values)[id(fake)] = (weakref.ref(fake), real)

    def read(self, func: Any, name: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[Any] | None:
        """An op that reads values back into Python (`.item()`, `bool()`, torch.equal), where
        its inputs' values are known: (what it gives,), or None."""
        import torch
        if name not in _READS:
            return None
        tensors = [leaf for leaf in _torch_internals.tree_leaves((args, kwargs))
                   if isinstance(leaf, torch.Tensor)]
        real = {id(tensor): self.value(tensor) for tensor in tensors}
        example = bool(tensors) and self.deciding > 0 and any(
            value is None for value in real.values())
        if example:
            real = {id(tensor): self.example_value(tensor) if real[id(tensor)] is None
                    else real[id(tensor)] for tensor in tensors}
        if not tensors or any(value is None for value in real.values()):
            return None
        if example:
            self.read_example = True
        with _torch_internals.disable_current_modes():
            return (func(*_torch_internals.tree_map(lambda leaf: real.get(id(leaf), leaf), args),
                         **_torch_internals.tree_map(lambda leaf: real.get(id(leaf), leaf),
                                                     kwargs)),)

    def after(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        """The op ran on fake tensors: its outputs' values, where its inputs' are all known."""
        import torch
        leaves = _torch_internals.tree_leaves((args, kwargs))
        inputs = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        known = [self.value(tensor) for tensor in inputs]
        example = any(value is None for value in known)
        if example and not _written(func):  # a value of the example's, kept apart
            known = [self.example_value(tensor) if value is None else value
                     for tensor, value in zip(inputs, known)]
        outputs = [leaf for leaf in _torch_internals.tree_leaves(output)
                   if isinstance(leaf, torch.Tensor)]
        computable = all(value is not None for value in known) and \
            sum(tensor.numel() for tensor in outputs) <= LIMIT and _deterministic(func)
        if computable:
            real = {id(tensor): value for tensor, value in zip(inputs, known)}
            try:
                with _torch_internals.disable_current_modes():
                    result = func(*_torch_internals.tree_map(
                        lambda leaf: real.get(id(leaf), leaf), args), **_torch_internals.tree_map(
                        lambda leaf: real.get(id(leaf), leaf), kwargs))
            except Exception:  # noqa: BLE001 - a value not computed is a value not known
                computable = False
            else:
                made = [leaf for leaf in _torch_internals.tree_leaves(result)
                        if isinstance(leaf, torch.Tensor)]
                if len(made) == len(outputs):
                    for fake, value in zip(outputs, made):
                        self._keep(fake, value, example)
                        (self._values if example else self._examples).pop(id(fake), None)
                    return
                computable = False
        for index in _written(func):  # an unknown value written: the storage is unknown
            if index < len(args) and isinstance(args[index], torch.Tensor):
                self._unknown.add(_torch_internals.storage_key(args[index].untyped_storage()))
        for fake in outputs:
            self._values.pop(id(fake), None)
            self._examples.pop(id(fake), None)


# transformers' functions that drop an attention mask giving every position (Note [The
# example's attention mask, where transformers decides to skip it]).
MASK_SKIPS = ("_ignore_bidirectional_mask_sdpa", "_ignore_causal_mask_sdpa")


def _deterministic(func: Any) -> bool:
    """Whether the op's values follow from its inputs': not random, not uninitialised."""
    import torch
    name = _torch_internals.op_schema(func).name
    return torch.Tag.nondeterministic_seeded not in getattr(func, "tags", ()) and \
        "empty" not in name


def _written(func: Any) -> list[int]:
    """The positions of the arguments the op writes (in-place and out= ops)."""
    return [index for index, argument in enumerate(_torch_internals.op_schema(func).arguments)
            if argument.alias_info is not None and argument.alias_info.is_write]


@contextlib.contextmanager
def libraries_see_values(known: KnownValues,
                         dropped: Callable[[str], None] | None = None) -> Iterator[None]:
    """While the step is recorded: transformers' `is_fake_tensor` false for a tensor whose value
    is known (the Notes above), and its mask-skip decisions wrapped: `dropped(name)` where one
    dropped a mask after reading a value of the example's; nothing changes where transformers
    is not imported."""
    with contextlib.ExitStack() as replaced:
        module = sys.modules.get("transformers.utils.import_utils")
        original = getattr(module, "is_fake_tensor", None)
        if original is not None:
            def is_fake_tensor(value: Any) -> bool:
                if not original(value) or known.value(value) is not None:
                    return False
                return not (known.deciding and known.example_value(value) is not None)

            replaced.enter_context(_replaced(module, "is_fake_tensor", is_fake_tensor))
        masking = sys.modules.get("transformers.masking_utils")
        for name in MASK_SKIPS:
            decide = getattr(masking, name, None)
            if callable(decide):
                replaced.enter_context(_replaced(masking, name,
                                                 _deciding(known, name, decide, dropped)))
        yield


def _deciding(known: KnownValues, name: str, decide: Callable[..., Any],
              dropped: Callable[[str], None] | None) -> Callable[..., Any]:
    """`decide` (one of MASK_SKIPS) run with known.deciding raised, telling `dropped` when it
    dropped the mask after reading a value of the example's."""
    def deciding(*args: Any, **kwargs: Any) -> Any:
        outer = known.read_example
        known.deciding += 1
        known.read_example = False
        try:
            skipped = decide(*args, **kwargs)
            read = known.read_example
        finally:
            known.deciding -= 1
            known.read_example = outer
        if read and skipped is True and dropped is not None:
            dropped(name)
        return skipped

    return deciding


@contextlib.contextmanager
def _replaced(module: Any, name: str, replacement: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)
