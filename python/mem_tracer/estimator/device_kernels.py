"""The kernels the estimated device runs, applied to a step recorded on fake tensors
(mem_tracer.estimator.step_graph): the device profile's sdpa kernel and the device's dropout, and
which of the optimizer's tensors the device keeps in host memory.

Note [The device's kernels on fake tensors]
The step is recorded on fake CPU tensors whatever the device estimated for: a fake CUDA tensor
cannot take part in autograd in a CPU build of torch (its graph node asks CUDA for a stream
and the process aborts), nor safely in a CUDA build without a GPU, and on a GPU its backward
would run on the autograd engine's device thread, out of the recording's reach. ATen's
composite ops that pick a kernel by device then take the CPU's. Where that changes memory, the
device's choice is made here, from the profile, and the ATen op the device would run is called
instead (its fake kernel sizes its outputs; autograd saves what its derivative formula names):
- scaled_dot_product_attention: the profile's kernels in its order, each with the checks
  sdp_utils.cpp makes (dtype, head dims, mask, dropout, causal, layout), the first that takes
  the call wins; then what attention.cpp does around the chosen op: a bool mask made additive,
  the efficient kernel's mask expanded to (B, H, L, S) and padded to 16 (preprocess_mask), the
  head dim padded to 8 for flash, and in training (an input requires grad, grad mode on) a
  logsumexp computed and saved for backward (should_compute_logsumexp). Without a fitting
  fused kernel, the math fallback as attention.cpp writes it, with the device's dropout.
- dropout: an out-of-place dropout on CUDA is native_dropout, which saves a bool mask (one
  byte an element); the CPU's is bernoulli noise in the input's dtype (four bytes an element
  in float32). In-place and feature dropout are the same on both (dropout.cpp).
- convolution: on CUDA, `_convolution` (Convolution.cpp) calls the backend with
  `input.contiguous(format)`, and cuDNN's forward (cudnn/ConvShared.cpp,
  cudnn_convolution_forward_out) makes `weight.contiguous(format)` after allocating the output;
  the format is channels-last when the weight is 4-d (5-d: channels-last 3d) and the input or
  the weight has channels-last strides (cudnn_conv_suggest_memory_format; never for float64),
  else contiguous. An operand not already in that format is copied for the call and released
  when it returns: a channels-last activation meeting a contiguous weight (ConvNeXt's
  downsampling convolutions: the weight's bytes), a contiguous or strided input meeting a
  channels-last weight, a transposed input of a 1-d convolution. Seen on the simulated H100
  (torch 2.14.1+cu130, PyTorch's own code around the simulated cuDNN): input copy, output,
  weight copy, weight copy freed, input copy freed; a weight whose layout is the same in both
  formats (depthwise, C_in/groups = 1; or a 1x1 kernel) is not copied. The recording makes the
  same copies around the fake convolution, off the autograd graph (autograd saves the operands
  as passed); the output's layout is the fake CPU kernel's, which picks channels-last as cuDNN
  does for 2-d float convolutions (not for float64, nor 3-d: a later op's strides may then
  differ from the card's). The backward's copies (cudnn_convolution_backward_*) are not made.
  memtrace-estimate's TorchScript front end (a .pt file, method="torchscript") makes the same
  forward copies (convolutionRule in estimator/torchscript/op_rules.cpp; test_op_rules.py
  holds the two front ends equal).
  With cuDNN disabled, ATen's own kernels instead: Note [CUDA's convolution without cuDNN].
The CPU's own profile changes nothing: the fake CPU tensors run the CPU's composites. Not
applied: CUDA's autocast op lists (the recording runs the CPU's), cuDNN's RNN sizes (its calls
in a training step are made as RNN.cpp makes them, with the simulated cuDNN's reserve and work
space, and bracketed: Note [cuDNN's RNN reserve, bracketed]), what a
CUDA kernel allocates inside itself but what step_recorder.py records (Note [What a CUDA kernel
allocates inside itself]: softmax's and layer norm's temporaries; the memory-efficient attention
backward's buffers and workspace, Note [The efficient attention backward's buffers]), and the
model's own Python branches on `tensor.device.type` (they take the CPU's branch).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .. import _torch_internals


class KernelRulesError(Exception):
    """The device profile cannot be read (a missing file, a field of the wrong type)."""


@dataclass(frozen=True)
class SdpaKernel:
    """One fused sdpa kernel's checks, as the profile's `kernels.sdpa.<name>` states them
    (docs/estimate-format.md, "Device profiles")."""

    name: str  # flash, efficient, cudnn (flash_cpu is the CPU's own)
    dtypes: tuple[str, ...]
    max_head_dim: int = 0  # 0: no limit
    head_dim_multiple: int = 1
    head_dim_alignment_bytes: int = 1
    same_head_dims: bool = False
    gqa: bool = True  # takes fewer key heads than query heads (enable_gqa)
    mask: bool = True
    dropout: bool = True
    # dropout_p * dropout_resolution must be whole (cuDNN's resolution is 1/16); 0: any.
    dropout_resolution: int = 0
    causal_needs_square: bool = False
    pad_head_dim_to: int = 1
    pad_mask_to: int = 1
    # What it allocates (read for the TorchScript front end's sizes; the recording's fake
    # kernels make their own outputs).
    logsumexp: bool = False
    bhld_output: bool = False
    output_like_query: bool = False


@dataclass(frozen=True)
class SdpaTensor:
    """One of query, key and value, as the choice sees it (estimator/sdpa_choice.h)."""

    sizes: tuple[int, ...]
    last_stride: int = 1
    nested: bool = False

    @classmethod
    def of(cls, tensor: Any) -> SdpaTensor:
        if tensor.is_nested:  # no sizes of its own: its rank is all the choice reads
            return cls((0,) * tensor.dim(), 1, True)
        return cls(tuple(tensor.shape), tensor.stride(-1) if tensor.dim() else 1, False)


@dataclass(frozen=True)
class SdpaCall:
    """The facts of one sdpa call the kernel choice reads (Note [sdpa's kernel choice],
    estimator/sdpa_choice.h, whose SdpaCall is this one field for field)."""

    query: SdpaTensor
    key: SdpaTensor
    value: SdpaTensor
    dtype: str  # the query's, estimator names (float16, ...)
    element_size: int  # the query's, in bytes
    mask: bool = False
    dropout: float = 0.0
    is_causal: bool = False
    enable_gqa: bool = False

    @classmethod
    def of(cls, query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
           is_causal: bool = False, enable_gqa: bool = False) -> SdpaCall:
        return cls(SdpaTensor.of(query), SdpaTensor.of(key), SdpaTensor.of(value),
                   _dtype_name(query.dtype), query.element_size(), attn_mask is not None,
                   float(dropout_p), bool(is_causal), bool(enable_gqa))


@dataclass(frozen=True)
class KernelTemporary:
    """One entry of the profile's `kernels.temporaries` (Note [What a CUDA kernel allocates
    inside itself] in step_recorder.py; estimator/device_profile.cpp reads the same): a
    temporary `op`'s kernel takes inside itself, of the elements of its argument `like`."""

    op: str  # "aten::native_layer_norm"
    like: str  # the argument it has the elements of
    dtype_of: tuple[str, ...]  # the arguments whose result type it takes; empty: `like`'s
    before_outputs: bool  # taken before the op's outputs; else after them
    only_if_not_contiguous: bool  # a copy of `like`, made only when it is not contiguous
    what: str


