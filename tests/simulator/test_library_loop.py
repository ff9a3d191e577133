"""Where the memory goes when the loop is a library's (issues 40 and 51): transformers' Trainer
trains a tiny GPT-2 (bf16, gradient checkpointing off and on) under `memtrace run --gpu`, the
user's code one `trainer.train()` line. The report names the model's modules as the model names
them (Note [Module paths as the user names them] in python/mem_tracer/_modules.py), backward's
included, and its module x category table at the peak (Note [The module table] in
tracer/report/analysis.h) folds the blocks and sums to the categories line. Every byte a module
owns is under it: its parameters' gradients and optimizer state (Note [Everything a parameter
has is its module's] in python/mem_tracer/training.py), the loss's backward (the root's, Note
[Backward modules]), and the activations checkpointing recomputes in backward. The loops of
accelerate over DDP (2 simulated ranks under torchrun) and of Lightning's Trainer too, with
DDP's buckets and the optimizer step's temporaries under owners of their own (Note [Owners
that are not modules])."""
import json
import os
import re
import sys
from pathlib import Path

import pytest
from memtrace_testing import ROOT, Build, report_json, run

HERE = Path(__file__).resolve().parent
TRAINER = HERE / "programs" / "trainer_gpt2.py"
CHECKPOINTED = HERE / "programs" / "checkpointed_blocks.py"
LAYERS = 4  # trainer_gpt2.py's


def memtrace_run(*arguments):
    # Not on the tests' own simulated card: memtrace run --gpu puts the program on its own.
    path = os.pathsep.join(filter(None, [str(ROOT / "python"), os.environ.get("PYTHONPATH")]))
    return run([sys.executable, "-m", "mem_tracer", "run", *map(str, arguments)],
               {"PYTHONPATH": path}, timeout=300, own_card=True)


