"""Ground truth for the estimator on a CPU: the bytes of live tensor storages during a forward.

A TorchDispatchMode sees every aten op below autograd, composite ops already decomposed, for
the eager nn.Module and for the TorchScript interpreter alike. After each op returns (its inputs
still held by the call, its outputs just made) the tracker drops storages that died and adds
the new ones, so the maximum over ops is the activation peak a live-tensor count would show:
what PyTorch's caching allocator would report as requested bytes, less the weights and
inputs, on any device. Storages are identified through StorageWeakRef, which holds the
StorageImpl weakly and says when it is gone.
"""

import sys

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _storage_key(tensor):
    return tensor.untyped_storage()._cdata


class LiveStorageTracker(TorchDispatchMode):
    """Tracks activation storages; `preexisting` tensors (weights, inputs) are not counted."""

    def __init__(self, preexisting, source_file=None):
        super().__init__()
        self.excluded = {_storage_key(t) for t in preexisting}
        self.source_file = source_file
        self.live = {}  # storage key -> (weak ref, bytes, line in source_file that made it)
        self.current = 0
        self.peak = 0
        self.peak_live = []
        self.ops = 0

    def _sweep(self):
        for key in [key for key, (ref, _, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(key)[1]

    def _line_in_source(self):
        if self.source_file is None:
            return None
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == self.source_file:
                return frame.f_lineno
            frame = frame.f_back
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        # Dead storages first: a new storage may reuse a dead one's address.
        self._sweep()
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
                continue
            key = _storage_key(tensor)
            if key in self.excluded or key in self.live:
                continue
            nbytes = tensor.untyped_storage().nbytes()
            self.live[key] = (StorageWeakRef(tensor.untyped_storage()), nbytes, self._line_in_source())
            self.current += nbytes
        if self.current > self.peak:
            self.peak = self.current
            self.peak_live = [(nbytes, line) for (_, nbytes, line) in self.live.values()]
        return out


def measure(module, example, source_file=None):
    """Peak live activation bytes of one forward of `module` on `example` (no grad)."""
    return measure_call(module, (example,), {}, source_file)


def measure_call(module, args, kwargs, source_file=None):
    """measure() of `module(*args, **kwargs)`: every tensor among the arguments is an input."""
    preexisting = [*tree_leaves((args, kwargs)), *module.parameters(), *module.buffers()]
    preexisting = [t for t in preexisting if isinstance(t, torch.Tensor)]
    with torch.no_grad():
        tracker = LiveStorageTracker(preexisting, source_file)
        with tracker:
            output = module(*args, **kwargs)
        del output
    return tracker
