"""Parameter statistics: every parameter and buffer of a model, with its module, shape, dtype
and bytes, grouped by module; on request the values' mean, std, min, max and share of zeros.

    stats = mem_tracer.parameter_stats(model)             # an nn.Module (or a ScriptModule)
    stats = mem_tracer.parameter_stats("model.pt", values=True)
    print(stats); stats.to_dict()                          # text; JSON-ready
    memtrace params model.pt [--values] [--json] [-o FILE] # the same from the command line

What it reads: an nn.Module; a TorchScript file (.pt); a torch.export archive (.pt2); a state
dict saved by torch.save (.pt, .pth, .bin; read memory-mapped, with weights_only=True); a
.safetensors file (its header only, unless values are asked for).

Note [Parameter bytes counted as the estimate counts them]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
memtrace-estimate counts a model's weights by storage: each storage once, at its whole size
(estimator/estimate.cpp). Tied weights (a language model's head that is its embedding) are two
names of one storage, so the device holds them once. The statistics count the same way, so
that their total is the estimate's `weight_bytes`: a tensor's `counted_bytes` is its storage's
size the first time that storage is met (in module order, as named_parameters() walks them)
and 0 after, when `shares` names the tensor that was counted; `bytes` is the tensor's own size
(elements × element size) either way. A module's total is what its own tensors count (its
submodules' are theirs). What a file cannot say is said, not guessed: a state dict does not
say which tensors are parameters and which are buffers (kind "tensor"), and holds no buffer
registered non-persistent; a torch.export archive and a .safetensors file keep one name of a
tied weight only (the exporter and safetensors drop the other).

Values, with `values=True`, are read in chunks (no float64 copy of a whole tensor): mean, std
(torch's default, Bessel-corrected; none for one element), min and max are over the finite
values, `non_finite` counts NaNs and infinities, `zero_share` is the share of elements exactly
zero (-0.0 included) among all. A tensor without values (meta, fake) is refused in one line."""
from __future__ import annotations

import dataclasses
import json
import math
import struct
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _torch_internals
from ._sizes import size_text
from .errors import MemTracerError, first_line

# Elements read at once when values are asked for: a float64 copy of 32 MiB and its masks.
_CHUNK_ELEMENTS = 1 << 22

# safetensors' dtype names (the format's spec) → torch's names and element sizes.
_SAFETENSORS_DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2),
    "BF16": ("bfloat16", 2), "F8_E4M3": ("float8_e4m3fn", 1), "F8_E5M2": ("float8_e5m2", 1),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1),
    "U64": ("uint64", 8), "U32": ("uint32", 4), "U16": ("uint16", 2), "U8": ("uint8", 1),
    "BOOL": ("bool", 1), "C64": ("complex64", 8),
}


