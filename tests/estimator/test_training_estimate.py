"""The training step predicted (mem_tracer.estimate(training=True): recorded on fake tensors,
estimated by memtrace-estimate from the graph file) against the CPU ground truth of
training_truth.py: every storage alive at once during step 2, by category. A sample of the
table training_accuracy.py makes for docs/accuracy.md (all of it takes minutes), over every kind
of model and step: optimizers, autocast, checkpointing, accumulation, GradScaler, data-dependent
routing. Then plan() proven by running its plan, the graph file's refusals, and a torch.export
archive."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import models
import training_accuracy
import zoo
from conftest import BAD_INPUT, REPOSITORY, estimator_binary, run_estimator
from memory_tracker import measure_call
from training_truth import measure_step

import mem_tracer


@pytest.fixture(autouse=True)
def estimator_on_path(monkeypatch):
    monkeypatch.setenv("MEMTRACE_BIN_DIR", str(estimator_binary().parent))


CASES = {
    # name: (model, optimizer, precision, checkpointed)
    "resnet-sgd-fp32": ("resnet (models.py)", "sgd", "fp32", False),
    "mobilenet-adamw-bf16": ("mobilenet (models.py)", "adamw", "bf16", False),
    "gpt2like-adamw-checkpointed": ("gpt2 (models.py)", "adamw", "fp32", True),
    "bert-sdpa-adamw-bf16": ("bert-sdpa", "adamw", "bf16", False),
    "llama-eager-sgd-checkpointed": ("llama-eager", "sgd", "fp32", True),
    "t5-sdpa-adamw": ("t5-sdpa", "adamw", "fp32", False),
    "whisper-sdpa-sgd-bf16": ("whisper-sdpa", "sgd", "bf16", False),
    "wav2vec2-eager-adamw": ("wav2vec2-eager", "adamw", "fp32", False),  # .item() in its masks
    "moe-top1-adamw": ("moe-top1", "adamw", "fp32", False),  # nonzero routing
    "unet-sgd-checkpointed": ("unet", "sgd", "fp32", True),
    "gru-adamw": ("gru", "adamw", "fp32", False),
    "transformer-encoder-sgd-bf16": ("transformer-encoder-train", "sgd", "bf16", False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_training_peak_and_categories_within_the_bar(case):
    name, optimizer, precision, checkpointed = CASES[case]
    make, example = next((make, example) for model, make, example in training_accuracy.cases()
                         if model == name)
    row = training_accuracy.measure_row(name, make, example, optimizer, precision, checkpointed)
    assert row.status == "ok", (row.status, row.message, row.error_pct, row.categories)
    assert abs(row.predicted - row.measured) <= 0.03 * row.measured
    for category, (predicted, measured) in row.categories.items():
        assert abs(predicted - measured) <= 0.03 * max(measured, 1) or \
            abs(predicted - measured) <= 0.01 * row.measured, (category, predicted, measured)
    # The phase where the step peaks is the truth's.
    predicted_phase, measured_phase = row.phase.split(" / ")
    assert predicted_phase == measured_phase


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))


def _xy(batch=8):
    torch.manual_seed(1)
    return torch.randn(batch, 32), torch.randint(0, 10, (batch,))


def cross_entropy(output, target):
    return nn.functional.cross_entropy(output, target)


@pytest.mark.parametrize("options", [
    {"accumulate": 2},
    {"scaler": True},
    {"autocast": torch.bfloat16, "scaler": True},
], ids=["accumulate", "grad-scaler", "bf16-grad-scaler"])
def test_accumulation_and_grad_scaler_are_exact(options):
    model = _mlp()
    x, y = _xy()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    result = mem_tracer.estimate(model, (x,), training=True, optimizer=optimizer,
                                 loss_fn=cross_entropy, targets=(y,), device="cpu", **options)
    truth = measure_step(model, (x,), optimizer=optimizer, loss_fn=cross_entropy, targets=(y,),
                         **options)
    assert result.training_categories_peak_bytes == truth.peak
    assert result.training_breakdown == truth.categories
    assert result.training_peak_phase == truth.phase


def test_the_estimate_says_what_it_recorded():
    model = _mlp()
    x, y = _xy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    result = mem_tracer.estimate(model, (x,), training=True, optimizer=optimizer,
                                 loss_fn=cross_entropy, targets=(y,), device="cpu",
                                 batch_sizes=[1, 16])
    assert result.method == "record"
    assert result.method_note == "recorded on fake tensors: one training step (SGD)"
    assert list(result.training_breakdown) == ["parameter", "gradient", "optimizer_state",
                                               "activation", "input", "temporary"]
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    assert result.training_breakdown["parameter"] == parameters
    assert result.training_breakdown["optimizer_state"] == parameters  # the momentum buffers
    assert result.optimizer_state_bytes == parameters
    assert sum(result.training_breakdown.values()) == result.training_categories_peak_bytes
    assert [point.batch for point in result.batches] == [1, 16]
    assert result.batches[0].peak_requested_bytes < result.batches[1].peak_requested_bytes
    assert (f"the categories' sum {result.training_categories_peak_bytes / 2**20:.2f} MiB"
            in str(result))
    step = result.raw["step"]
    assert step["kind"] == "training" and step["optimizer"] == "SGD" and step["device"] == "cpu"
    # Every line of the step is attributed: the forward's to the model, backward's to
    # backward(), the optimizer's to its step.
    assert result.by_line and result.by_module


def test_a_training_step_is_one_value_and_the_old_keywords_still_work():
    model = _mlp()
    x, y = _xy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = mem_tracer.TrainingStep(optimizer=optimizer, loss_fn=cross_entropy, targets=[y],
                                   accumulate=2, loop="until-loss")
    assert step.targets == (y,)
    result = mem_tracer.estimate(model, (x,), training=step, device="cpu")
    with pytest.warns(DeprecationWarning) as warned:
        old = mem_tracer.estimate(model, (x,), training=True, optimizer=optimizer,
                                  loss_fn=cross_entropy, targets=(y,), accumulate=2,
                                  loop="until-loss", device="cpu")
    assert str(warned[0].message) == (
        "estimate(training=True, optimizer=..., loss_fn=..., targets=..., accumulate=..., "
        "loop=...) is deprecated: write estimate(..., training=mem_tracer.TrainingStep("
        "optimizer=..., loss_fn=..., targets=..., accumulate=..., loop=...))")
    assert warned[0].filename == __file__  # the caller's line, not the package's
    # The same step (the stacks differ only in the line that called estimate()).
    assert old.training_categories_peak_bytes == result.training_categories_peak_bytes
    assert old.training_breakdown == result.training_breakdown
    assert old.raw["summary"] == result.raw["summary"] and old.loop == result.loop
    with pytest.raises(mem_tracer.MemTracerError, match="give optimizer inside TrainingStep"):
        mem_tracer.estimate(model, (x,), training=step, optimizer=optimizer)
    with pytest.raises(TypeError, match="unexpected keyword argument 'optimiser'"):
        mem_tracer.estimate(model, (x,), training=True, optimiser=optimizer)
    with pytest.raises(mem_tracer.MemTracerError, match="predicts a training step"), \
            pytest.warns(DeprecationWarning):
        mem_tracer.estimate(model, (x,), parallel="ddp", world_size=2)


def test_plan_is_proven_by_running_it():
    torch.manual_seed(0)
    model = models.GPT2Like(vocabulary=100, embedding=32, heads=2, layers=3, context=32)
    ids = torch.randint(0, 100, (2, 32))
    optimizer = torch.optim.AdamW(model.parameters())
    budget = 6 * 2**20
    plan = mem_tracer.plan(model, (ids,), budget=budget, optimizer=optimizer, checkpoint=True,
                           device="cpu")
    assert plan.budget_bytes == budget and plan.largest_batch
    rows = lambda batch: ids[torch.arange(batch) % ids.shape[0]]  # noqa: E731
    # The plan's batch fits when the step really runs; one more does not.
    assert measure_step(model, (rows(plan.largest_batch),), optimizer=optimizer).peak <= budget
    assert measure_step(model, (rows(plan.largest_batch + 1),), optimizer=optimizer).peak > budget
    # With the planned checkpointing, a larger batch fits, really.
    assert plan.checkpoint_modules and plan.largest_batch_checkpointed > plan.largest_batch
    assert all(path.startswith("h.") for path in plan.checkpoint_modules)
    batch = plan.largest_batch_checkpointed
    assert measure_step(model, (rows(batch),), optimizer=optimizer, prepare=plan.apply).peak <= budget
    assert measure_step(model, (rows(batch + 1),), optimizer=optimizer,
                        prepare=plan.apply).peak > budget
    assert plan.recompute_flops > 0
    assert f"batch {plan.largest_batch}" in str(plan)
    # The user's model is untouched.
    assert not any("checkpoint" in str(getattr(m.forward, "__qualname__", ""))
                   for m in model.modules())


def test_plan_searches_as_estimate_does_and_answers_as_every_batch_recorded(tmp_path):
    """plan() takes estimate()'s budget search (Note [A budget search from three recordings]):
    its answer is the brute force's, every batch from 1 recorded and estimated until one does
    not fit (and the two after it do not either), and its note says how it searched."""
    from mem_tracer.estimator.estimate import _device_profile, _record_and_estimate
    from mem_tracer.estimator.training_step import RecordedStep, TrainingStep

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    x = torch.randn(2, 128, 64)  # ~448 KiB a row at the step's peak: batch 10 fits 5.3 MB
    optimizer = torch.optim.AdamW(model.parameters())
    budget = 5_300_000
    plan = mem_tracer.plan(model, (x,), budget=budget, optimizer=optimizer, device="cpu")
    assert plan.search_note.startswith(
        "the budget search extended the recordings at batches 2, 3, 4"), plan.search_note
    assert f"batches: {plan.search_note}" in str(plan)
    step = RecordedStep.of(TrainingStep(optimizer=optimizer))

    def fits(batch):
        document = _record_and_estimate(model, [x], {}, _device_profile("cpu"), step, tmp_path,
                                        tmp_path / "brute.json", batch=batch, budget=budget)
        return document["step"]["budget"]["fits"], document["summary"]["peak_requested_bytes"]

    brute, batch = None, 1
    while fits(batch)[0]:
        brute, batch = batch, batch + 1
    assert not fits(batch + 1)[0] and not fits(batch + 2)[0]
    assert brute == 10 and plan.largest_batch == brute, (plan, brute)
    assert plan.peak_bytes == fits(brute)[1]


def test_a_budget_too_small_for_batch_1():
    model = _mlp()
    plan = mem_tracer.plan(model, (_xy()[0],), budget="1KiB", device="cpu")
    assert plan.largest_batch is None and "not even batch 1 fits" in str(plan)
    with pytest.raises(mem_tracer.MemTracerError, match="cannot read the budget"):
        mem_tracer.plan(model, (_xy()[0],), budget="lots", device="cpu")


def _step_file():
    model = _mlp()
    x, y = _xy()
    from mem_tracer.estimator import step_graph
    document = step_graph.record(model, (x,), loss_fn=cross_entropy, targets=(y,),
                                 optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    return document


def test_graph_file_on_the_command_line(tmp_path):
    from mem_tracer.estimator import step_graph
    path = step_graph.write(_step_file(), tmp_path / "step.json")
    text = run_estimator(path, "--device", "cpu")
    assert text.returncode == 0, text.stderr
    assert ("training step of Sequential with SGD (for-loop) (recorded on fake tensors, running "
            "cpu's kernels)") in text.stdout
    assert "step peak" in text.stdout and "gradient" in text.stdout
    fits = json.loads(run_estimator(path, "--device", "cpu", "--budget", "1GiB", "--format",
                                    "json").stdout)["step"]["budget"]
    assert fits == {"budget_bytes": 2**30, "fits": True, "breaks": None}
    tight = json.loads(run_estimator(path, "--device", "cpu", "--budget", "1KiB", "--format",
                                     "json").stdout)["step"]["budget"]
    assert tight["fits"] is False and tight["breaks"] == "requested"
    refused = run_estimator(path, "--input", "8x32")
    assert refused.returncode == BAD_INPUT and "--input and --batch do not apply" in refused.stderr


@pytest.mark.parametrize("damage, message", [
    (lambda d: d.update(version=7), "graph file version 7; this memtrace reads version 1"),
    (lambda d: d.update(format="other"), "not a memtrace graph file"),
    (lambda d: d["nodes"][1]["releases"].append(0), "which is not live"),
    (lambda d: d["storages"][0].update(category="weights"), 'unknown category "weights"'),
    (lambda d: d["nodes"][0].update(stack=[10**6]), "no frame 1000000"),
])
def test_a_damaged_graph_file_is_refused_in_one_line(tmp_path, damage, message):
    document = _step_file()
    damage(document)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(document))
    result = run_estimator(path)
    assert result.returncode == BAD_INPUT, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    (tmp_path / "broken.json").write_text("{not json")
    broken = run_estimator(tmp_path / "broken.json")
    assert broken.returncode == BAD_INPUT and "not valid JSON" in broken.stderr


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 64)
        self.out = nn.Linear(64, 8)

    def forward(self, x):
        return self.out(self.fc(x).relu())


def test_a_torch_export_archive_is_estimated(tmp_path):
    model = Small().eval()
    x = torch.randn(4, 16)
    path = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    result = mem_tracer.estimate(path, (x,), device="cpu")
    assert result.method == "record" and "torch.export" in result.method_note
    with torch.no_grad():
        truth = measure_call(model, (x,), {}).peak
    assert result.activation_peak_bytes == truth
    assert result.training_categories_peak_bytes is None
    # The tool itself says where such a file goes: the front door, which records it.
    refused = run_estimator(path, "--input", "4x16")
    assert refused.returncode == BAD_INPUT and "memtrace estimate" in refused.stderr
    front = subprocess.run([sys.executable, "-m", "mem_tracer", "estimate", str(path), "--input",
                            "4x16", "--device", "cpu", "--format", "json"],
                           capture_output=True, text=True, check=False,
                           env={**os.environ, "PYTHONPATH": str(REPOSITORY / "python")})
    assert front.returncode == 0, front.stderr
    assert json.loads(front.stdout)["summary"]["activation_peak_requested_bytes"] == truth


class ReadsValues(nn.Module):
    """Reads values as transformers' longformer does: one only on real tensors (the padding
    warning of warn_if_padding_and_no_attention_mask, skipped when is_tracing(), which fake
    tensors are), sizes computed as tensors from numbers and read back by a view (its chunking:
    torch.div of a size), and one that decides the path (whether any attention is global:
    mask.any().item())."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.read_on_real_tensors = 0

    def forward(self, x, mask):
        from torch._subclasses.fake_tensor import FakeTensor  # what is_tracing() checks
        if not isinstance(x, FakeTensor) and bool((x[:, :, 0] == 0).any()):
            self.read_on_real_tensors += 1
        chunks = torch.div(x.size(1), 4, rounding_mode="trunc")
        y = self.fc(x).view(x.size(0), chunks, 4, 16)
        if mask.any().item():
            y = torch.cat([y, y], 1)
        return y.relu()


