"""memtrace-estimate on what the model's data decides: `if` conditions on tensor data (non-tensor
results unknown, never bound), traces recorded on the CPU (device constants mapped to the device
estimated for), data-dependent selections (example counts or the worst case), and the budget
verdict explained. Every size is checked against the real CPU op under the memory tracker."""

import sys

import pytest
import torch
import torch.nn as nn

from conftest import REPOSITORY, estimate_json, run_estimator
from memory_tracker import measure

sys.path.insert(0, str(REPOSITORY / "python"))


class DecidedByData(nn.Module):
    # `n` is 2 or 3 by the data; the old rule bound the `if` branch's constant (2) and raised.
    def forward(self, x):
        if bool(x.sum() > 0):
            n = 2
        else:
            n = 3
        if n == 2:
            raise ValueError("n is 2")
        return x * n


class DeviceConstants(nn.Module):
    # Traced on the CPU: device=cpu constants in zeros/arange and an aten::to(device, dtype).
    def forward(self, x):
        h = torch.zeros(x.shape[0], 64, device=x.device)
        steps = torch.arange(64, device=x.device).to(x.dtype)
        y = x.to(x.device, torch.float64) + (h + steps).double()
        return y.relu()


class Selection(nn.Module):
    def forward(self, x):
        rows = torch.nonzero(x > 0)
        picked = x[x > 0]
        return rows.sum() + picked.sum()


class Routed(nn.Module):
    # Top-1 routing as MoE layers do it: rows per expert by nonzero.
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(16, 2)
        self.experts = nn.ModuleList([nn.Linear(16, 64), nn.Linear(16, 64)])

    def forward(self, x):
        choice = self.gate(x).argmax(-1)
        out = torch.zeros(x.shape[0], 64)  # the default device: the one estimated for
        for index, expert in enumerate(self.experts):
            rows = torch.nonzero(choice == index).squeeze(1)
            out = out.index_add(0, rows, expert(x[rows]))
        return out


class GridRead(nn.Module):
    # Qwen-VL's image grid in small: `for t, h, w in grid.tolist()` sizes the patches a grid
    # row takes (transformers' get_vision_position_ids), and a tensor is made of 0-d tensors
    # (get_rope_index's `torch.tensor(mrope_position_deltas)`).
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 64)

    def forward(self, x, grid):
        pieces, start = [], 0
        for t, h, w in grid.tolist():
            pieces.append(self.proj(x[start:start + t * h * w]))
            start += t * h * w
        deltas = torch.tensor([piece.shape[0] - piece.argmax() for piece in pieces])
        return torch.cat(pieces) * deltas.sum()


class SwitchRouted(nn.Module):
    # Switch Transformers' sparse MLP in small: the router converts its classifier at every call
    # (`self.classifier = self.classifier.to(self.dtype)`, here to the dtype it has) and each
    # expert hit is looked up by name, its index a 0-d tensor formatted into the key.
    def __init__(self):
        super().__init__()
        self.classifier = nn.Linear(16, 2)
        self.experts = nn.ModuleDict({f"expert_{index}": nn.Linear(16, 64) for index in (0, 1)})

    def forward(self, x):
        self.classifier = self.classifier.to(torch.float32)
        choice = self.classifier(x).argmax(-1)
        out = torch.zeros(x.shape[0], 64)
        for hit in (torch.bincount(choice, minlength=2) > 0).nonzero():
            rows = torch.nonzero(choice == hit[0]).squeeze(1)
            out = out.index_add(0, rows, self.experts[f"expert_{hit[0]}"](x[rows]))
        return out


def saved(tmp_path, name, module):
    path = tmp_path / f"{name}.pt"
    module.save(str(path))
    return path


class HostNumberToTheDevice(nn.Module):
    # DeBERTa-v2's make_log_bucket_position: a Python number made a tensor and moved to the
    # input's device (`torch.tensor(mid - 1).type_as(relative_pos)`). Traced on a GPU it is an
    # aten::to(0-dim host tensor, cuda:0); a CPU-only LibTorch cannot make a CUDA tensor.
    def forward(self, ids):
        mid = torch.tensor(3).to(ids.device)
        return torch.where(ids < mid, mid, ids).float().softmax(-1)


def as_if_traced_on_a_gpu(traced):
    """The trace with the device constants a trace made on a GPU holds (cuda:0 for cpu)."""
    changed = 0
    for module in traced.modules():
        for node in module.graph.findAllNodes("prim::Constant"):
            if node.output().type().kind() == "DeviceObjType":
                node.s_("value", "cuda:0")
                changed += 1
    assert changed, "the trace recorded no device"
    return traced