@dataclass(frozen=True)
class ValueStats:
    """A tensor's values: over the finite ones, and how many were not finite."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    zero_share: float
    non_finite: int

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "min": self.min, "max": self.max,
                "zero_share": self.zero_share, "non_finite": self.non_finite}


@dataclass(frozen=True)
class TensorEntry:
    """One parameter, buffer or constant (Note [Parameter bytes counted as the estimate counts
    them] says what counted_bytes and shares mean)."""

    name: str  # its full path: "blocks.0.attention.qkv.weight"
    module: str  # the module that holds it: "blocks.0.attention.qkv" ("" for the model itself)
    kind: str  # "parameter", "buffer", "constant", or "tensor" (a state dict does not say)
    shape: tuple[int, ...]
    dtype: str  # torch's name: "float32"
    bytes: int  # elements × element size
    counted_bytes: int  # what it adds to the totals: its storage's bytes, once per storage
    shares: str | None  # the tensor counted for the storage it shares (a tied weight)
    values: ValueStats | None  # with values=True

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "module": self.module, "kind": self.kind,
                "shape": list(self.shape), "dtype": self.dtype, "elements": self.elements,
                "bytes": self.bytes, "counted_bytes": self.counted_bytes, "shares": self.shares,
                "values": self.values.to_dict() if self.values else None}


@dataclass(frozen=True)
class ModuleTotal:
    """A module's own tensors (not its submodules'): how many, their elements and counted bytes."""

    module: str
    tensors: int
    elements: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "tensors": self.tensors, "elements": self.elements,
                "bytes": self.bytes}


@dataclass(frozen=True)
class ParameterStats:
    """What parameter_stats() found: every tensor, the totals by module and in all."""

    source: str  # the file, or the module's class
    format: str  # "nn.Module", "TorchScript", "torch.export", "state_dict", "safetensors"
    tensors: tuple[TensorEntry, ...]
    modules: tuple[ModuleTotal, ...]  # in the order their first tensor came

    @property
    def total_bytes(self) -> int:
        """Each storage once: memtrace-estimate's weight_bytes for the same model."""
        return sum(entry.counted_bytes for entry in self.tensors)

    def bytes_of(self, kind: str) -> int:
        return sum(entry.counted_bytes for entry in self.tensors if entry.kind == kind)

    @property
    def elements(self) -> int:
        """Elements of the tensors counted (a tied weight once): the parameter count users quote
        when every tensor is a parameter."""
        return sum(entry.elements for entry in self.tensors if entry.shares is None)

    @property
    def shared(self) -> tuple[TensorEntry, ...]:
        return tuple(entry for entry in self.tensors if entry.shares is not None)

    def to_dict(self) -> dict[str, Any]:
        kinds = sorted({entry.kind for entry in self.tensors})
        return {"source": self.source, "format": self.format, "total_bytes": self.total_bytes,
                "bytes_by_kind": {kind: self.bytes_of(kind) for kind in kinds},
                "elements": self.elements, "tensors": [e.to_dict() for e in self.tensors],
                "modules": [m.to_dict() for m in self.modules],
                "shared": [{"name": e.name, "shares": e.shares} for e in self.shared]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        kinds = ", ".join(f"{kind}s {size_text(self.bytes_of(kind))}"
                          for kind in ("parameter", "buffer", "constant", "tensor")
                          if any(entry.kind == kind for entry in self.tensors))
        lines = [(f"{self.source} ({self.format}): {len(self.tensors)} tensors, "
                  f"{self.elements:,} elements, {size_text(self.total_bytes)} ({kinds})")]
        for entry in self.shared:
            lines.append(f"  shared: {entry.name} is {entry.shares}'s storage, counted once")
        lines.append("")
        by_module: dict[str, list[TensorEntry]] = {}
        for entry in self.tensors:
            by_module.setdefault(entry.module, []).append(entry)
        width = max((len(_leaf(e)) for e in self.tensors), default=4)
        shape_width = max((len(_shape(e.shape)) for e in self.tensors), default=5)
        for total in self.modules:
            lines.append(f"{total.module or '(the model itself)'}: {size_text(total.bytes)}, "
                         f"{total.elements:,} elements in {total.tensors} "
                         f"tensor{'s' if total.tensors != 1 else ''}")
            for entry in by_module[total.module]:
                row = (f"  {_leaf(entry):<{width}}  {entry.kind:<9}  "
                       f"{_shape(entry.shape):<{shape_width}}  {entry.dtype:<8}  "
                       f"{size_text(entry.bytes):>10}")
                if entry.shares is not None:
                    row += f"  (counted with {entry.shares})"
                if entry.values is not None:
                    row += "  " + _values_text(entry.values)
                lines.append(row)
        return "\n".join(lines)


def parameter_stats(model: Any, values: bool = False) -> ParameterStats:
    """Every parameter and buffer of `model` (an nn.Module, or the path of a TorchScript file, a
    torch.export archive, a state dict or a .safetensors file) with its module, shape, dtype and
    bytes; with values=True, the statistics of its values. Raises MemTracerError, in one line,
    for a file it cannot read or a tensor without values."""
    if isinstance(model, (str, Path)):
        return _from_file(Path(model), values)
    import torch

    if isinstance(model, torch.nn.Module):
        if isinstance(model, torch.jit.ScriptModule):
            tensors = list(_module_tensors(model)) + list(_script_constants(model))
            return _collected(type(model).__name__, "TorchScript", tensors, values)
        return _collected(type(model).__name__, "nn.Module", _module_tensors(model), values)
    raise MemTracerError(f"parameter_stats: {type(model).__name__} is neither an nn.Module nor "
                         "the path of a model file")


def _module_tensors(model: Any) -> Iterator[tuple[str, str, Any]]:
    """(name, kind, tensor) of every parameter and buffer, each module's own in module order,
    shared ones under every name that holds them."""
    for path, module in model.named_modules(remove_duplicate=False):
        prefix = f"{path}." if path else ""
        for name, parameter in module.named_parameters(recurse=False):
            yield prefix + name, "parameter", parameter
        for name, buffer in module.named_buffers(recurse=False):
            yield prefix + name, "buffer", buffer


def _collected(source: str, form: str, tensors: Any, values: bool) -> ParameterStats:
    import torch

    entries: list[TensorEntry] = []
    counted: dict[Any, str] = {}  # storage → the name it was counted under
    for name, kind, tensor in tensors:
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise MemTracerError(f"{source}: {name} is a {type(tensor).__name__}, not a tensor")
        storage = tensor.untyped_storage()
        # The storage's own object (its StorageImpl): one key per storage, also for meta and
        # fake tensors, whose data pointers are all 0.
        key = (tensor.device, _torch_internals.storage_key(storage))
        first = key not in counted
        if first:
            counted[key] = name
        entries.append(TensorEntry(
            name=name, module=name.rpartition(".")[0], kind=kind, shape=tuple(tensor.shape),
            dtype=str(tensor.dtype).removeprefix("torch."),
            bytes=tensor.numel() * tensor.element_size(),
            counted_bytes=storage.nbytes() if first else 0,
            shares=None if first else counted[key],
            values=_value_stats(source, name, tensor) if values else None))
    return ParameterStats(source, form, tuple(entries), _module_totals(entries))


def _module_totals(entries: list[TensorEntry]) -> tuple[ModuleTotal, ...]:
    totals: dict[str, list[int]] = {}
    for entry in entries:
        total = totals.setdefault(entry.module, [0, 0, 0])
        total[0] += 1
        total[1] += entry.elements if entry.shares is None else 0
        total[2] += entry.counted_bytes
    return tuple(ModuleTotal(module, *total) for module, total in totals.items())


def _value_stats(source: str, name: str, tensor: Any) -> ValueStats:
    import torch

    if tensor.device.type == "meta" or _is_fake(tensor):
        raise MemTracerError(f"{source}: {name} holds no values ({tensor.device.type} tensor): "
                             "statistics of values need a model with its weights")
    if tensor.is_complex() or tensor.is_quantized:
        raise MemTracerError(f"{source}: {name} is {tensor.dtype}: statistics of values are for "
                             "real numbers")
    flat = tensor.detach().reshape(-1)
    count = flat.numel()
    if count == 0:
        return ValueStats(None, None, None, None, 0.0, 0)
    zeros = finite = 0
    total = 0.0
    low, high = math.inf, -math.inf

    def each() -> Iterator[Any]:
        for start in range(0, count, _CHUNK_ELEMENTS):
            yield flat[start:start + _CHUNK_ELEMENTS].to(torch.float64)

    for chunk in each():
        zeros += int((chunk == 0).sum())
        good = chunk[torch.isfinite(chunk)]
        finite += good.numel()
        if good.numel():
            total += float(good.sum())
            low, high = min(low, float(good.min())), max(high, float(good.max()))
    if finite == 0:
        return ValueStats(None, None, None, None, zeros / count, count)
    mean = total / finite
    squares = 0.0
    for chunk in each():  # a second pass: the deviations from the mean, not x² - mean²
        good = chunk[torch.isfinite(chunk)]
        squares += float(((good - mean) ** 2).sum())
    std = math.sqrt(squares / (finite - 1)) if finite > 1 else None
    return ValueStats(mean, std, low, high, zeros / count, count - finite)


def _is_fake(tensor: Any) -> bool:
    return isinstance(tensor, _torch_internals.fake_tensor_type())


def _from_file(path: Path, values: bool) -> ParameterStats:
    if not path.is_file():
        raise MemTracerError(f"{path}: no such file")
    if path.suffix == ".safetensors":
        return _from_safetensors(path, values)
    if not zipfile.is_zipfile(path):
        raise MemTracerError(f"{path}: not a TorchScript file, a torch.export archive, a state "
                             "dict saved by torch.save (zip format) or a .safetensors file")
    import torch

    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if any(name.endswith("/constants.pkl") or name == "constants.pkl" for name in names):
        try:
            # torch deprecates TorchScript (DeprecationWarning in 2.13, FutureWarning in 2.14):
            # memtrace's call, not the user's.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = torch.jit.load(str(path), map_location="cpu")
        except Exception as error:  # torch raises many kinds: each said in one line
            raise MemTracerError(f"{path}: TorchScript could not load it: {first_line(error)}") \
                from error
        tensors = list(_module_tensors(module)) + list(_script_constants(module))
        return _collected(str(path), "TorchScript", tensors, values)
    if any(name.endswith("serialized_exported_program.json") or "/models/" in name
           for name in names):
        return _from_export_archive(path, values)
    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:
        raise MemTracerError(f"{path}: torch.load(weights_only=True) refused it: "
                             f"{first_line(error)}") from error
    state, where = _state_dict_in(loaded)
    if state is None:
        raise MemTracerError(f"{path}: holds a {type(loaded).__name__}, not a state dict of "
                             "tensors (nor one under 'state_dict', 'model' or 'module')")
    return _collected(f"{path}{where}", "state_dict",
                      ((name, "tensor", tensor) for name, tensor in state.items()), values)


def _state_dict_in(loaded: Any) -> tuple[dict[str, Any] | None, str]:
    """A state dict, or one under a checkpoint's usual keys (and which)."""
    import torch

    def is_state(value: Any) -> bool:
        return isinstance(value, dict) and bool(value) and all(
            isinstance(key, str) and isinstance(tensor, torch.Tensor)
            for key, tensor in value.items())

    if is_state(loaded):
        return loaded, ""
    if isinstance(loaded, dict):
        for key in ("state_dict", "model", "module", "model_state_dict"):
            if is_state(loaded.get(key)):
                return loaded[key], f" ['{key}']"
    return None, ""


def _script_constants(module: Any) -> Iterator[tuple[str, str, Any]]:
    """The tensors a frozen TorchScript module holds as constants of its graph (freezing turns
    its weights into them): under "constants", as memtrace-estimate counts them."""
    import torch

    forward = getattr(module, "forward", None)
    graph = getattr(forward, "graph", None)
    if graph is None:
        return
    for number, node in enumerate(graph.findAllNodes("prim::Constant")):
        if node.output().type().kind() == "TensorType" and node.hasAttribute("value"):
            tensor = node.t("value")
            if isinstance(tensor, torch.Tensor):
                yield f"constants.{number}", "constant", tensor


def _from_export_archive(path: Path, values: bool) -> ParameterStats:
    import torch

    try:
        with warnings.catch_warnings():  # as memtrace estimate loads an archive
            warnings.simplefilter("ignore")
            program = torch.export.load(str(path))
    except Exception as error:
        raise MemTracerError(f"{path}: torch.export.load could not read it: "
                             f"{first_line(error)}") from error
    tensors: list[tuple[str, str, Any]] = [
        (name, "parameter", tensor) for name, tensor in program.named_parameters()]
    tensors += [(name, "buffer", tensor) for name, tensor in program.named_buffers()]
    # A non-persistent buffer is in constants too, under its buffer's name: counted once.
    buffers = {name for name, _, _ in tensors}
    tensors += [(name, "constant", tensor) for name, tensor in program.constants.items()
                if isinstance(tensor, torch.Tensor) and name not in buffers]
    return _collected(str(path), "torch.export", tensors, values)


def _from_safetensors(path: Path, values: bool) -> ParameterStats:
    """The header alone gives names, dtypes, shapes and bytes; values only when asked for."""
    with path.open("rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            raise MemTracerError(f"{path}: too short for a .safetensors file")
        (size,) = struct.unpack("<Q", prefix)
        if size > 100 << 20:
            raise MemTracerError(f"{path}: a header of {size} bytes: not a .safetensors file")
        try:
            header = json.loads(file.read(size))
        except ValueError as error:
            raise MemTracerError(f"{path}: its header is not JSON: {error}") from error
    if not isinstance(header, dict):
        raise MemTracerError(f"{path}: its header is no JSON object: not a .safetensors file")
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, element = _SAFETENSORS_DTYPES[info["dtype"]]
            start, end = info["data_offsets"]
            shape = tuple(int(extent) for extent in info["shape"])
        except (KeyError, TypeError, ValueError) as error:
            raise MemTracerError(f"{path}: {name}'s header entry is not one safetensors "
                                 f"writes: {info}") from error
        if end - start != math.prod(shape) * element:
            raise MemTracerError(f"{path}: {name} holds {end - start} bytes, not {shape} of "
                                 f"{dtype}")
        entries.append(TensorEntry(name, name.rpartition(".")[0], "tensor", shape, dtype,
                                   end - start, end - start, None, None))
    if values:
        entries = _safetensors_values(path, entries)
    return ParameterStats(str(path), "safetensors", tuple(entries), _module_totals(entries))


def _safetensors_values(path: Path, entries: list[TensorEntry]) -> list[TensorEntry]:
    """The entries with their values' statistics, one tensor in memory at a time."""
    try:
        from safetensors import safe_open
    except ImportError as error:
        raise MemTracerError("values of a .safetensors file need the safetensors package "
                             "(pip install safetensors)") from error
    with safe_open(str(path), framework="pt") as file:
        return [dataclasses.replace(entry, values=_value_stats(
            str(path), entry.name, file.get_tensor(entry.name))) for entry in entries]


def _leaf(entry: TensorEntry) -> str:
    return entry.name[len(entry.module) + 1:] if entry.module else entry.name


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(extent) for extent in shape) if shape else "scalar"


def _values_text(stats: ValueStats) -> str:
    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    text = (f"mean {number(stats.mean)} std {number(stats.std)} min {number(stats.min)} "
            f"max {number(stats.max)} zeros {stats.zero_share:.2%}")
    return text + (f" non-finite {stats.non_finite:,}" if stats.non_finite else "")
