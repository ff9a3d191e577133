"""What a tensor's storage is to the recorder: the address its allocation starts at, and the
nn.Module that owns it (Note [Weights and their modules] in tracer/format/records.h).

training.py names storages by their category, _modules.py by their owner module; both find
the address here. It imports nothing of the package but _native."""
from __future__ import annotations

import ctypes
import weakref
from collections.abc import Iterable
from typing import Any, Callable

from . import _native


def _default_address(tensor: Any) -> int | None:
    # CPU storages are not memtrace's allocations. The start of the storage, not of the tensor
    # (a view starts inside it), without making a storage object (this runs per saved tensor).
    # A DTensor (FSDP2's sharded parameters, their gradients and optimizer state) has no
    # storage of its own: its rank's shard, a plain tensor, has.
    local = getattr(tensor, "_local_tensor", None)
    if local is not None:
        tensor = local
    if not tensor.is_cuda:
        return None
    offset = tensor.storage_offset()
    if offset == 0:
        return int(tensor.data_ptr()) or None
    return int(tensor.untyped_storage().data_ptr()) or None


# How a tensor's storage is named to the recorder. Tests that mirror CPU tensors into memtrace
# (the simulated GPU's runtime) replace it with the mirror's addresses.
_address_of: Callable[[Any], int | None] = _default_address


def set_address_resolver(resolver: Callable[[Any], int | None] | None) -> None:
    global _address_of
    _address_of = resolver or _default_address


def address(tensor: Any) -> int | None:
    """The address of the allocation `tensor`'s storage starts at; None where it has none
    (a CPU tensor, a meta one, sparse or wrapper subclasses other than DTensor)."""
    try:
        return _address_of(tensor)
    except (RuntimeError, NotImplementedError):
        return None


_bound: list[Any] = []  # the library whose memtrace_set_owner_module has its signature set


def _set_owner_module() -> Any:
    library = _native.library()
    if not _bound or _bound[0] is not library:
        function = library.memtrace_set_owner_module
        function.argtypes = [ctypes.c_uint64, ctypes.c_char_p]
        function.restype = ctypes.c_int
        _bound[:] = [library]
    return library.memtrace_set_owner_module


# Each storage is told once per allocation: a tensor still alive at the address it was told at
# is the same allocation (a storage swapped for another is allocated before the old one is
# freed, so at another address).
_told: dict[int, weakref.ref[Any]] = {}


def tell_owner(module: Any, path: bytes) -> bool:
    """Tells the recorder that `module` (named `path`) owns its own parameters and buffers
    (not its children's). Returns whether each of them had an address to tell (on the
    device): a module whose tensors are not there yet is told again later."""
    everything = True
    for tensors in (module._parameters, module._buffers):
        everything = tell_owner_of(tensors.values(), path) and everything
    return everything


def tell_owner_of(tensors: Iterable[Any], path: bytes) -> bool:
    """Tells the recorder that the module named `path` owns the allocations of `tensors` (a
    parameter's gradient and optimizer state are its module's: Note [Everything a parameter
    has is its module's] in training.py). Returns whether each had an address to tell."""
    everything = True
    tell = None
    for tensor in tensors:
        if tensor is None:
            continue
        found = address(tensor)
        if found is None:
            everything = False
            continue
        known = _told.get(found)
        if known is not None and known() is tensor:
            continue
        tell = tell or _set_owner_module()
        tell(found, path)
        _told[found] = weakref.ref(tensor)
    return everything


def forget_owners() -> None:
    """A new trace: every storage is told again."""
    _told.clear()