def test_gpu_trace_device_constants_are_mapped(tmp_path):
    example = torch.randint(0, 9, (4, 64))
    traced = as_if_traced_on_a_gpu(torch.jit.trace(HostNumberToTheDevice(), example))
    path = saved(tmp_path, "gpu-made", traced)
    assert "cuda:0" in str(torch.jit.load(str(path)).inlined_graph)
    document = estimate_json(path, "--input", "4x64:int64")
    assert document["lower_bound"] is False, document["unknown_ops"]
    truth = measure(HostNumberToTheDevice(), example).peak
    # The number stays on the host (Note [Traces from any device]): the CPU's ground truth
    # counts its 8 bytes, device memory does not hold them.
    assert document["summary"]["activation_peak_requested_bytes"] == truth - 8


def test_values_that_differ_between_branches_are_unknown(tmp_path):
    path = saved(tmp_path, "decided", torch.jit.script(DecidedByData()))
    document = estimate_json(path, "--input", "4x8")
    details = [a["detail"] for a in document["assumptions"] if a["kind"] == "data_dependent_branch"]
    assert any("differ between the branches are unknown" in detail for detail in details), details
    # The second `if` is on the unknown `n`: its raising branch is not taken, and it says so.
    assert any("the other one raises" in detail for detail in details), details
    assert any("sizes follow the `if` branch" in detail for detail in details), details


def test_scripted_transformer_encoder_runs(tmp_path):
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    encoder = torch.jit.script(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval())
    path = saved(tmp_path, "encoder", encoder)
    result = run_estimator(path, "--input", "2x8x32")
    assert result.returncode == 0, result.stderr


def test_cpu_trace_device_constants_are_mapped(tmp_path):
    example = torch.randn(4, 64)
    traced = torch.jit.trace(DeviceConstants(), example)
    assert "cpu" in str(traced.inlined_graph)  # the trace did record the CPU
    path = saved(tmp_path, "devices", traced)
    document = estimate_json(path, "--input", "4x64")
    assert document["lower_bound"] is False, document["unknown_ops"]
    truth = measure(DeviceConstants(), example).peak
    assert document["summary"]["activation_peak_requested_bytes"] == truth


def test_nonzero_and_mask_use_example_counts_or_the_worst_case(tmp_path):
    path = saved(tmp_path, "selection", torch.jit.script(Selection()))
    module = torch.jit.load(str(path))
    # Unknown without either: a lower bound that names the way out.
    plain = estimate_json(path, "--input", "4x8", "--semantics", "torchscript")
    assert plain["lower_bound"] is True
    assert any("--assume-worst-case" in op["detail"] for op in plain["unknown_ops"])
    # The worst case is an input where every element is selected.
    worst = estimate_json(path, "--input", "4x8", "--semantics", "torchscript",
                          "--assume-worst-case")
    assert worst["lower_bound"] is False
    # x[mask] runs nonzero on the mask inside the kernel ([k, 2] int64), on a GPU as on the CPU;
    # the tracker sees storages between ops only, so the prediction is that temporary higher.
    temporary = 32 * 2 * 8
    assert worst["summary"]["activation_peak_requested_bytes"] == measure(
        module, torch.ones(4, 8)).peak + temporary
    kinds = [a["kind"] for a in worst["assumptions"]]
    assert kinds.count("data_dependent_size") == 2
    # Example counts: 5 of the 32 elements positive, for both selections.
    example = torch.zeros(4, 8)
    example.view(-1)[[0, 3, 9, 17, 30]] = 1.0
    from mem_tracer.estimator import example_counts
    counts = example_counts.record(lambda: module(example))
    assert counts == [("aten::nonzero", 32, 5), ("aten::index", 32, 5)]
    counts_path = tmp_path / "counts.txt"
    example_counts.write(counts, counts_path)
    sized = estimate_json(path, "--input", "4x8", "--semantics", "torchscript",
                          "--example-counts", counts_path)
    assert sized["lower_bound"] is False
    assert sized["summary"]["activation_peak_requested_bytes"] == measure(
        module, example).peak + 5 * 2 * 8
    details = [a["detail"] for a in sized["assumptions"] if a["kind"] == "data_dependent_size"]
    assert details and all("as on the example input" in detail for detail in details)