@dataclass(frozen=True)
class KernelRules:
    """The profile's `kernels`: the device whose kernels run, sdpa's kernels in order, and
    the temporaries kernels take inside themselves."""

    device: str = "cpu"
    sdpa: tuple[SdpaKernel, ...] = ()
    temporaries: tuple[KernelTemporary, ...] = ()
    profile: str = ""  # the profile's name

    @property
    def recorded_as_is(self) -> bool:
        """Whether the fake CPU tensors already run this device's kernels."""
        return self.device == "cpu"


CPU_RULES = KernelRules()


def profile_path(profile: str | os.PathLike[str]) -> Path:
    """The .json file of a profile name (memtrace-estimate --list-devices) or path."""
    text = os.fspath(profile)
    if "/" in text or text.endswith(".json"):
        return Path(text)
    from .. import _native
    return _native.estimator_path().parent / "profiles" / f"{text}.json"


def kernel_rules(profile: str | os.PathLike[str]) -> KernelRules:
    """The kernel rules of a device profile (a name, or the path of its .json)."""
    path = profile_path(profile)
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise KernelRulesError(f"device profile {os.fspath(profile)}: cannot be read "
                               f"({path}: {error})") from error
    kernels = document.get("kernels") if isinstance(document, dict) else None
    if kernels is None:
        # Without `kernels` the estimator takes the device for CUDA with sdpa's math fallback.
        return KernelRules(device="cuda")
    sdpa = kernels.get("sdpa") or {}
    chosen = []
    for name in sdpa.get("order", []):
        if name == "math":
            break  # the fallback
        if name not in SDPA_KERNELS:
            raise KernelRulesError(f"device profile {path}: unknown sdpa kernel {name!r} (known: "
                                   f"{', '.join(SDPA_KERNELS)}, math)")
        entry = sdpa.get(name)
        if not isinstance(entry, dict):
            raise KernelRulesError(f"device profile {path}: sdpa kernel {name!r} has no entry")
        chosen.append(_sdpa_kernel(name, entry, path))
    device = kernels.get("device", "cuda")
    if device not in ("cuda", "cpu"):
        raise KernelRulesError(f"device profile {path}: kernels: \"device\" must be \"cuda\" or "
                               f"\"cpu\"")
    return KernelRules(device=device, sdpa=tuple(chosen),
                       temporaries=_temporaries(kernels.get("temporaries", []), path),
                       profile=str(document.get("name", "")))


def _temporaries(entries: Any, path: Path) -> tuple[KernelTemporary, ...]:
    """`kernels.temporaries`, each field checked as estimator/device_profile.cpp checks it."""
    where = f"device profile {path}: kernels: temporaries"
    if not isinstance(entries, list):
        raise KernelRulesError(f"{where} must be a list")
    read = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise KernelRulesError(f"{where}: each entry must be an object")
        texts: dict[str, str] = {}
        for key in ("op", "like", "when", "what"):
            value = entry.get(key)
            if not isinstance(value, str) or not value:
                raise KernelRulesError(f"{where}: {key!r} must be a non-empty string")
            texts[key] = value
        if texts["when"] not in ("before_outputs", "after_outputs"):
            raise KernelRulesError(f"{where}: {texts['op']}: 'when' must be 'before_outputs' "
                                   "or 'after_outputs'")
        dtype_of = entry.get("dtype_of", [])
        if not isinstance(dtype_of, list) or not all(isinstance(n, str) for n in dtype_of):
            raise KernelRulesError(f"{where}: {texts['op']}: 'dtype_of' must list arguments")
        copy_only = entry.get("only_if_not_contiguous", False)
        if not isinstance(copy_only, bool):
            raise KernelRulesError(f"{where}: {texts['op']}: 'only_if_not_contiguous' must be "
                                   "true or false")
        read.append(KernelTemporary(texts["op"], texts["like"], tuple(dtype_of),
                                    texts["when"] == "before_outputs", copy_only, texts["what"]))
    return tuple(read)


# The kernels a profile may name (estimator/device_profile.cpp knows the same).
SDPA_KERNELS = ("flash", "efficient", "cudnn", "flash_cpu")
# The fields that are at least 1 when stated (a multiple, a padding): 0 reads as 1.
_AT_LEAST_ONE = ("head_dim_multiple", "head_dim_alignment_bytes", "pad_head_dim_to",
                 "pad_mask_to")


