"""Mirrors CPU tensor storages into memtrace, as tools/demo/site-packages/host_cuda.py does, for
the training tests: every storage an op makes is also "allocated" through memtrace_alloc (over
the simulated GPU's runtime) and freed when the storage dies, as a CUDA tensor's would
be. It differs from the demo's in what a test needs to check the report independently: each
allocation gets a serial (an address is reused after a free; a serial is not), the mirror keeps
its own count of live bytes and the live serials at its own peak (overall and per step), and it
names a storage's memtrace address for mem_tracer.training (CPU storages are not memtrace's)."""
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mem_tracer import _native


class HostMirror(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.memtrace = _native.allocator()
        self.live = {}  # storage key -> (weak ref, pointer, bytes, serial)
        self.sizes = {}  # serial -> bytes (of every allocation made)
        self.serials = 0
        self.current = 0
        self.peak = 0
        self.peak_serials = set()
        self.step_peak = 0
        self.step_peak_serials = set()

    def place(self, tensors):
        """Allocates tensors made before the mode started (weights), as .cuda() would."""
        for tensor in tensors:
            self._allocate(tensor)

    def address_of(self, tensor):
        entry = self.live.get(tensor.untyped_storage()._cdata)
        return entry[1] if entry else None

    def serial_of(self, tensor):
        entry = self.live.get(tensor.untyped_storage()._cdata)
        return entry[3] if entry else None

    def end_step(self):
        """The test's step ended: returns (peak bytes, live serials there) since the last call."""
        result = (self.step_peak, self.step_peak_serials)
        self.step_peak, self.step_peak_serials = 0, set()
        return result

    def _allocate(self, tensor):
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live or storage.nbytes() == 0:
            return
        pointer = self.memtrace.memtrace_alloc(storage.nbytes(), 0, None)
        self.serials += 1
        self.live[key] = (StorageWeakRef(storage), pointer, storage.nbytes(), self.serials)
        self.sizes[self.serials] = storage.nbytes()
        self.current += storage.nbytes()
        # Checked after every allocation, as the report does.
        if self.current > self.peak:
            self.peak = self.current
            self.peak_serials = {entry[3] for entry in self.live.values()}
        if self.current > self.step_peak:
            self.step_peak = self.current
            self.step_peak_serials = {entry[3] for entry in self.live.values()}

    def _free_dead(self):
        for key in [key for key, entry in self.live.items() if entry[0].expired()]:
            _, pointer, size, _ = self.live.pop(key)
            self.current -= size
            self.memtrace.memtrace_free(pointer, size, 0, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._free_dead()  # first: a new storage may reuse a dead one's address
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self._allocate(tensor)
        return out