def test_bad_example_counts_file(tmp_path):
    path = saved(tmp_path, "selection", torch.jit.script(Selection()))
    counts = tmp_path / "bad.txt"
    counts.write_text("aten::nonzero 4 9\n")
    result = run_estimator(path, "--input", "4x8", "--example-counts", counts)
    assert result.returncode == 2
    assert "bad.txt:1: expected OP ELEMENTS COUNT" in result.stderr


@pytest.mark.parametrize("method", ["auto", "torchscript"])  # recorded; scripted or traced
@pytest.mark.parametrize("seed", [0, 6])
def test_moe_routing_from_the_python_api_is_exact(seed, method):
    from mem_tracer import estimate

    torch.manual_seed(seed)
    model = Routed().eval()
    example = torch.randn(6, 16)
    rows = torch.bincount(model.gate(example).argmax(-1), minlength=2).tolist()
    # Seed 6 routes every row to expert 0: expert 1 gets none (an empty index_add).
    assert (0 in rows) == (seed == 6), rows
    result = estimate(model, (example,), device="cuda", method=method)
    assert (result.method == "record") == (method == "auto"), result.method_note
    assert not result.lower_bound
    kinds = [a["kind"] for a in result.raw["assumptions"]]
    assert kinds.count("data_dependent_size") >= 2
    assert result.activation_peak_bytes == measure(model, example).peak


def test_budget_verdict_says_what_breaks_it(tmp_path):
    path = saved(tmp_path, "devices", torch.jit.trace(DeviceConstants(), torch.randn(4, 64)))
    need = estimate_json(path, "--input", "1x64", "--batch", "4000")["sweep"][0]["summary"]
    budget = need["peak_reserved_bytes"]
    answer = estimate_json(path, "--input", "1x64", "--budget", budget)["budget"]
    largest = answer["largest_batch"]
    assert answer["at_largest_batch"]["batch"] == largest
    following = answer["next_batch"]
    assert following["batch"] == largest + 1
    summary = following["summary"]
    breaker = answer["next_batch_breaks_budget"]
    assert breaker == ("requested" if summary["peak_requested_bytes"] > budget else "reserved")
    assert summary["peak_reserved_bytes"] > budget or summary["peak_requested_bytes"] > budget
    text = run_estimator(path, "--input", "1x64", "--budget", budget).stdout
    assert f"batch {largest}: requested" in text and ": fits" in text
    assert f"batch {largest + 1}: requested" in text and "does not fit" in text
    tight = estimate_json(path, "--input", "1x64", "--budget", "1000")["budget"]
    assert tight["largest_batch"] is None
    assert tight["next_batch"]["batch"] == 1
    assert tight["next_batch_breaks_budget"] == "requested"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 64)
        self.out = nn.Linear(64, 16)

    def forward(self, x):
        return self.out(self.fc(x).relu())


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Sequential(nn.Linear(16, 256), nn.ReLU())

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


@pytest.mark.parametrize("export", ["script", "trace"])
def test_torchscript_semantics_names_the_modules_of_the_inlined_graph(tmp_path, export):
    # The interpreter's graph has every call inlined (Note [The interpreter's graph]); modules
    # are found again from each node's inlined call stack, through the ModuleList.
    example = torch.randn(4, 16)
    module = torch.jit.script(Stack()) if export == "script" else torch.jit.trace(Stack(), example)
    path = saved(tmp_path, "stack", module)
    document = estimate_json(path, "--input", "4x16", "--semantics", "torchscript")
    names = dict(Stack().named_modules())
    modules = {entry["module_path"] for entry in document["peak"]["by_module"]}
    assert modules and modules <= set(names), modules
    assert document["peak"]["module_path"] == "head.1"  # the ReLU, beside its 4x256 input
    assert document["summary"]["activation_peak_requested_bytes"] == measure(
        torch.jit.load(str(path)), example).peak
    # A scripted node's stack is its own line, then its call sites, innermost first.
    if export == "script":
        stack = document["peak"]["stack"]
        assert [frame["function"] for frame in stack[-2:]] == ["forward", "forward"], stack
        assert stack[-1]["file"] == __file__, stack


class PackedMask(nn.Module):
    # As transformers' GPT-2 at batch 1: a mask built for one row, indexed by arange(batch).
    def forward(self, x):
        mask = torch.ones(1, x.shape[1], dtype=torch.long).cumsum(-1)
        rows = torch.arange(x.shape[0]).unsqueeze(1)
        columns = torch.arange(x.shape[1]).unsqueeze(0)
        return x * mask[rows, columns]