def _sdpa_kernel(name: str, entry: dict[str, Any], path: Path) -> SdpaKernel:
    """One `kernels.sdpa.<name>` entry, each field checked for its type as
    estimator/device_profile.cpp checks it."""
    fields: dict[str, Any] = {}
    for key, spec in SdpaKernel.__dataclass_fields__.items():
        if key == "name" or key not in entry or entry[key] is None:
            continue
        value = entry[key]
        where = f"device profile {path}: sdpa kernel {name!r}: {key!r}"
        if key == "dtypes":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise KernelRulesError(f"{where} must be a list of dtype names")
            value = tuple(value)
        elif spec.type == "bool":
            if not isinstance(value, bool):
                raise KernelRulesError(f"{where} must be true or false")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise KernelRulesError(f"{where} must be a non-negative integer")
        elif key in _AT_LEAST_ONE:
            value = max(1, value)
        fields[key] = value
    if "dtypes" not in fields:
        raise KernelRulesError(f"device profile {path}: sdpa kernel {name!r}: missing 'dtypes'")
    # `gqa_from_torch`: the release from which the kernel takes grouped heads, though `gqa` says
    # no for the releases before it (the recording runs under the user's torch; the TorchScript
    # front end under the release `--torch` names, which estimate() sets to this torch's).
    since = entry.get("gqa_from_torch")
    if since is not None:
        if not isinstance(since, str) or not re.fullmatch(r"\d+\.\d+", since):
            raise KernelRulesError(f"device profile {path}: sdpa kernel {name!r}: "
                                   "'gqa_from_torch' must be a release, as \"2.14\"")
        if _torch_internals.torch_release() >= _torch_internals.torch_release(since):
            fields["gqa"] = True
    return SdpaKernel(name=name, **fields)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def sdpa_rejects(kernel: SdpaKernel, call: SdpaCall) -> str:
    """Why `kernel` cannot run this call; "" when it can (Note [sdpa's kernel choice]:
    estimator/sdpa_choice.cpp's sdpaRejects, check for check; tests/estimator/sdpa_cases.json
    holds both to the same answers)."""
    q, k, v = call.query, call.key, call.value
    if len(q.sizes) != 4 or len(k.sizes) != 4 or len(v.sizes) != 4:
        return "inputs are not 4-d"
    if q.nested or k.nested or v.nested:
        return "nested inputs"
    if call.dtype not in kernel.dtypes:
        return f"dtype {call.dtype} not supported"
    if call.dropout > 0 and not kernel.dropout:
        return "dropout_p > 0"
    if kernel.dropout_resolution:
        steps = call.dropout * kernel.dropout_resolution
        if steps != math.floor(steps):
            return f"dropout_p not a multiple of 1/{kernel.dropout_resolution}"
    if call.mask and not kernel.mask:
        return "an attn_mask is given"
    head_q, head_k, head_v = q.sizes[-1], k.sizes[-1], v.sizes[-1]
    if head_q != head_k or (kernel.same_head_dims and head_q != head_v):
        return "head dims differ"
    if kernel.max_head_dim and (head_q > kernel.max_head_dim or head_v > kernel.max_head_dim):
        return f"head dim above {kernel.max_head_dim}"
    for size in (head_q, head_v):
        if size % kernel.head_dim_multiple or \
                (size * call.element_size) % kernel.head_dim_alignment_bytes:
            return f"head dim {size} not aligned"
    if not q.sizes[0] == k.sizes[0] == v.sizes[0]:
        return "batch sizes differ"
    # One key and value head serves every query head in every kernel, enable_gqa or not
    # (Note [sdpa's kernel choice]).
    key_heads_serve = q.sizes[1] == k.sizes[1] or k.sizes[1] == 1 or (
        kernel.gqa and call.enable_gqa and q.sizes[1] % k.sizes[1] == 0)
    if k.sizes[1] != v.sizes[1] or not key_heads_serve:
        return "query and key heads differ"
    for tensor in (q, k, v):
        if tensor.sizes[-1] != 1 and tensor.last_stride != 1:
            return "last dim not contiguous"
        if tensor.sizes[-2] == 0:
            return "an empty sequence"
    if kernel.causal_needs_square and call.is_causal and q.sizes[2] != k.sizes[2]:
        return "is_causal with L != S"
    return ""


def sdpa_choice(rules: KernelRules, call: SdpaCall) -> tuple[str, str]:
    """The kernel the device runs for this sdpa call, and why (the checks the kernels before
    it failed): ("efficient", "not cudnn: dtype float32 not supported; ...")."""
    rejected: list[str] = []
    for kernel in rules.sdpa:
        why = sdpa_rejects(kernel, call)
        if not why:
            return kernel.name, ("; ".join(rejected) if rejected
                                 else "the profile's first choice that takes these inputs")
        rejected.append(f"not {kernel.name}: {why}")
    return "math", "; ".join(rejected) if rejected else "the profile names no fused kernel"


# -- what the device runs -----------------------------------------------------------------

def device_dropout(input: Any, p: float) -> Any:
    """Out-of-place dropout in training as CUDA runs it (dropout.cpp: is_fused_kernel_acceptable):
    native_dropout, whose bool mask autograd saves."""
    import torch
    if 0 < p < 1 and input.numel() > 0:
        return torch.ops.aten.native_dropout(input, p, True)[0]
    return torch.dropout(input, p, True)


def _additive_mask(mask: Any, dtype: Any) -> Any:
    """convert_boolean_attn_mask: a bool mask becomes 0 / -inf in the query's dtype."""
    import torch
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask.logical_not(), float("-inf"),
                       torch.scalar_tensor(0.0, dtype=dtype, device=mask.device))


def _padded_mask(mask: Any, query: Any, key: Any, alignment: int) -> Any:
    """preprocess_mask: the efficient kernel's mask, expanded to (B, H, L, S), padded when S is
    not aligned (a copy), made contiguous when its strides are not aligned."""
    import torch.nn.functional as F
    expanded = mask.expand(query.size(0), query.size(1), query.size(2), key.size(2))
    source = expanded.size(-1)
    if source % alignment:
        return F.pad(expanded, (0, alignment - source % alignment))[..., :source]
    if any(expanded.stride(dim) % alignment for dim in range(3)):
        return expanded.contiguous()
    return expanded


def _math_attention(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float,
                    is_causal: bool, scale: float | None, enable_gqa: bool) -> Any:
    """attention.cpp's _scaled_dot_product_attention_math, with the device's dropout."""
    import torch
    if enable_gqa and query.size(-3) != key.size(-3):
        key = key.repeat_interleave(query.size(-3) // key.size(-3), -3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), -3)
    factor = math.sqrt(scale if scale is not None else 1 / math.sqrt(query.size(-1)))
    query = query * factor
    if is_causal:
        causal = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool,
                            device=query.device).tril()
        attn_mask = _additive_mask(causal, query.dtype)
    attention = torch.matmul(query, key.transpose(-2, -1) * factor)
    if attn_mask is not None:
        attention.add_(attn_mask)
    attention = _torch_internals.aten_op("_safe_softmax")(attention, -1)
    if dropout_p > 0:
        attention = device_dropout(attention, dropout_p)
    return torch.matmul(attention, value)


def device_sdpa(kernel: str, query: Any, key: Any, value: Any, attn_mask: Any = None,
                dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                enable_gqa: bool = False, *, mask_alignment: int = 16,
                head_dim_padding: int = 8) -> Any:
    """scaled_dot_product_attention as attention.cpp runs it on CUDA once `kernel` is chosen."""
    import torch
    import torch.nn.functional as F
    aten = _torch_internals.aten_op
    logsumexp = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    mask = _additive_mask(attn_mask, query.dtype)
    if kernel == "cudnn":
        return aten("_scaled_dot_product_cudnn_attention")(query, key, value, mask, logsumexp,
                                                           dropout_p, is_causal, False,
                                                           scale=scale)[0]
    if kernel == "flash":
        size = query.size(-1)
        pad = (-size) % head_dim_padding
        padded = [F.pad(t, (0, pad)) if pad else t for t in (query, key, value)]
        output = aten("_scaled_dot_product_flash_attention")(
            *padded, dropout_p, is_causal, False,
            scale=scale if scale is not None else 1 / math.sqrt(size))[0]
        return output[..., :size] if pad else output
    if kernel == "efficient":
        if mask is not None:
            mask = _padded_mask(mask, query, key, mask_alignment)
        return aten("_scaled_dot_product_efficient_attention")(query, key, value, mask,
                                                               logsumexp, dropout_p, is_causal,
                                                               scale=scale)[0]
    return _math_attention(query, key, value, mask, dropout_p, is_causal, scale, enable_gqa)


_SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                    "enable_gqa")
_SDPA_DEFAULTS: dict[str, Any] = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False,
                                  "scale": None, "enable_gqa": False}

# The convolutions whose operands CUDA copies into the backend's memory format (the Note above).
_CONVOLUTIONS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                 "conv_transpose3d")


def _strides_like_channels_last(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """c10's is_channels_last_strides_2d_s4 / 3d_s5 (c10/core/MemoryFormat.h), which
    Tensor.suggest_memory_format() reads: C innermost, then W, H (D), N; ambiguous layouts
    (a size-1 or zero-stride channel dimension) read as contiguous."""
    order = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}.get(len(sizes))
    if order is None or strides[1] == 0:
        return False
    minimum = 0
    for dim in order:
        if sizes[dim] == 0 or strides[dim] < minimum:
            return False
        if dim == 0 and minimum == strides[1]:
            return False
        minimum = strides[dim] * max(1, sizes[dim])
    return True


def convolution_memory_format(input: Any, weight: Any) -> Any:
    """The memory format CUDA's convolution backend wants its operands in
    (cudnn_conv_suggest_memory_format; a 1-d convolution's is contiguous)."""
    import torch
    if torch.float64 in (input.dtype, weight.dtype):
        return torch.contiguous_format
    layouts = [_strides_like_channels_last(t.shape, t.stride()) for t in (input, weight)]
    if weight.dim() == 4 and any(layouts):
        return torch.channels_last
    if weight.dim() == 5 and any(layouts):
        return torch.channels_last_3d
    return torch.contiguous_format


def device_convolution(func: Any, args: Sequence[Any], kwargs: dict[str, Any],
                       cuda_without_cudnn: bool = False) -> Any:
    """A convolution with the copies CUDA makes of its operands (the Note above): the input's
    before the output, the weight's after it, both released when the call returns. With
    `cuda_without_cudnn` (cuDNN disabled on a CUDA device), ATen's own kernel where Note [CUDA's
    convolution without cuDNN] models it."""
    import torch
    input = args[0] if args else kwargs.get("input")
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor) or \
            input.numel() == 0 or input.dim() not in (weight.dim(), weight.dim() - 1):
        return func(*args, **kwargs)
    if cuda_without_cudnn:
        native = _native_convolution(func, input, weight, args, kwargs)
        if native is not None:
            return native
    batched = input if input.dim() == weight.dim() else input.unsqueeze(0)
    memory_format = convolution_memory_format(batched, weight)
    with torch.no_grad():
        staged = None if batched.is_contiguous(memory_format=memory_format) else \
            batched.contiguous(memory_format=memory_format)
    output = func(*args, **kwargs)
    if not weight.is_contiguous(memory_format=memory_format):
        with torch.no_grad():
            weight.contiguous(memory_format=memory_format)  # cuDNN's copy, freed on return
    del staged
    return output


# Note [CUDA's convolution without cuDNN]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# With cuDNN disabled (`torch.backends.cudnn.flags(enabled=False)`, as transformers'
# pe_audio runs its DAC encoder), CUDA's `_convolution` (aten/src/ATen/native/Convolution.cpp,
# select_conv_backend) takes ATen's own kernels: for a non-transposed 1-d or 2-d convolution of
# one group (a 1-d one viewed as 2-d: view1d_as_2d), `slow_conv_dilated2d` where a dilation is
# not 1, else `_slow_conv2d_forward` (thnn_conv2d). Both work a batch element at a time through
# an im2col buffer, the "columns", of (C_in * kH * kW, outH * outW) elements in the input's
# dtype, taken after the output (cuda/ConvolutionMM2d.cu: only where the kernel, stride or
# padding is not 1, 1, 0; cuda/NaiveDilatedConvolution.cu: always), multiplied with the weight
# by cuBLAS (at::cuda::blas::gemm: the first such call takes cuBLAS's workspace, as a matrix
# product would) and freed as the call returns. Seen on the simulated H100 (torch 2.14.1,
# PyTorch's own code around the simulated cuBLAS): pe_audio's first convolution (1 -> 64
# channels, kernel 7, 4,000 samples) takes the output (1,024,000 B), its columns (112,000 B),
# then cuBLAS's 32 MiB workspace, and frees the columns; a dilated one (64 -> 64, kernel 7,
# dilation 3) its output, then 7,168,000 B of columns. The recording calls that op instead of
# the convolution (step_recorder.py adds its columns: Note [What a CUDA kernel allocates inside
# itself]), and the CUDA profiles list both ops among cuBLAS's. Not modelled (left to the
# convolution as recorded): groups above 1 (the slow path convolves each group and
# concatenates), transposed and 3-d convolutions, padding given as a string, and the slow
# kernels' backward (columns again, and a gradient of the weight's size).
_NATIVE_CONVOLUTIONS = ("conv1d", "conv2d")


def _pairs(value: Any, dims: int) -> list[int] | None:
    """A convolution's stride, padding or dilation as `dims` integers (None: a string)."""
    if isinstance(value, str):
        return None
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    return values * dims if len(values) == 1 else values


def _native_convolution(func: Any, input: Any, weight: Any, args: Sequence[Any],
                        kwargs: dict[str, Any]) -> Any | None:
    """Note [CUDA's convolution without cuDNN]: the op CUDA runs, on the recording's tensors, or
    None where the Note does not model it."""
    import torch
    if func not in {getattr(torch, name) for name in _NATIVE_CONVOLUTIONS}:
        return None
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    call = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1,
            **dict(zip(names, args)), **kwargs}
    dims = weight.dim() - 2
    stride, padding, dilation = (_pairs(call[key], dims) for key in ("stride", "padding",
                                                                     "dilation"))
    if call["groups"] != 1 or stride is None or padding is None or dilation is None or \
            not input.is_floating_point():
        return None
    batched = input if input.dim() == weight.dim() else input.unsqueeze(0)
    if not batched.is_contiguous() and batched.requires_grad and torch.is_grad_enabled():
        return None  # autograd would save the kernel's own copy: left as recorded
    with torch.no_grad():  # `_convolution`'s input.contiguous(), held for the call
        operand = batched if batched.is_contiguous() else batched.contiguous()
    kernel_weight = weight
    if dims == 1:  # view1d_as_2d
        operand, kernel_weight = operand.unsqueeze(2), weight.unsqueeze(2)
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    kernel_size = list(kernel_weight.shape[2:])
    if any(d != 1 for d in dilation):
        output = torch.ops.aten.slow_conv_dilated2d(operand, kernel_weight, kernel_size,
                                                    call["bias"], stride, padding, dilation)
    else:
        output = _torch_internals.aten_op("_slow_conv2d_forward")(
            operand, kernel_weight, kernel_size, call["bias"], stride, padding)
    if dims == 1:
        output = output.squeeze(2)
    return output if input.dim() == weight.dim() else output.squeeze(0)