@pytest.mark.parametrize("global_attention", [False, True])
def test_values_read_on_real_tensors_only_do_not_shift_the_others(global_attention):
    """Note [Data-dependent values]: each value the example gave is given back where it was
    read, not by order alone (longformer's estimate failed: the real run's extra read shifted
    the bool onto the chunking's view, "Expected scalar.isIntegral"); a size made from numbers
    is known (no assumption); the value that decides the path is the example's, and said."""
    torch.manual_seed(0)
    model = ReadsValues().eval()
    x = torch.randn(2, 32, 16)
    x[:, 0, 0] = 0  # the real-tensor read finds "padding"
    mask = torch.zeros(2, 32, dtype=torch.bool)
    mask[0, 3] = global_attention
    result = mem_tracer.estimate(model, (x, mask), device="cpu")
    assert result.method == "record"
    assert model.read_on_real_tensors == 0  # the user's model is not run; its copy is
    assumed = [a for a in result.raw["assumptions"] if a["kind"] == "data_dependent_size"]
    assert [a["op"] for a in assumed] == ["aten::_local_scalar_dense"]
    assert f"{global_attention}" in assumed[0]["detail"]
    with torch.no_grad():
        truth = measure_call(model, (x, mask), {}).peak
    assert result.activation_peak_bytes == truth