@pytest.fixture(scope="module", params=["plain", "checkpointing"])
def trained(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(request.param)
    trace = work / "trainer.bin"
    result = memtrace_run("--gpu", "h200", "-o", trace, TRAINER, work / "out", "bf16",
                          request.param)
    assert "trained" in result.stdout, result.stderr[-3000:]
    return trace, result.stdout + result.stderr


def test_the_peak_is_told_apart_by_the_models_modules(trained):
    trace, _ = trained
    report = report_json(trace, "--group-by", "module", "--top", "0")
    rows = {row["location"]: row["bytes"] for row in report["live"]["rows"]}
    # Paths as the model names them, under the name Trainer's code reaches it by (`model`).
    blocks = [name for name in rows if re.fullmatch(r"model\.transformer\.h\.\d+(\..+)?", name)]
    assert {name.split(".")[3] for name in blocks} == {str(i) for i in range(LAYERS)}, rows
    assert "model.lm_head" in rows, rows
    # Every activation autograd saved is charged to the module that made it: what is in no
    # module is what no module's forward or backward made.
    training = report_json(trace)["training"]
    outside = [row for row in training["modules_at_peak"]["rows"] if row["module"] == ""]
    activations = training["categories_at_peak"]["activation"]
    assert activations > 0
    assert not outside or outside[0]["categories"]["activation"] < activations / 20, outside


def test_the_module_table_sums_to_the_categories_line(trained):
    trace, stderr = trained
    training = report_json(trace)["training"]
    table = training["modules_at_peak"]
    assert table["depth"] >= 1 and 1 < len(table["rows"]) <= 12, table
    totals = {category: sum(row["categories"][category] for row in table["rows"])
              for category in training["categories_at_peak"]}
    assert totals == training["categories_at_peak"]
    for row in table["rows"]:
        assert row["bytes"] == sum(row["categories"].values()), row
    # The blocks folded into one row, with their count.
    folded = [row for row in table["rows"] if "*" in row["module"]]
    assert any(row["module"].startswith("model.transformer.h.*") and row["count"] == LAYERS
               for row in folded), table["rows"]
    # The text report (memtrace run prints it) shows the same table.
    assert "By module at the peak" in stderr
    assert re.search(r"model\.transformer\.h\.\*\S* \(x4\)", stderr), stderr[-4000:]
    assert "(all: the categories line)" in stderr


OWNED = ("parameter", "gradient", "optimizer_state")  # by the module owning the parameter


def outside_every_module(training):
    """The module table's `<no module>` row's categories at the peak (all zero without one)."""
    rows = [row for row in training["modules_at_peak"]["rows"] if row["module"] == ""]
    assert len(rows) <= 1, rows
    return rows[0]["categories"] if rows else dict.fromkeys(training["categories_at_peak"], 0)


def test_nothing_a_module_owns_is_outside_every_module(trained):
    # Parameters, their gradients and Adam's state (allocated lazily in the first step, outside
    # any module) are their modules', and the loss's backward the model's: at most 10 % of the
    # peak is in no module (on main before issue 51: 10.0 % plain, the optimizer state).
    trace, _ = trained
    training = report_json(trace)["training"]
    outside = outside_every_module(training)
    peak = sum(training["categories_at_peak"].values())
    assert training["categories_at_peak"]["optimizer_state"] > 0
    assert sum(outside.values()) <= peak / 10, outside
    assert all(outside[category] == 0 for category in OWNED), outside
    # The loss's backward, where backward begins, is the model's: no step's peak in backward is
    # outside every module (the steps table's module column).
    backward = [step for step in training["steps"] if step["peak_phase"] == "backward"]
    assert backward and all(step["peak_module"] for step in backward), training["steps"]


@pytest.mark.parametrize("checkpointing, optimizer", [("reentrant", "foreach"),
                                                      ("nonreentrant", "fused")])
def test_checkpointed_blocks_recompute_under_their_modules(tmp_path, checkpointing, optimizer):
    # The peak is in backward, in the block being recomputed: its recomputed activations (up's
    # output and act's, 4096 x 1024 floats each) are that block's, on autograd's thread for
    # either checkpointing; Adam's state, foreach or fused, is its parameters' modules'. What is
    # in no module is the user's input alone.
    trace = tmp_path / "blocks.bin"
    result = memtrace_run("--gpu", "h200", "-o", trace, CHECKPOINTED, checkpointing, optimizer)
    assert "trained" in result.stdout, result.stderr[-3000:]
    training = report_json(trace)["training"]
    step = max(training["steps"], key=lambda step: step["peak_bytes"])
    assert step["peak_phase"] == "backward", step
    block = re.fullmatch(r"(net\.blocks\.\d)\..+", step["peak_module"])
    assert block, step
    rows = {row["location"]: row["bytes"]
            for row in report_json(trace, "--group-by", "module", "--top", "0")["live"]["rows"]}
    recomputed = sum(size for name, size in rows.items() if name.startswith(block[1] + "."))
    assert recomputed >= 2 * 4096 * 1024 * 4, rows
    outside = outside_every_module(training)
    assert outside["input"] == 4096 * 256 * 4, outside
    assert sum(outside.values()) - outside["input"] < 1024, outside
    assert training["categories_at_peak"]["optimizer_state"] >= 2 * 4 * (2 * 256 * 1024), training
    table = training["modules_at_peak"]["rows"]
    assert {category: sum(row["categories"][category] for row in table)
            for category in training["categories_at_peak"]} == training["categories_at_peak"]


def test_the_one_line_that_holds_the_peak_is_broken_down(trained):
    # `trainer.train()` holds the peak: the report says so, and breaks it down by module and by
    # the library's own lines (Note [One line holds the peak] in tracer/report/locations.h).
    trace, stderr = trained
    live = report_json(trace, "--top", "0")["live"]
    line = live["dominant_line"]
    assert line["location"].endswith("trainer_gpt2.py:29 (<module>)"), line["location"]
    assert line["share"] >= 0.5 and line["bytes"] == live["rows"][0]["bytes"]
    for breakdown in ("by_module", "by_library_line"):
        assert sum(row["bytes"] for row in line[breakdown]) == line["bytes"], breakdown
    assert any(row["location"].startswith("model.transformer.h.") for row in line["by_module"])
    assert any("models/gpt2/modeling_gpt2.py:" in row["location"]
               for row in line["by_library_line"]), line["by_library_line"][:5]
    assert not any("/torch/" in row["location"] for row in line["by_library_line"])
    assert re.search(r"One line holds \d+ % of the peak .*trainer_gpt2\.py:29 \(<module>\)", stderr)


def test_start_tracing_without_a_model_names_modules_forward_and_backward(tmp_path):
    trace = tmp_path / "unnamed.bin"
    run([sys.executable, HERE / "programs" / "unnamed_model.py", trace],
        {"PYTHONPATH": str(ROOT / "python")}, timeout=120)
    # At the peak (backward: the gradients of `up`, 3001 x 1000 floats and its bias's), and
    # what the forward left for it (the activations of `up` and `act`), by module.
    rows = {row["location"]: row["bytes"]
            for row in report_json(trace, "--group-by", "module", "--top", "0")["live"]["rows"]}
    assert not any("module" in name.split(".") or name.startswith("Wrapper") for name in rows), rows
    assert rows.get("wrapped.up", 0) >= 257 * 3001 * 4, rows  # up's output, saved for backward
    # Backward's allocations are the module's whose backward runs: the weight gradients.
    down_grad = 3001 * 10 * 4
    assert rows.get("wrapped.down", 0) >= down_grad, rows


# ---- the loops people use (issue 51, item 4): accelerate over DDP, Lightning -------------

ACCELERATE_DDP = HERE / "programs" / "accelerate_ddp.py"
LIGHTNING = HERE / "programs" / "lightning_loop.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"


# The MLP's parameters (scripts/parallel_step.py's, lightning_loop.py's): 21,020,682.
PARAMETERS = (1024 * 4096 + 4096) + (4096 * 4096 + 4096) + (4096 * 10 + 10)


def check_owned(training):
    """At most 10 % of the peak in `<no module>`, none of it a parameter's, a gradient or
    optimizer state; the module x category table summing to the categories line, cell by cell.
    Returns the table's rows by name."""
    at_peak = training["categories_at_peak"]
    rows = training["modules_at_peak"]["rows"]
    assert {category: sum(row["categories"][category] for row in rows)
            for category in at_peak} == at_peak, rows
    outside = outside_every_module(training)
    assert all(outside[category] == 0 for category in OWNED), outside
    assert sum(outside.values()) <= sum(at_peak.values()) / 10, (outside, at_peak)
    assert at_peak["parameter"] > 0 and at_peak["optimizer_state"] > 0, at_peak
    return {row["location"]: row for row in rows}


def test_accelerate_over_ddp_on_two_simulated_ranks(tmp_path):
    """accelerate's loop (`accelerator.backward(loss)`) with DDP over 2 simulated H100s: each
    rank's peak (in the optimizer's step) has DDP's buckets under <DDP buckets> and foreach
    AdamW's temporaries under <optimizer.step> (Note [Owners that are not modules] in
    python/mem_tracer/training.py); what is in no module is the batch and the loss."""
    folder = tmp_path / "job"
    result = memtrace_run("--gpu", "h100", "-q", "-o", folder, TORCHRUN, "--standalone",
                          "--nproc-per-node", 2, ACCELERATE_DDP)
    assert "trained rank 0 of 2" in result.stdout and "trained rank 1 of 2" in result.stdout, \
        result.stderr[-3000:]
    traces = sorted(folder.glob("*.bin"))
    assert len(traces) == 2, traces
    parameters = PARAMETERS
    for trace in traces:
        rows = check_owned(report_json(trace)["training"])
        assert rows["network.* (x3)"]["categories"]["parameter"] == 4 * parameters, rows
        assert rows["<DDP buckets>"]["bytes"] in (4 * parameters, 8 * parameters), rows
        assert rows["<optimizer.step>"]["bytes"] > 0, rows
    # The job report has the same table for each rank.
    job = json.loads(run([Build.report, folder, "--format", "json"]).stdout)
    assert [rank["modules_at_peak"] is not None for rank in job["ranks"]] == [True, True]
    assert "<DDP buckets>" in {row["location"] for row in job["modules"]["rows"]}


def test_lightning_trainer_on_the_simulated_card(tmp_path):
    """Lightning's Trainer (its optimizer step runs the user's training_step inside
    `optimizer.step(closure)`): the model's modules own their parameters, gradients and AdamW's
    state; at most 10 % of the peak is in no module. The closure runs outside the step's owner
    and phase (Note [A closure inside the optimizer's step] in python/mem_tracer/training.py):
    `<optimizer.step>` holds foreach AdamW's temporaries alone, one a parameter (84,082,728 B,
    what the estimate of the same step without a closure puts there: test_parallel_jobs.py's
    DDP cells), and each step peaks in the optimizer phase. Before it: 84,082,736 B (the loss
    and its gradient's scalar in it) and a peak phase of `none` in every step."""
    import importlib.util
    assert importlib.util.find_spec("lightning") is not None, (
        f"lightning is not installed for {sys.executable}: make cuda-torch-venv installs it")
    trace = tmp_path / "lightning.bin"
    result = memtrace_run("--gpu", "h100", "-q", "-o", trace, LIGHTNING, tmp_path / "out")
    assert "trained" in result.stdout, result.stderr[-3000:]
    training = report_json(trace)["training"]
    rows = check_owned(training)
    assert [step["step"] for step in training["steps"]] == [1, 2, 3], training["steps"]
    assert any(name.startswith("network") for name in rows), rows
    assert rows["<optimizer.step>"]["bytes"] == 4 * PARAMETERS, rows["<optimizer.step>"]
    assert [step["peak_phase"] for step in training["steps"]] == ["optimizer"] * 3, \
        training["steps"]


SCALER = HERE / "programs" / "scaler_loop.py"


def test_a_grad_scalers_step_is_where_the_estimate_puts_it(tmp_path):
    """A GradScaler's step and update run under `<optimizer.step>` in the trace as in the
    estimate (TrainingStep(scaler=True) records them in the optimizer phase): the found-inf
    flag unscale_ keeps until update() was `<no module>` in the trace and `<optimizer.step>` in
    the estimate (4 B apart each way) before GradScaler.step was charged to the step. Every
    module x category cell of the program's peak equal to the estimate's, to the byte."""
    trace, estimate = tmp_path / "scaler.bin", tmp_path / "scaler.json"
    result = memtrace_run("--gpu", "h100", "-q", "-o", trace, SCALER)
    assert "trained" in result.stdout, result.stderr[-3000:]
    run([sys.executable, SCALER, "predict", estimate],
        {"PYTHONPATH": str(ROOT / "python")}, timeout=300)
    said = report_json(trace, "--estimate", estimate, "--top", "0")
    table = said["training"]["modules_at_peak"]
    assert said["summary"]["peak_bytes"] == said["estimate"]["peak_requested_bytes"], said["summary"]
    cells = {row["location"]: (row["categories"], row["predicted"] and row["predicted"]["categories"])
             for row in table["rows"]}
    assert all(measured == predicted for measured, predicted in cells.values()), cells
    assert table["predicted_only"] == [], table["predicted_only"]
    assert cells["<optimizer.step>"][0]["temporary"] == 4 * PARAMETERS + 4, cells
