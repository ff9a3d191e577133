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
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _torch_internals


def stand_in(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any] | None:
    """The stand-in that runs this call instead of the op's meta kernel, or None (the op's
    own fake kernel takes it). `name` is the op as the recorder names it (aten::_grouped_mm)."""
    if name != "aten::_grouped_mm" or not args:
        return None
    import torch
    dtype = getattr(args[0], "dtype", None)
    if not isinstance(args[0], _torch_internals.fake_tensor_type()) or \
            dtype not in (torch.float32, torch.float16):
        return None  # bfloat16: the meta kernel's (the fast path's output is made alike)
    return lambda: grouped_mm_fallback(*args, **kwargs)


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


__all__ = ["grouped_mm_fallback", "stand_in"]
