"""Each rule of estimator/torchscript/op_rules.cpp against the real CPU op (Note [Op rules]).

A scripted module calls the op; the estimator, under the `cpu` profile and TorchScript
semantics, must predict exactly the peak of live storages that memory_tracker.py measures when
the TorchScript interpreter runs the module on CPU tensors: output shapes, strides (a wrong
stride makes a later reshape copy), dtypes, and what the op allocates and drops.
"""

import sys
from typing import Optional

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import REPOSITORY, estimate_json
from memory_tracker import measure_call


class Sdpa(nn.Module):
    def __init__(self, causal: bool = False, dropout: float = 0.0):
        super().__init__()
        self.causal = causal
        self.dropout = dropout

    def forward(self, q, k, v, mask: Optional[torch.Tensor] = None):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout,
                                           is_causal=self.causal)
        # A reshape after the transpose copies unless the output's strides are right.
        return y.transpose(1, 2).reshape(y.size(0), y.size(2), -1) * 2


class SdpaTransposed(nn.Module):
    """q, k, v made as most models make them: (B, L, H, E) transposed to (B, H, L, E). The CPU
    kernel's output takes the query's layout, so the transpose back needs no copy."""

    def forward(self, q, k, v):
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2))
        return y.transpose(1, 2).contiguous() * 2