def native_convolution_columns(name: str, args: Sequence[Any]) -> list[int] | None:
    """The shape of the columns buffer the op takes after its output (Note [CUDA's
    convolution without cuDNN]), or None where it takes none."""
    if name not in ("aten::_slow_conv2d_forward", "aten::slow_conv_dilated2d") or len(args) < 6:
        return None
    input, weight, kernel_size, _, stride, padding = args[:6]
    dilation = list(args[6]) if len(args) > 6 else [1, 1]
    if name == "aten::_slow_conv2d_forward" and list(kernel_size) == [1, 1] and \
            list(stride) == [1, 1] and list(padding) == [0, 0]:
        return None
    spatial = 1
    for size, kernel, step, pad, spread in zip(input.shape[2:], kernel_size, stride, padding,
                                               dilation):
        spatial *= (int(size) + 2 * int(pad) - int(spread) * (int(kernel) - 1) - 1) // int(step) + 1
    return [int(weight.shape[1]) * int(kernel_size[0]) * int(kernel_size[1]), spatial]


# Factories that make a tensor where they are told (device=), else on the host: in torch.optim
# the step counts of a group that is neither capturable nor fused (`torch.tensor(0.0)`,
# `device="cpu"`), which the device never holds; `device=p.device` is the parameter's device.
_FACTORIES = ("tensor", "zeros", "ones", "full", "empty", "as_tensor", "scalar_tensor")


# Note [cuDNN's flat RNN weights]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# On CUDA, Module.to(device) ends an nn.LSTM's, GRU's or RNN's move with flatten_parameters()
# (torch/nn/modules/rnn.py, RNNBase._apply): when its flat weights are all tensors of one
# dtype cuDNN takes (half, float, double; cudnn.is_acceptable), none aliasing another,
# torch._cudnn_rnn_flatten_weight (aten/src/ATen/native/cudnn/RNN.cpp) allocates one buffer of
# cuDNN's weight space and points every weight into it, and the weights' own blocks are freed.
# The card's caching allocator then holds the RNN's weights as one block, and one block of
# more than kMinLargeAlloc takes a segment of its own, rounded to kRoundLarge, unsplit when
# less than kSmallSize would remain: allocated_bytes counts the whole segment. Seen on the
# simulated H100 (torch 2.14.1+cu130; torch.cuda.memory._record_memory_history): parakeet_tdt's
# 2-layer LSTM (640, 640) at model.cuda(), its 8 weights moved one by one (26,255,360 B),
# a 27,262,976-byte segment allocated for the flat buffer of 26,255,360 B, the 8 freed: the
# 1,007,616 B the estimate missed on every model with an LSTM prediction network. On a CUDA
# profile the fake copy's RNN weights are made views of one fake buffer in the same order, so
# the document holds them as one storage, as the card does. Assumed of cuDNN: the weight space
# is the weights' bytes, matrices and biases packed without padding (the simulated cuDNN's
# cudnnGetRNNWeightSpaceSize, which equals the sum above). Not modelled: the weights'
# transient blocks before the flatten (they change which segments are reserved, not what is
# allocated after the move: parakeet_tdt's max_memory_reserved is estimated 20 MiB short, one
# segment), cuDNN's RNN workspace inside _cudnn_rnn in evaluation mode (in a training step the
# call is made as cuDNN makes it: Note [cuDNN's RNN reserve, bracketed]), and memtrace-estimate's
# TorchScript front end (method="torchscript"), whose weights stay apart.
_CUDNN_RNN_DTYPES = ("float16", "float32", "float64")


def flatten_rnn_weights(model: Any, rules: KernelRules) -> int:
    """On a CUDA profile, every RNN module of `model` (a fake copy) that flatten_parameters
    would flatten gets its weights as views of one buffer (Note [cuDNN's flat RNN weights]);
    the number of modules flattened."""
    import torch

    if rules.device != "cuda":
        return 0
    flattened = 0
    for module in model.modules():
        if not isinstance(module, torch.nn.RNNBase):
            continue
        weights = _torch_internals.rnn_flat_weights(module)
        if not weights or not all(isinstance(w, torch.Tensor) for w in weights):
            continue
        dtype = weights[0].dtype
        if (_dtype_name(dtype) not in _CUDNN_RNN_DTYPES or any(w.dtype != dtype for w in weights)
                or len({_weight_start(w) for w in weights}) != len(weights)):
            continue
        flat = torch.empty(sum(w.numel() for w in weights), dtype=dtype, device=weights[0].device)
        offset = 0
        with torch.no_grad():
            for weight in weights:
                weight.set_(flat.untyped_storage(), offset, weight.size())
                offset += weight.numel()
        flattened += 1
    return flattened


def _weight_start(tensor: Any) -> tuple[int, int]:
    """Where a weight's data starts (flatten_parameters' check that none alias: data_ptr)."""
    return (_torch_internals.storage_key(tensor.untyped_storage()), tensor.storage_offset())