def test_an_index_out_of_range_at_these_shapes_is_said(tmp_path):
    path = saved(tmp_path, "packed", torch.jit.trace(PackedMask(), torch.randn(1, 8)))
    assert estimate_json(path, "--input", "1x8", "--semantics", "torchscript")["assumptions"] == []
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.jit.load(str(path))(torch.randn(3, 8))  # what the interpreter does at batch 3
    refused = run_estimator(path, "--input", "3x8", "--semantics", "torchscript")
    assert refused.returncode == 2
    assert "index 2 is out of bounds for dimension 0 with size 1" in refused.stderr
    assert "trace the model at the shapes you estimate" in refused.stderr
    eager = estimate_json(path, "--input", "3x8", "--semantics", "eager")
    details = [a["detail"] for a in eager["assumptions"] if a["kind"] == "semantics"]
    assert any("cannot run at these input shapes" in detail for detail in details), details


class TopTwo(nn.Module):
    def forward(self, x):
        return torch.topk(x, 2, dim=-1)


class SortedExperts(nn.Module):
    # As transformers' MoE experts: a router module returns (weights, expert ids); the ids,
    # sorted, index the weights. The ids come from the data, so no host copy of them exists.
    def __init__(self):
        super().__init__()
        self.router = TopTwo()

    def forward(self, x):
        weights, ids = self.router(x)
        _, order = torch.sort(ids.reshape(-1))
        return weights.reshape(-1)[order] * 2


def test_an_index_the_data_decides_is_not_known_on_the_host(tmp_path):
    path = saved(tmp_path, "sorted", torch.jit.trace(SortedExperts(), torch.randn(2, 8)))
    for semantics in ("eager", "torchscript"):
        document = estimate_json(path, "--input", "2x8", "--device", "cpu", "--semantics",
                                 semantics)
        assert not document["lower_bound"]
        assert not document["unknown_ops"]


def test_a_list_read_from_the_inputs_and_a_tensor_of_fake_numbers_are_estimated():
    # Note [A list read element by element] and Note [A tensor made of fake numbers]
    # (step_graph.py): before them, the recording stopped at the tolist() ("ran it there 0
    # times, not 1": a real CPU tensor's tolist() reads below the dispatcher), then at the
    # torch.tensor of 0-d fake tensors ("its data is not allocated yet").
    from mem_tracer import estimate

    torch.manual_seed(0)
    model = GridRead().eval()
    grid = torch.tensor([[1, 2, 3], [2, 1, 5]])  # 6 + 10 patches of the 40 given
    example = (torch.randn(40, 16), grid)
    result = estimate(model, example, device="cpu")
    assert result.method == "record", result.method_note
    reads = [a for a in result.raw["assumptions"] if a["kind"] == "data_dependent_size"]
    assert len(reads) >= 6, reads  # the grid's six numbers, as on the example input
    with torch.no_grad():
        assert model(*example).shape == (16, 64)
    from memory_tracker import measure_call
    assert result.activation_peak_bytes == measure_call(model, example, {}).peak


@pytest.mark.parametrize("training", [False, True])
def test_a_module_converted_in_the_forward_and_an_index_formatted_are_recorded(training):
    # Note [Module.to() on fake tensors] and Note [A fake number formatted] (step_graph.py):
    # before them the recording stopped at the router's `.to()` ("_apply(): Couldn't swap
    # Linear.weight"; the forward then fell back to TorchScript), then at the expert's name
    # ("KeyError: 'expert_FakeTensor(..., size=(), dtype=torch.int64)'").
    from mem_tracer import TrainingStep, estimate

    torch.manual_seed(0)
    model = SwitchRouted().train(training)
    example = (torch.randn(8, 16),)
    with torch.no_grad():
        hits = model.classifier(example[0]).argmax(-1)
    assert set(hits.tolist()) == {0, 1}, "the example should route to both experts"
    step = TrainingStep(optimizer=torch.optim.AdamW(model.parameters())) if training else None
    result = estimate(model, example, device="cpu", training=step)
    assert result.method == "record", result.method_note
    if not training:
        from memory_tracker import measure_call
        assert result.activation_peak_bytes == measure_call(model, example, {}).peak
    else:
        # Both experts' gradients, none for the router (its argmax passes none).
        assert result.training_breakdown["gradient"] == sum(
            p.numel() * p.element_size() for p in model.experts.parameters())
