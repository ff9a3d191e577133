"""Fake kernels for the ops whose own fake (meta) kernel refuses calls that every device's
kernel takes: the recording (step_recorder.Recorder.dispatch) calls these instead.

Note [Fake kernels stricter than the device's]
A step recorded on fake tensors runs each op's meta kernel, which sizes its output and checks
its arguments as the device kernel does, or is meant to. Where the meta kernel refuses what the
device kernel runs, the recording fails where the program does not. The ops known to do so, and
what the device does instead:
- `aten::_grouped_mm` in float32 and float16 (the MoE experts' grouped matmul: transformers'
  `grouped_mm_experts_forward` takes it in any dtype on CUDA sm80+ and on the CPU from torch
  2.9; its backward calls it twice more). The meta kernel (_meta_registrations.py,
  `_meta_grouped_mm_common`) accepts bfloat16 only in torch 2.13 ("Expected inputs of BF16
  type") and bfloat16 and float16 in 2.14 ("Expected mat_a to be BFloat16 or supported
  Float16 matrix"); the CUDA kernel (`_grouped_mm_cuda`, GroupedBlas.cpp) and the
  CPU's accept float32, float16 and bfloat16 (`_grouped_mm_validate_inputs`,
  GroupedMMUtils.h), and run every dtype but bfloat16 (on CUDA: bfloat16 on sm90/sm100,
  whose CUTLASS kernel the meta kernel sizes) through `_grouped_mm_fallback`: one `mm_out` a group into slices of the output. What that allocates
  on the device is the output alone (`create_grouped_gemm_output_tensor`: its last dimension's
  stride padded to 16 bytes; `offs` is copied to the host), so the stand-in makes that
  output, after the device's own checks (same messages). Seen on the simulated H100 (the
  referee, docs/accuracy.md): exaone_moe, laguna, mellum, mimo_v2_flash, nemo_speechlm and the
  zoo's Mixtral and Qwen2-MoE AdamW steps run there in float32, and their estimates failed.
The TorchScript front end makes the same output in C++ (groupedMmMeta in
estimator/torchscript/op_rules.cpp); each is tested against the real op (test_op_rules.py there,
test_device_step.py here), and the two against each other over one list of cases (layouts, the
three dtypes, a padded row: test_device_step.py's test_grouped_mm_is_one_rule_in_cpp_and_python). A stand-in applies to fake tensors only: on real ones (the run for
the example's data-dependent values: Note [Data-dependent values] in step_recorder.py) the op
runs as it is.

Note [A view's strides as the device gives them]
A fake tensor's view (`aten::view`, `aten::_unsafe_view`: reshape, flatten, unflatten when no
copy is needed) is sized by torch._refs._reshape_view_helper, which gives a dimension of size 1
another stride than the device's kernel does: every device runs ATen's `computeStride`
(aten/src/ATen/TensorUtils.cpp), which strides a size-1 dimension by where it falls in the
input's chunks. Torch 2.14.1, the input (1, 3136, 64) transposed to (1, 64, 3136) and viewed as
(1, 64, 56, 56): the device's strides are (64, 1, 3584, 64), the fake tensor's
(200704, 1, 3584, 64). Memory is the same, but the layout checks read the size-1 stride:
`suggest_memory_format` (c10's is_channels_last_strides_2d) finds the device's tensor not
channels-last, so CUDA's convolution backend takes it contiguous, and a depthwise convolution
runs CUDA's own kernel on a contiguous copy of its input (Note [The device's kernels on fake
tensors] in device_kernels.py), while the fake tensor reads as channels-last, uncopied. Seen on
the simulated H100: pvt_v2's depthwise convolutions at batch 1, the input's copy (3,211,264 B)
live at the forward's peak, estimated −5.44 % without it (batch 2 exact: no size-1 dimension).
So the recording's view of a fake tensor is remade with computeStride's strides
(`device_view_strides`, ATen's loop in Python) where they differ: an `as_strided` view of the
same storage, nothing allocated. Tested against the CPU's own views (test_device_step.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .. import _torch_internals


def stand_in(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any] | None:
    """The stand-in that runs this call instead of the op's meta kernel, or None (the op's
    own fake kernel takes it). `name` is the op as the recorder names it (aten::_grouped_mm)."""
    if name in _VIEWS and len(args) >= 2 and isinstance(args[1], (list, tuple)) and \
            isinstance(args[0], _torch_internals.fake_tensor_type()):
        return lambda: device_view(name, args[0], args[1])
    if name != "aten::_grouped_mm" or not args:
        return None
    import torch
    dtype = getattr(args[0], "dtype", None)
    if not isinstance(args[0], _torch_internals.fake_tensor_type()) or \
            dtype not in (torch.float32, torch.float16):
        return None  # bfloat16: the meta kernel's (the fast path's output is made alike)
    return lambda: grouped_mm_fallback(*args, **kwargs)


# The views whose strides a fake tensor takes from torch._refs (Note [A view's strides as the
# device gives them]).
_VIEWS = ("aten::view", "aten::_unsafe_view")


def device_view(name: str, tensor: Any, shape: Sequence[Any]) -> Any:
    """`tensor.view(shape)` (or `_unsafe_view`) on a fake tensor, with the strides the device's
    kernel gives it (Note [A view's strides as the device gives them])."""
    import torch
    op = torch.ops.aten.view.default if name == "aten::view" else \
        _torch_internals.aten_op("_unsafe_view").default
    view = op(tensor, shape)
    strides = device_view_strides(tensor.shape, tensor.stride(), view.shape)
    if strides is None or list(view.stride()) == strides:
        return view
    return torch.as_strided(tensor, view.shape, strides, tensor.storage_offset())


def device_view_strides(shape: Sequence[Any], strides: Sequence[Any],
                        new_shape: Sequence[Any]) -> list[int] | None:
    """ATen's computeStride (aten/src/ATen/TensorUtils.cpp): the strides of a view of a tensor
    of `shape` and `strides` as `new_shape`, or None where no view can be made (or a size is
    symbolic: the fake kernel's strides are kept). The input's dimensions are walked from the
    last in chunks of contiguous memory; a size-1 dimension of the view takes the stride of
    where it falls."""
    if not all(type(size) is int for size in (*shape, *strides, *new_shape)):
        return None
    if not shape:
        return [1] * len(new_shape)
    numel = math.prod(shape)
    if numel == 0:
        if list(shape) == list(new_shape):
            return list(strides)
        result = [0] * len(new_shape)
        for view_d in range(len(new_shape) - 1, -1, -1):
            result[view_d] = 1 if view_d == len(new_shape) - 1 else \
                max(new_shape[view_d + 1], 1) * result[view_d + 1]
        return result
    result = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1]  # the stride of each subspace in the chunk
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        # the end of a chunk of the input: the view's dimensions up to its size
        if tensor_d == 0 or (shape[tensor_d - 1] != 1 and
                             strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                result[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return result if view_d == -1 else None


def grouped_mm_fallback(mat_a: Any, mat_b: Any, offs: Any = None, bias: Any = None,
                        out_dtype: Any = None) -> Any:
    """`_grouped_mm` as the device runs it outside its bfloat16 fast path (GroupedMMUtils.h:
    `_grouped_mm_validate_inputs`, `_resolve_grouped_mm_out_dtype`,
    `create_grouped_gemm_output_tensor`): the checks, then the output, empty (the groups' mm_out
    write into it and allocate nothing)."""
    import torch
    accepted = (torch.float32, torch.bfloat16, torch.float16)
    for label, mat in (("mat_a", mat_a), ("mat_b", mat_b)):
        _check(mat.dtype in accepted, f"Expected {label} to be Float32, BFloat16 or Float16 "
                                      f"matrix, got {mat.dtype}")
        _check(mat.dim() in (2, 3), f"{label} has to be 2 or 3d")
    a_is_2d, b_is_2d = mat_a.dim() == 2, mat_b.dim() == 2
    if not a_is_2d or not b_is_2d:
        _check(mat_a.size(-1) == mat_b.size(-2), "contraction dimension of mat_a and mat_b must "
                                                 "match")
    _check_strides(mat_a)
    _check_strides(mat_b)
    _check((offs is not None) == (a_is_2d or b_is_2d), "Have to provide offsets if there is a 2d "
           "matrix, or no offset if both matrices are 3d")
    if offs is not None:
        _check(offs.dim() == 1, "offs has to be 1D")
        _check(offs.dtype == torch.int32, "Offsets have to be int32")
    _check(bias is None, "Bias not supported yet")
    dtype = out_dtype if out_dtype is not None else mat_a.dtype
    _check(dtype == mat_a.dtype, "Grouped gemm output dtype must match `mat_a` dtype")
    # The fallback's mm_out per group takes one dtype (at::mm: "expected m1 and m2 to have the
    # same dtype").
    _check(mat_b.dtype == mat_a.dtype, f"expected m1 and m2 to have the same dtype, but got: "
                                       f"{mat_a.dtype} != {mat_b.dtype}")
    if a_is_2d:
        if b_is_2d:
            size = [offs.size(0), mat_a.size(0), mat_b.size(1)]
        else:
            _check(offs.size(0) == mat_b.size(0), "matrix batch sizes have to match")
            size = [mat_a.size(0), mat_b.size(-1)]
    elif b_is_2d:
        _check(offs.size(0) == mat_a.size(0), "matrix batch sizes have to match")
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        _check(mat_a.size(0) == mat_b.size(0), "batched dimension has to match")
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    # Strides of 1 or of a multiple of 16 bytes (the kernels' TMA transfers), on every backend
    # but ROCm's.
    alignment = 16 // mat_a.element_size()
    padded = (size[-1] + alignment - 1) // alignment * alignment
    stride = [padded, 1] if a_is_2d != b_is_2d else [size[1] * padded, padded, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=mat_a.device)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(message)


def _check_strides(mat: Any) -> None:
    """check_valid_strides_and_return_transposed: row- or column-major in the last two
    dimensions, the leading stride a multiple of 16 bytes (the data pointer's alignment is the
    allocator's: always on the device)."""
    alignment = 16 // mat.element_size()
    rows, columns = mat.size(-2), mat.size(-1)
    row_stride, column_stride = mat.stride(-2), mat.stride(-1)
    if row_stride == 1 and column_stride >= max(1, rows):
        _check(column_stride % alignment == 0, "strides should be multiple of 16 bytes")
    elif column_stride == 1 and row_stride >= max(1, columns):
        _check(row_stride % alignment == 0, "strides should be multiple of 16 bytes")
    else:
        raise RuntimeError(f"Invalid strides/sizes, got {list(mat.stride())} for strides and "
                           f"{list(mat.shape)} for sizes")


__all__ = ["device_view", "device_view_strides", "grouped_mm_fallback", "stand_in"]