# Note [cuDNN's RNN reserve, bracketed]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# On CUDA, torch.lstm/gru/rnn_tanh/rnn_relu of a float16/32/64 input run cuDNN's RNN
# (aten/src/ATen/native/cudnn/RNN.cpp, _cudnn_rnn): the call takes a work space for its length
# and, when the RNN's `train` argument is true (the module in training mode), a reserve space
# that autograd keeps until the backward, both sized by cudnnGetRNNTempSpaceSizes, sizes the
# library chooses and documents nowhere. The CPU's RNN, which the fake CPU tensors would run
# (Note [The device's kernels on fake tensors]), keeps each step's gates and states as tensors
# of its own instead, and saves neither the input nor cuDNN's reserve. So on a CUDA profile
# the recording runs cuDNN's call as RNN.cpp makes it, on fake tensors
# (CudnnRnn, an autograd.Function; the values do not matter, nothing reads them):
#   - forward (_cudnn_rnn): the input made contiguous in (time, batch) order (a copy under
#     batch_first), the output, hy and, for an LSTM, cy; the work space and the reserve space
#     (bytes); the work space and the copy freed on return. Autograd keeps the input as given,
#     hx, cx, the output and the reserve (derivatives.yaml's _cudnn_rnn); the weights are the
#     module's (its flat buffer: Note [cuDNN's flat RNN weights]; weights not in one buffer are
#     copied into a new one, kept for the backward).
#   - backward (_cudnn_rnn_backward): zeros for the gradients autograd did not give, then
#     _backward_input (the input and the output's gradient made contiguous, dx, dhx, dcx, a
#     work space; the copies and the work space freed on return) and, when a weight needs one,
#     _backward_weight (the input contiguous again, dw: zeros of the weight buffer's size, a
#     work space); the weights' gradients are views of dw, as get_parameters slices them.
# Seen on the simulated H100 (torch 2.14.1+cu130; torch.cuda.memory._record_memory_history):
# nemotron3_5_asr's prediction network (a 2-layer LSTM of 640 under batch_first, 16 steps,
# batch 2) allocates input copy, output, hy, cy, a 491,520-B work space and a 983,040-B reserve,
# frees the work space then the copy; its output does not reach the loss, so the reserve, the
# embedding's output (the saved input), hx and cx stay until the step ends, through the backward's
# peak: 1,167,360 B of the call's. The CPU's LSTM held 286,720 B there (hx, cx, a copy of the
# input, each layer's output and states), 880,640 B less: the referee's -0.77 % on that model and
# -0.78..-0.80 % on nemotron_asr_streaming, parakeet_rnnt and parakeet_tdt, all exact since.
# (The 14 storages, 1,998,848 B, "held from the step before" an earlier recording kept there, a
# [544, 640] joint output among them, are gone since Note [Saved tensors packed without a cycle]
# in step_loop.py: the joint's outputs do not reach the loss, the kind of node that Note's cycle
# kept alive; the card frees them, and the recording holds no storage from the step before.)
# The sizes are the simulated cuDNN's (simulator/libraries/cudnn_rnn.cpp, Note [RNN spaces]), in
# cudnn_rnn_spaces below: the reserve keeps, per pseudo-layer and (time step, sequence) pair,
# the gates' activations, the cell state (LSTM, GRU) and the output, in the data type, plus a
# byte a dropped element between layers; the work space one layer's input projections in the
# math precision (float for half) and two layer outputs between layers. Against the simulated
# card the step is then exact; against real cuDNN it is not known, so the estimate still says
# "approximate": each such call adds an assumption (step_recorder.py, Recorder.rnn) whose bracket,
# summed into the JSON's `approximate` and Estimate.approximate, is what real cuDNN may hold
# otherwise. Assumed of real cuDNN: its reserve and work space are each between nothing and
# twice the simulated size (not measured on a GPU here: a bound estimated, not known), so the
# peak lies within reserve + work space below or above the figure, per call; assumed too that a
# size so changed keeps the caching allocator's rounding (a block of another size class could
# move max_memory_allocated by its rounding beyond that). Not made as cuDNN makes it, and
# bracketed instead by what the CPU's kernels held beyond the outputs below and twice the sizes
# above: a packed sequence, and an RNN with dropout in training, whose first call of the process
# also makes cuDNN's dropout state, kept for the process (_cudnn_init_dropout_state: one Philox
# state per thread the card holds, 17,301,504 B on the simulated H100, 64 x 132 x 2,048), which
# the recording does not make: the first such call's bracket adds twice the largest simulated
# state of the profile's cards (cudnn_dropout_state_at_most). Seen on the simulated H100: a
# 2-layer LSTM of 64 with dropout 0.1, AdamW, peaks at 18,651,648 B, the estimate 1,350,144 B;
# the bracket [1,315,328, 1,649,152] missed it before the state was in it, and holds it since
# ([1,315,328, 36,252,160]). In evaluation mode (`train` false) the call is made the same way
# without a reserve (the work space, a temporary of the call, bracketed alone): zoo/gru's
# forward at batch 1 on the simulated H100, +0.0365 % with the CPU's GRU, is exact so. The
# TorchScript front end makes the call the same way (Note [cuDNN's RNN in the TorchScript front
# end] in estimator/torchscript/op_rules.cpp, the sizes from simulator/core/cudnn_rnn_spaces.h,
# which tests/estimator/test_rnn_weights.py holds cudnn_rnn_spaces below to).
_RNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


@dataclass(frozen=True)
class CudnnRnnSpaces:
    """What cuDNN's RNN call takes beside its outputs (Note [cuDNN's RNN reserve, bracketed])."""

    op: str
    reserve: int  # the simulated cuDNN's reserve space (0 when not training)
    reserve_at_most: int
    work_at_most: int
    work: int = 0  # the simulated cuDNN's work space
    # The call as cuDNN makes it (CudnnRnn), or None: recorded as the CPU runs it.
    plan: CudnnRnnPlan | None = None
    dropout: float = 0.0
    # With dropout in training: cuDNN's dropout state's bound (made once a process, kept).
    dropout_state_at_most: int = 0


@dataclass(frozen=True)
class CudnnRnnPlan:
    """One RNN call's facts that RNN.cpp's allocations read."""

    lstm: bool
    batch_first: bool
    output_size: int  # a step's output, all directions: the projection's size times directions
    work: int
    reserve: int


def cudnn_rnn_spaces(name: str, args: Sequence[Any]) -> CudnnRnnSpaces | None:
    """torch.<name>(*args)'s cuDNN spaces on a CUDA device, or None where cuDNN would not run
    it (a dtype it does not take, a call not in nn.RNNBase's positional form)."""
    import torch

    if name not in _RNN_GATES or len(args) != 9:
        return None
    packed = isinstance(args[3], (list, tuple))
    data, params = args[0], (args[3] if packed else args[2])
    layers, dropout, train, bidirectional = args[5:9] if packed else args[4:8]
    if not isinstance(data, torch.Tensor) or _dtype_name(data.dtype) not in _CUDNN_RNN_DTYPES \
            or len(params) < 2:
        return None
    gates, directions = _RNN_GATES[name], 2 if bidirectional else 1
    hidden = int(params[0].shape[0]) // gates
    output = int(params[1].shape[1])  # the recurrent matrix: the projection's size, if any
    if packed:  # cuDNN pads to the longest sequence: batch_sizes[0] x len(batch_sizes)
        try:
            steps = int(args[1][0]) * int(args[1].numel())
        except Exception:  # noqa: BLE001 - a fake batch_sizes: the packed count, no fewer
            steps = int(data.shape[0])
    else:
        steps = int(data.shape[0]) * int(data.shape[1])
    element = data.dtype.itemsize
    math_bytes = 4 if data.dtype == torch.float16 else element
    cell = hidden if name in ("lstm", "gru") else 0
    reserve = 0
    if train:
        reserve = layers * directions * steps * (gates * hidden + cell + output) * element
        if dropout > 0 and layers > 1:
            reserve += (layers - 1) * steps * output * directions
    work = steps * gates * hidden * directions * math_bytes
    if layers > 1:
        work += 2 * steps * output * directions * element
    plan = None
    if not packed and not (train and dropout) and data.dim() == 3:
        plan = CudnnRnnPlan(name == "lstm", bool(args[8]), output * directions, work, reserve)
    return CudnnRnnSpaces(f"aten::{name}", reserve, 2 * reserve, 2 * work, work, plan,
                          float(dropout) if train else 0.0)