class Recurrent(nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.rnn = nn.GRU(8, 16, num_layers=layers, batch_first=True)

    def forward(self, x):
        out, _ = self.rnn(x)
        return out * 2


class GroupNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(3, 6)

    def forward(self, x):
        return self.norm(x) + 1


class WeightNorm(nn.Module):
    def forward(self, v, g):
        return torch._weight_norm(v, g, 0) * 2


class IndexAdd(nn.Module):
    def forward(self, x, index, source):
        return x.index_add(0, index, source) * 2


class IndexAddInPlace(nn.Module):
    def forward(self, x, index, source):
        y = x * 1
        y.index_add_(0, index, source)
        return y * 2


class Where(nn.Module):
    def forward(self, mask, x, y):
        return torch.where(mask, x, y) * 2


class WhereScalar(nn.Module):
    """sdpa's math fallback turns a bool mask additive with a 0-dim CPU tensor (a Python
    number): the output is on the other tensor's device, in the two's promoted type."""

    def forward(self, mask, x):
        return torch.where(mask, x, torch.tensor(-1.0, dtype=torch.float64)) * 2


class Histc(nn.Module):
    def forward(self, x):
        return torch.histc(x, bins=5, min=0, max=4) * 2


class FloorDivide(nn.Module):
    """As transformers' MoE experts: token positions from sorted (token, expert) pairs."""

    def forward(self, x):
        order = torch.argsort(x.reshape(-1))
        return order // torch.tensor(2) + 1


class LogicalNot(nn.Module):
    """CPM-Ant's attention mask: the context's complement, broadcast against a triangle."""

    def forward(self, context):
        return context[:, :, None].logical_not() & (context[:, None, :] > 0)


class GroupedMm(nn.Module):
    """transformers' grouped-mm experts: rows sorted by expert, `offs` their ends, weights
    (experts, out, in) transposed; an `out` not a multiple of 16 bytes pads the output's rows."""

    def forward(self, x, weight, offs):
        return torch._grouped_mm(x, weight.transpose(-2, -1), offs) * 2


def _grouped_inputs(out_features):
    torch.manual_seed(0)
    return [torch.randn(10, 8), torch.randn(3, out_features, 8),
            torch.tensor([4, 4, 10], dtype=torch.int32)]


def _index_inputs(rows):
    torch.manual_seed(0)
    return [torch.randn(6, 4), torch.arange(rows) * 2, torch.randn(rows, 4)]


def _tensors(*shapes, dtype=torch.float32):
    torch.manual_seed(0)
    return [torch.randn(*shape).to(dtype) for shape in shapes]


CASES = {
    # name: (module, inputs, expected sdpa kernel under the cpu profile or None)
    "sdpa": (Sdpa(), _tensors((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)), "flash_cpu"),
    "sdpa-causal": (Sdpa(causal=True), _tensors((2, 3, 7, 8), (2, 3, 7, 8), (2, 3, 7, 8)),
                    "flash_cpu"),
    "sdpa-bool-mask": (Sdpa(), [*_tensors((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)),
                                torch.rand(2, 1, 5, 7) > 0.3], "flash_cpu"),
    "sdpa-float-mask": (Sdpa(), [*_tensors((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)),
                                 torch.randn(5, 7)], "flash_cpu"),
    "sdpa-float64": (Sdpa(), _tensors((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8),
                                      dtype=torch.float64), "flash_cpu"),
    # Different value head dim: flash for CPU declines, the math fallback runs _safe_softmax.
    "sdpa-math": (Sdpa(), _tensors((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)), "math"),
    "sdpa-3d-math": (Sdpa(), _tensors((3, 5, 8), (3, 7, 8), (3, 7, 8)), "math"),
    "sdpa-transposed": (SdpaTransposed(), _tensors((2, 5, 3, 8), (2, 7, 3, 8), (2, 7, 3, 8)),
                        "flash_cpu"),
    # The CPU's GRU projects the whole sequence through its input weights first.
    "gru-b1": (Recurrent(2), _tensors((1, 12, 8)), None),
    "gru-b3": (Recurrent(2), _tensors((3, 12, 8)), None),
    "group_norm": (GroupNorm(), _tensors((2, 6, 5, 3)), None),
    "weight_norm": (WeightNorm(), _tensors((4, 3, 5), (4, 1, 1)), None),
    "where": (Where(), [torch.rand(2, 1, 5, 7) > 0.5,
                        *_tensors((5, 1)), *_tensors((2, 3, 1, 7), dtype=torch.float64)], None),
    "where-scalar": (WhereScalar(), [torch.rand(2, 1, 5, 7) > 0.5,
                                     *_tensors((3, 5, 1), dtype=torch.float16)], None),
    # Meta kernels PyTorch registers from Python only (transformers' MoE experts).
    "histc": (Histc(), [torch.rand(3, 7) * 4], None),
    "floor_divide": (FloorDivide(), _tensors((4, 6)), None),
    "logical_not": (LogicalNot(), [torch.randint(0, 2, (2, 9))], None),
    "grouped_mm": (GroupedMm(), _grouped_inputs(8), None),
    "grouped_mm-padded": (GroupedMm(), _grouped_inputs(6), None),
    # LibTorch's meta kernel rejects an empty source (an expert with no rows); the CPU's takes it.
    "index_add": (IndexAdd(), _index_inputs(2), None),
    "index_add-empty": (IndexAdd(), _index_inputs(0), None),
    "index_add_-empty": (IndexAddInPlace(), _index_inputs(0), None),
}


def _argument(tensor):
    dtype = str(tensor.dtype).replace("torch.", "")
    return "x".join(map(str, tensor.shape)) + f":{dtype}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_the_cpu_op(name, tmp_path):
    module, inputs, kernel = CASES[name]
    path = tmp_path / f"{name}.pt"
    torch.jit.script(module.eval()).save(str(path))
    loaded = torch.jit.load(str(path))
    for _ in range(3):  # let the profiling executor settle its plan
        measure_call(loaded, inputs, {})
    measured = measure_call(loaded, inputs, {}).peak
    arguments = [a for t in inputs for a in ("--input", _argument(t))]
    document = estimate_json(path, *arguments, "--device", "cpu", "--semantics", "torchscript")
    assert not document["unknown_ops"], document["unknown_ops"]
    assert not document["lower_bound"]
    assert document["summary"]["activation_peak_requested_bytes"] == measured
    kernels = {entry["kernel"] for entry in document["kernels"]}
    assert kernels == ({kernel} if kernel else set()), document["kernels"]
    if kernel:
        assert all(entry["why"] for entry in document["kernels"])


def test_sdpa_kernel_follows_the_cuda_profiles(tmp_path):
    """fp16 without a mask: flash before Hopper, cuDNN on sm90; fp32: memory-efficient; a
    dropout-free fp32 call with an unaligned head dim: math, which materializes L x S."""
    path = tmp_path / "sdpa.pt"
    torch.jit.script(Sdpa().eval()).save(str(path))

    def chosen(device, dtype, head_dim):
        shape = f"2x4x64x{head_dim}:{dtype}"
        document = estimate_json(path, "--input", shape, "--input", shape, "--input", shape,
                                 "--device", device)
        assert not document["unknown_ops"]
        (entry,) = document["kernels"]
        return entry["kernel"], document["summary"]["activation_peak_requested_bytes"]

    assert chosen("cuda", "float16", 64)[0] == "flash"
    assert chosen("cuda-sm90", "float16", 64)[0] == "cudnn"
    assert chosen("cuda", "float32", 64)[0] == "efficient"
    math_kernel, math_peak = chosen("cuda", "float32", 6)  # 24 bytes: not 16-byte aligned
    assert math_kernel == "math"
    scores = 2 * 4 * 64 * 64 * 4
    assert math_peak >= scores


def test_device_queries_answer_the_profile(tmp_path):
    class Where(nn.Module):
        def forward(self, x):
            if x.is_cuda:
                return x * 2
            if x.device.type == "cpu" and x.is_cpu:
                return torch.cat([x, x])
            return x

    path = tmp_path / "where.pt"
    torch.jit.script(Where()).save(str(path))
    on_cpu = estimate_json(path, "--input", "4x8", "--device", "cpu")
    on_cuda = estimate_json(path, "--input", "4x8", "--device", "cuda")
    assert on_cpu["summary"]["activation_peak_requested_bytes"] == 2 * 4 * 8 * 4
    assert on_cuda["summary"]["activation_peak_requested_bytes"] == 4 * 8 * 4


class RepeatHeads(nn.Module):
    """Mamba-2's scan in transformers (nemotron_h, falcon_h1): the groups' B repeated to the
    heads by a count computed from sizes, `num_heads // num_groups`."""

    def forward(self, hidden, groups):
        heads = hidden.shape[2]
        repeated = groups.repeat_interleave(heads // groups.shape[2], dim=2, output_size=heads)
        return repeated * 2


class RepeatByTensor(nn.Module):
    def forward(self, x, counts):
        return x.repeat_interleave(counts, dim=0) * 2


def test_repeat_interleave_by_a_number_the_trace_captured(tmp_path):
    """torch.jit.trace records the count as a 0-dim host tensor, so the Tensor overload, whose
    kernel reads the counts (no meta kernel in LibTorch): the op was unknown and nemotron_h's
    and falcon_h1's traced estimates lower bounds (-40 %, -44 %). The program passed a number:
    the estimate is the eager forward's (the int overload: one contiguous clone), measured here
    on the CPU. Counts that are the program's own tensor stay unknown, flagged."""
    inputs = [torch.randn(2, 16, 8, 4), torch.randn(2, 16, 2, 4)]
    path = tmp_path / "repeat.pt"
    torch.jit.trace(RepeatHeads(), inputs).save(str(path))
    assert "aten::repeat_interleave" in str(torch.jit.load(str(path)).graph)
    measured = measure_call(RepeatHeads(), inputs, {}).peak
    arguments = [a for t in inputs for a in ("--input", _argument(t))]
    document = estimate_json(path, *arguments, "--device", "cpu", "--semantics", "torchscript")
    assert not document["unknown_ops"], document["unknown_ops"]
    assert not document["lower_bound"]
    assert document["summary"]["activation_peak_requested_bytes"] == measured == 2 * 4096

    by_tensor = tmp_path / "by_tensor.pt"
    counts = torch.tensor([1, 3, 2])
    torch.jit.script(RepeatByTensor()).save(str(by_tensor))
    document = estimate_json(by_tensor, "--input", "3x4:float32", "--input", "3:int64",
                             "--device", "cpu", "--semantics", "torchscript")
    assert [op["op"] for op in document["unknown_ops"]] == ["aten::repeat_interleave"]
    assert document["lower_bound"]
    assert RepeatByTensor()(torch.randn(3, 4), counts).shape == (6, 4)  # what the count decides


class ChannelsLastConvolutions(nn.Module):
    """ConvNeXt's downsampling: a channels-last activation meets a contiguous 2x2 weight (cuDNN
    gets a channels-last copy of the weight); then a 1-d convolution over a transposed input
    (its copy, contiguous)."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(8, 16, 2, stride=2)
        self.mix = nn.Conv1d(16, 16, 3, padding=1)

    def forward(self, x):
        y = self.down(x.contiguous(memory_format=torch.channels_last))
        sequence = y.flatten(2)  # (B, C, L) from channels-last: C innermost, not contiguous
        return self.mix(sequence) * 2


@pytest.mark.parametrize("device", ["cuda-sm90", "cpu"])
def test_convolution_copies_are_the_recordings(device):
    """On CUDA, PyTorch copies a convolution's operands into cuDNN's memory format (Note [The
    device's kernels on fake tensors] in device_kernels.py: the facts, confirmed on the
    simulated H100); the recording makes the copies, and memtrace-estimate's TorchScript front
    end the same (convolutionRule): equal peaks, the copies included (before the rule the
    TorchScript figure was the weight copy short). On the CPU neither copies."""
    sys.path.insert(0, str(REPOSITORY / "python"))
    import mem_tracer

    torch.manual_seed(0)
    model, x = ChannelsLastConvolutions().eval(), torch.randn(2, 8, 16, 16)
    recorded = mem_tracer.estimate(model, (x,), device=device, method="record")
    scripted = mem_tracer.estimate(model, (x,), device=device, method="torchscript")
    assert scripted.method == "script" and not scripted.lower_bound
    assert scripted.peak_requested_bytes == recorded.peak_requested_bytes, \
        (scripted.peak_requested_bytes, recorded.peak_requested_bytes)