# The simulated cuDNN's dropout state: one 64-byte Philox state per thread the card holds
# (cudnnDropoutGetStatesSize in simulator/libraries/cudnn_rnn.cpp, Note [RNN spaces]).
_PHILOX_STATE_BYTES = 64
# Where no simulated card of the profile can be read: the largest the simulator has (H100, H200:
# 132 multiprocessors of 2,048 threads).
_DROPOUT_STATE_FALLBACK = _PHILOX_STATE_BYTES * 132 * 2048


@cache
def cudnn_dropout_state_at_most(profile: str) -> int:
    """Twice the largest simulated cuDNN dropout state of the simulated cards estimated with
    `profile` (every simulated card where none names it): the bound Note [cuDNN's RNN reserve,
    bracketed] takes for real cuDNN's."""
    try:
        from ..simulated_gpu import profiles
        cards = profiles()
    except Exception:  # noqa: BLE001 - no simulator beside the package: the fallback bound
        cards = []
    sizes: dict[str, list[int]] = {}
    for card in cards:
        try:
            data = json.loads(card.path.read_text())
            size = _PHILOX_STATE_BYTES * int(data["multiprocessors"]) * int(
                data["max_threads_per_multiprocessor"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        sizes.setdefault(card.estimator_profile, []).append(size)
    chosen = sizes.get(profile) or [size for group in sizes.values() for size in group]
    return 2 * max(chosen, default=_DROPOUT_STATE_FALLBACK)


def cudnn_rnn(spaces: CudnnRnnSpaces, args: Sequence[Any]) -> Any:
    """torch.lstm/gru/rnn_*(*args) (unpacked, nn.RNNBase's positional form) as cuDNN's
    _cudnn_rnn makes it, with its backward (Note [cuDNN's RNN reserve, bracketed]): the
    op's result, on fake tensors."""
    plan = spaces.plan
    assert plan is not None
    data, hidden, params = args[0], args[1], list(args[2])
    hx, cx = (hidden[0], hidden[1]) if plan.lstm else (hidden, None)
    function = _cudnn_rnn_function()
    if cx is None:
        output, hy = function.apply(plan, _weight_layout(params), data, hx, *params)
        return output, hy
    return function.apply(plan, _weight_layout(params), data, hx, cx, *params)


@dataclass(frozen=True)
class _WeightLayout:
    """Where each weight lies in cuDNN's weight buffer: one buffer of `elements` (the module's
    own when `flat`: Note [cuDNN's flat RNN weights]) and each weight's strides and offset."""

    flat: bool
    elements: int
    views: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]


def _weight_layout(params: Sequence[Any]) -> _WeightLayout:
    """As _cudnn_impl's try_get_weight_buf finds it: the weights end to end in one storage
    (the module's flat buffer) or, where they are not, a buffer of their sizes made for the
    call (packed in order, as get_parameters slices cuDNN's weight space)."""
    keys = {_torch_internals.storage_key(p.untyped_storage()) for p in params}
    offset, flat = 0, len(keys) == 1
    for p in params:
        flat = flat and p.storage_offset() == offset and p.is_contiguous()
        offset += p.numel()
    if flat and params[0].untyped_storage().nbytes() != offset * params[0].element_size():
        flat = False
    views, start = [], 0
    for p in params:
        views.append((tuple(p.shape), tuple(p.stride()) if flat else
                      tuple(_contiguous_strides(p.shape)), start))
        start += p.numel()
    return _WeightLayout(flat, offset, tuple(views))


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    """A contiguous tensor's strides for `shape`."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return strides[::-1]


@cache
def _cudnn_rnn_function() -> Any:
    """The autograd.Function that allocates as _cudnn_rnn and _cudnn_rnn_backward do."""
    import torch

    class CudnnRnn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, plan: CudnnRnnPlan, layout: _WeightLayout, data: Any, hx: Any,
                    *rest: Any) -> Any:
            cx = rest[0] if plan.lstm else None
            weights = rest[1:] if plan.lstm else rest
            ordered = data.transpose(0, 1) if plan.batch_first else data
            x = ordered.contiguous()
            output = data.new_empty((ordered.shape[0], ordered.shape[1], plan.output_size))
            hy = hx.new_empty(hx.shape)
            cy = cx.new_empty(cx.shape) if cx is not None else None
            buffer = None
            if not layout.flat:  # RNN.cpp copies the weights into a buffer of cuDNN's
                buffer = weights[0].new_zeros((layout.elements,))
            work = data.new_empty((plan.work,), dtype=torch.uint8)
            # In evaluation mode (train false) no reserve: at::empty({0}) allocates nothing.
            reserve = data.new_empty((plan.reserve,), dtype=torch.uint8) if plan.reserve else None
            del work, x  # RNN.cpp's locals, in reverse order: the work space, then the copy
            if plan.batch_first:
                output = output.transpose(0, 1)
            ctx.plan, ctx.layout, ctx.lstm = plan, layout, cx is not None
            ctx.weight_dtype = weights[0].dtype
            saved = [data, hx, output, reserve] + ([cx] if cx is not None else [])
            ctx.save_for_backward(*saved, *([buffer] if buffer is not None else []))
            return (output, hy, cy) if cy is not None else (output, hy)

        @staticmethod
        def backward(ctx: Any, grad_output: Any, grad_hy: Any, *more: Any) -> Any:
            plan, layout = ctx.plan, ctx.layout
            saved = ctx.saved_tensors
            data, hx, output, reserve = saved[:4]
            cx = saved[4] if ctx.lstm else None
            grad_cy = more[0] if ctx.lstm else None
            weights = len(layout.views)
            nothing = (None, None, None, None) + ((None,) if ctx.lstm else ()) + (None,) * weights
            if grad_output is None and grad_hy is None and grad_cy is None:
                return nothing
            contiguous = torch.contiguous_format
            if grad_output is None:
                grad_output = torch.zeros_like(output, memory_format=contiguous)
            if grad_hy is None:
                grad_hy = torch.zeros_like(hx, memory_format=contiguous)
            if cx is not None and grad_cy is None:
                grad_cy = torch.zeros_like(cx, memory_format=contiguous)
            # _cudnn_rnn_backward_input, always (it mutates the reserve)
            ordered = data.transpose(0, 1) if plan.batch_first else data
            ordered_grad = grad_output.transpose(0, 1) if plan.batch_first else grad_output
            x = ordered.contiguous()
            dy = ordered_grad.contiguous()
            dx = torch.empty_like(ordered, memory_format=contiguous)
            dhy = grad_hy.contiguous()
            dcy = grad_cy.contiguous() if grad_cy is not None else None
            dhx = hx.new_empty(hx.shape)
            dcx = cx.new_empty(cx.shape) if cx is not None else None
            work = data.new_empty((plan.work,), dtype=torch.uint8)
            del work, dcy, dhy, dy, x
            if plan.batch_first:
                dx = dx.transpose(0, 1)
            grads: list[Any] = [None] * weights
            if any(ctx.needs_input_grad[-weights:]):  # _cudnn_rnn_backward_weight
                x = ordered.contiguous()
                dw = data.new_zeros((layout.elements,), dtype=ctx.weight_dtype)
                work = data.new_empty((plan.work,), dtype=torch.uint8)
                del work, x
                grads = [dw.as_strided(shape, stride, start)
                         for shape, stride, start in layout.views]
                del dw
            del grad_output, grad_hy, grad_cy, reserve
            return (None, None, dx, dhx) + ((dcx,) if ctx.lstm else ()) + tuple(grads)

    return CudnnRnn


@dataclass
class KernelChoice:
    """One call the device runs with a kernel of its own: the op, the kernel, why."""

    op: str
    kernel: str
    why: str
    stack: list[int] = field(default_factory=list)


class DeviceKernels:
    """A TorchFunctionMode (entered with `with`) that runs the device's sdpa and dropout on the
    recording's fake CPU tensors (Note [The device's kernels on fake tensors]), and tells the
    tensors the optimizer makes in host memory while `optimizer_phase` is set. `on_choice`
    hears each kernel chosen (the recorder adds the call's stack)."""

    def __init__(self, rules: KernelRules,
                 on_choice: Callable[[KernelChoice], None] | None = None,
                 on_rnn: Callable[[CudnnRnnSpaces, Callable[[], Any]], Any] | None = None) -> None:
        import torch
        from torch.overrides import TorchFunctionMode

        self.rules = rules
        self.on_choice = on_choice
        self.on_rnn = on_rnn  # Note [cuDNN's RNN reserve, bracketed]
        self.optimizer_phase = False
        self.making_host_tensor = 0  # > 0 while a host factory runs (its ops allocate host memory)
        padding = next((k.pad_mask_to for k in rules.sdpa if k.name == "efficient"), 16)
        head = next((k.pad_head_dim_to for k in rules.sdpa if k.name == "flash"), 8)
        factories = {getattr(torch, name) for name in _FACTORIES}
        convolutions = {getattr(torch, name) for name in _CONVOLUTIONS}
        rnns = {getattr(torch, name): name for name in _RNN_GATES}
        owner = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                                   kwargs: dict[str, Any] | None = None) -> Any:
                kwargs = kwargs or {}
                if owner.rules.recorded_as_is:
                    return func(*args, **kwargs)
                if func is torch.nn.functional.scaled_dot_product_attention:
                    return owner._sdpa(args, kwargs, padding, head)
                if func is torch.nn.functional.dropout or func is torch.dropout:
                    return owner._dropout(func, args, kwargs)
                if func in convolutions:
                    return device_convolution(
                        func, args, kwargs, cuda_without_cudnn=owner.rules.device == "cuda"
                        and not torch.backends.cudnn.enabled)
                if func in rnns and owner.on_rnn is not None and owner.rules.device == "cuda" \
                        and not kwargs:
                    spaces = cudnn_rnn_spaces(rnns[func], args)
                    if spaces is not None and (spaces.plan is not None or spaces.reserve > 0):
                        if spaces.plan is not None:  # made as cuDNN makes it
                            made = spaces
                            return owner.on_rnn(made, lambda: cudnn_rnn(made, args))
                        if spaces.dropout > 0:
                            spaces = dataclasses.replace(
                                spaces, dropout_state_at_most=cudnn_dropout_state_at_most(
                                    owner.rules.profile))
                        return owner.on_rnn(spaces, lambda: func(*args, **kwargs))
                if owner.optimizer_phase and func in factories and \
                        kwargs.get("device") in (None, "cpu"):
                    owner.making_host_tensor += 1
                    try:
                        return func(*args, **kwargs)
                    finally:
                        owner.making_host_tensor -= 1
                return func(*args, **kwargs)

        self._mode = Mode()

    def __enter__(self) -> DeviceKernels:  # noqa: PYI034 - typing.Self needs Python 3.11
        self._mode.__enter__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)  # type: ignore[no-untyped-call]

    def _sdpa(self, args: Sequence[Any], kwargs: dict[str, Any], mask_alignment: int,
              head_dim_padding: int) -> Any:
        import torch
        call = {**_SDPA_DEFAULTS, **dict(zip(_SDPA_PARAMETERS, args)), **kwargs}
        if torch.is_autocast_enabled("cpu"):
            # Autocast casts sdpa's floating inputs to its dtype (lower_precision_fp on CUDA and
            # on the CPU) before the kernel is chosen: choose for what the kernel gets.
            dtype = torch.get_autocast_dtype("cpu")
            for name in ("query", "key", "value", "attn_mask"):
                value = call[name]
                if value is not None and value.is_floating_point() and value.dtype != dtype:
                    call[name] = value.to(dtype)
        kernel, why = sdpa_choice(self.rules, SdpaCall.of(
            call["query"], call["key"], call["value"], call["attn_mask"], call["dropout_p"],
            call["is_causal"], call["enable_gqa"]))
        if self.on_choice is not None:
            self.on_choice(KernelChoice("aten::scaled_dot_product_attention", kernel, why))
        return device_sdpa(kernel, **call, mask_alignment=mask_alignment,
                           head_dim_padding=head_dim_padding)

    def _dropout(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        import torch
        names = ("input", "p", "training", "inplace") if func is not torch.dropout else \
            ("input", "p", "train")
        call = {"p": 0.5, "training": True, "train": True, "inplace": False,
                **dict(zip(names, args)), **kwargs}
        if call["inplace"] or not (call["training"] and call["train"]):
            return func(*args, **kwargs)
        return device_dropout(call["input"], call["p"])


__all__ = ["CPU_RULES", "SDPA_KERNELS", "CudnnRnnPlan", "CudnnRnnSpaces", "DeviceKernels", "KernelChoice",
           "KernelRules", "KernelRulesError", "SdpaCall", "SdpaKernel", "SdpaTensor",
           "convolution_memory_format", "cudnn_rnn", "cudnn_rnn_spaces", "device_convolution", "device_dropout",
           "device_sdpa", "kernel_rules", "native_convolution_columns", "profile_path", "sdpa_choice", "sdpa_rejects"]
