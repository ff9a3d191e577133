"""Training categories, phases and steps (issue 13, part 1), measured under the test CUDA
runtime: a small MLP and a small transformer trained for 3 steps with SGD (momentum) and
AdamW, every tensor storage mirrored into memtrace (scripts/host_mirror.py). The script works
out what the report must say by itself (its own count of live bytes, the parameters, each
step's .grads, the optimizer's state, the tensors autograd saved through its own
saved_tensors_hooks), never from the report."""
import json
import re
import sys
from pathlib import Path

import pytest

from memtrace_testing import ROOT, Build, parse_records, run

SCRIPTS = Path(__file__).parent / "scripts"
PACKAGE = ROOT / "python"


def train(tmp_path, model, optimizer, *extra):
    trace = tmp_path / f"{model}-{optimizer}.bin"
    result = run([sys.executable, SCRIPTS / "train.py", Build.cuda, trace, model, optimizer, "3",
                  *extra], {"PYTHONPATH": f"{PACKAGE}:{SCRIPTS}"}, timeout=300)
    return trace, json.loads(result.stdout.splitlines()[-1])


def report(trace, *options):
    return run([Build.report, trace, *options]).stdout


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_category_bytes_at_the_peak_are_exact(build, tmp_path, model, optimizer):
    trace, expected = train(tmp_path, model, optimizer)
    said = json.loads(report(trace, "--format", "json", "--group-by", "category", "--top", "0"))
    assert said["summary"]["peak_bytes"] == expected["peak_bytes"]
    training = said["training"]
    assert training["categories_at_peak"] == expected["categories"]
    assert sum(training["categories_at_peak"].values()) == said["summary"]["peak_bytes"]
    assert training["categories_ignored"] == 0
    # The grouped table is the same breakdown, row by row.
    rows = {row["location"]: row["bytes"] for row in said["live"]["rows"]}
    assert rows == {name: size for name, size in expected["categories"].items() if size}
    # Each step: its own peak and what was live there.
    steps = training["steps"]
    assert [step["step"] for step in steps] == [1, 2, 3]
    assert all(step["finished"] for step in steps)
    assert [step["peak_bytes"] for step in steps] == [s["peak_bytes"] for s in expected["steps"]]
    assert [step["categories"] for step in steps] == [s["categories"] for s in expected["steps"]]
    for step in steps:
        assert sum(step["categories"].values()) == step["peak_bytes"]
        assert step["peak_phase"] in ("forward", "backward", "optimizer")
    # Step 1 creates the optimizer state: none is live before its optimizer phase, and all of
    # it at step 2's peak.
    assert expected["steps"][1]["categories"]["optimizer_state"] > 0
    assert training["first_step"]["optimizer_state_bytes"] == \
        expected["steps"][1]["categories"]["optimizer_state"]
    if model == "transformer":
        # Its peak is in backward, with the saved activations live.
        assert expected["categories"]["activation"] > 0
    text = report(trace)
    assert "Steps (3):" in text and "step 1 created the optimizer state" in text
    csv = report(trace, "--format", "csv", "--group-by", "category").splitlines()
    assert csv[1].split(",")[4] == f'"{max(rows, key=rows.get)}"'


def test_without_a_model_the_optimizer_hooks_alone_tell_parameters_gradients_and_state(
        build, tmp_path):
    # start_tracing() without model=: no inputs or activations (those need the root module's
    # hooks): they count as temporary.
    trace, expected = train(tmp_path, "transformer", "adamw", "nomodel")
    training = json.loads(report(trace, "--format", "json"))["training"]
    assert training["categories_at_peak"] == expected["categories"]
    assert expected["categories"]["activation"] == expected["categories"]["input"] == 0
    assert expected["categories"]["parameter"] > 0 and expected["categories"]["gradient"] > 0
    assert len(training["steps"]) == 3


def test_backward_allocations_carry_the_module_whose_backward_runs(build, tmp_path):
    # On the CPU autograd runs backward on the caller's thread; the hooks are the ones a
    # GPU's autograd thread would run (they set the module of the thread that runs them).
    trace, _ = train(tmp_path, "mlp", "sgd")
    records = parse_records(trace)
    strings = {r["id"]: r["words"][0] if r.get("words") else None for r in records
               if r["record"] == "string"}
    phase, module, in_backward = None, None, set()
    for record in records:
        if record["record"] == "training-phase":
            phase = record["phase"]
        elif record["record"] == "scope":
            module = record["module"]
        elif record["record"] == "alloc" and phase == "backward":
            in_backward.add(module)
    names = {strings.get(module, "").strip('"') for module in in_backward if module != "0"}
    assert {"model.0", "model.2"} <= names, names


def test_a_trace_without_training_records_reads_as_before(build):
    # Written before the training records existed (tests/fuzz/corpus, committed).
    trace = ROOT / "tests" / "fuzz" / "corpus" / "everything.bin"
    said = json.loads(report(trace, "--format", "json", "--group-by", "category"))
    assert "training" not in said
    assert [row["location"] for row in said["live"]["rows"]] == ["unknown"]
    assert "Steps" not in report(trace) and "Categories" not in report(trace)


def test_the_hooks_change_nothing_the_program_computes(build, tmp_path):
    # Same seed, same steps, with and without start_tracing(model=...): the same weights, bit
    # for bit (the hooks only read tensors: pack returns the tensor, the pre-hooks return None).
    code = f"""
import ctypes, sys, warnings
ctypes.CDLL({str(Build.cuda)!r}, mode=ctypes.RTLD_GLOBAL)
import torch
from torch import nn
import mem_tracer

def train(traced):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters())
    if traced:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mem_tracer.start_tracing({str(tmp_path / "same.bin")!r}, model=model)
    for _ in range(3):
        loss = model(torch.randn(8, 16)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if traced:
        mem_tracer.stop_tracing()
    return [p.detach().clone() for p in model.parameters()]

untraced, traced = train(False), train(True)
print(all(torch.equal(a, b) for a, b in zip(untraced, traced)))
"""
    result = run([sys.executable, "-c", code], {"PYTHONPATH": str(PACKAGE)})
    assert result.stdout.split() == ["True"]


@pytest.mark.parametrize("how", ["model", "nomodel", "unmodified"])
def test_the_weights_are_their_modules_and_named_as_allocated_before_tracing(build, tmp_path, how):
    # Note [Weights and their modules], Note [What was live before tracing]: the package tells
    # each parameter's module, at the start with model=, else when its module first runs
    # (start_tracing() without model=, `memtrace run`): by module the weights are their
    # modules'. Put on the device before tracing starts, they are named as such by line; under
    # `memtrace run`, tracing from the first line, they are the line that put them there.
    if how == "unmodified":
        traces = tmp_path / "run-%p.bin"
        run([sys.executable, "-m", "mem_tracer", "run", "-q", "-o", traces, SCRIPTS / "train.py",
             Build.cuda, tmp_path / "unused.bin", "mlp", "sgd", "3", "unmodified"],
            {"PYTHONPATH": f"{PACKAGE}:{SCRIPTS}"}, timeout=300)
        (trace,) = tmp_path.glob("run-*.bin")
    else:
        trace, _ = train(tmp_path, "mlp", "sgd", *(["nomodel"] if how == "nomodel" else []))
    first, second = 64 * 256 * 4 + 256 * 4, 256 * 10 * 4 + 10 * 4  # nn.Linear(64, 256), (256, 10)
    said = json.loads(report(trace, "--format", "json", "--top", "0"))
    rows = {row["location"]: row["bytes"] for row in said["live"]["rows"]}
    assert rows.get("weights, allocated before tracing") == (
        None if how == "unmodified" else first + second), rows
    assert "untraced" not in rows and "<no module>" not in rows
    modules = {row["location"]: row["categories"]["parameter"]
               for row in said["training"]["modules_at_peak"]["rows"] if row["categories"]["parameter"]}
    assert modules == {"model.* (x3)": first + second}, said["training"]["modules_at_peak"]
    by_module = json.loads(report(trace, "--format", "json", "--top", "0", "--group-by", "module"))
    named = {row["location"] for row in by_module["live"]["rows"]}
    assert {"model.0", "model.2"} <= named and "weights, allocated before tracing" not in named
    # Told once per allocation: each parameter and its momentum buffer once however many steps
    # ran, each step's new gradients (zero_grad sets them to None) once (Note [Everything a
    # parameter has is its module's] in python/mem_tracer/training.py).
    assert [r["record"] for r in parse_records(trace)].count("owner-module") == 4 + 4 + 3 * 4


def test_the_c_api_refuses_what_the_format_cannot_hold(build, tmp_path):
    code = f"""
import ctypes
ctypes.CDLL({str(Build.cuda)!r}, mode=ctypes.RTLD_GLOBAL)
from mem_tracer import _native, training
lib = training._library()
print(lib.memtrace_set_category(4096, 1), _native.last_error())
lib.memtrace_start({str(tmp_path / "api.bin")!r}.encode())
print(lib.memtrace_set_category(4096, 7), _native.last_error())
print(lib.memtrace_training_phase(4), _native.last_error())
print(lib.memtrace_set_category(4096, 6), lib.memtrace_training_phase(2), lib.memtrace_step_end(1))
lib.memtrace_close()
"""
    lines = run([sys.executable, "-c", code], {"PYTHONPATH": str(PACKAGE)}).stdout.splitlines()
    assert lines[0] == "-1 tracing has not started: call memtrace_start() first"
    assert lines[1].startswith("-1 memtrace_set_category: the category is not")
    assert lines[2].startswith("-1 memtrace_training_phase: the phase is not")
    assert lines[3] == "0 0 0"
    records = [r["record"] for r in parse_records(tmp_path / "api.bin")]
    assert records.count("category") == 1 and records.count("training-phase") == 1
    assert records.count("step-end") == 1


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_the_predicted_step_stands_beside_the_measured_one(build, tmp_path, model, optimizer):
    # The script estimates its own training step (mem_tracer.estimate(training=True), recorded
    # on fake tensors) before it trains: the report shows the prediction beside each category.
    estimate = tmp_path / "estimate.json"
    trace, expected = train(tmp_path, model, optimizer, f"estimate={estimate}")
    predicted = json.loads(estimate.read_text())["summary"]
    assert predicted["training_peak_bytes"] == expected["peak_bytes"]
    assert predicted["training_breakdown"] == {
        name: size for name, size in expected["categories"].items() if name != "unknown"}
    said = json.loads(report(trace, "--format", "json", "--group-by", "category", "--top", "0",
                             "--estimate", estimate))
    rows = {row["location"]: (row["bytes"], row["predicted_bytes"]) for row in said["live"]["rows"]}
    assert rows and all(measured == predicted for measured, predicted in rows.values()), rows
    text = report(trace, "--group-by", "category", "--estimate", estimate)
    assert "Predicted categories at the step's peak: parameter" in text
    assert f"Predicted peak: " in text and "+0.0 % against the measured peak" in text


@pytest.mark.parametrize(("model", "optimizer"), [("mlp", "sgd"), ("transformer", "adamw")])
def test_each_module_cell_is_predicted_to_the_byte(build, tmp_path, model, optimizer):
    """Note [Predicted module cells] (tracer/report/prediction.cpp): the estimate's module x
    category cells, joined to the measured module table, equal it cell by cell where the
    estimate is exact (the CPU's step, as test_the_predicted_step_stands_beside_the_measured_one
    shows for the categories): the parameters, gradients and optimizer state under the module
    that owns the parameter, the activations and temporaries under the module that made them,
    the optimizer's own temporaries under <optimizer.step>, the loss and the inputs under no
    module. Then the same estimate with one module renamed: that row's cells no longer meet."""
    estimate = tmp_path / "estimate.json"
    trace, expected = train(tmp_path, model, optimizer, f"estimate={estimate}")
    said = json.loads(report(trace, "--format", "json", "--top", "0", "--estimate", estimate))
    table = said["training"]["modules_at_peak"]
    cells = {row["location"]: (row["categories"], row["predicted"]["categories"])
             for row in table["rows"]}
    assert all(measured == predicted for measured, predicted in cells.values()), cells
    assert len(cells) >= 2 and table["predicted_only"] == [], table
    assert table["predicted_total"]["categories"] == expected["categories"]
    assert table["predicted_total"]["bytes"] == expected["peak_bytes"]
    # Every category that holds bytes is somewhere other than <no module> but the inputs'.
    owned = {name for location, (measured, _) in cells.items() if location != "<no module>"
             for name, size in measured.items() if size}
    assert {"parameter", "gradient", "optimizer_state"} <= owned, cells
    text = report(trace, "--estimate", estimate)
    # Beneath each row and the categories line, its prediction: "=" in every cell.
    beneath = [line.split()[:-1] for line in text.splitlines() if line.endswith("    predicted")]
    assert len(beneath) == len(cells) + 1, text
    assert all(cell == "=" for line in beneath for cell in line), text

    # Renamed: the first module path under the root that holds a parameter is moved elsewhere.
    document = json.loads(estimate.read_text())
    moved = next(cell["module_path"] for cell in document["requested_peak"]["by_module_category"]
                 if cell["category"] == "parameter" and not cell["module_path"].startswith("<"))
    for cell in document["requested_peak"]["by_module_category"]:
        if cell["module_path"] == moved:
            cell["module_path"] = "renamed"
    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps(document))
    table = json.loads(report(trace, "--format", "json", "--top", "0", "--estimate",
                              renamed))["training"]["modules_at_peak"]
    apart = [row["location"] for row in table["rows"]
             if row["categories"] != row["predicted"]["categories"]]
    # At depth 1 (the MLP's table: model.*), a path without an index folds into the root's row.
    expected = "model.renamed" if table["depth"] > 1 else "model"
    assert apart and [row["location"] for row in table["predicted_only"]] == [expected], table


def test_memtrace_run_records_categories_of_an_unmodified_script(build, tmp_path):
    # `python -m mem_tracer run train.py`: the script calls no start_tracing(); the bootstrap
    # installs the training hooks, and the first module called is the root (its arguments the
    # inputs, what autograd saves in its forward the activations).
    traces = tmp_path / "run-%p.bin"
    result = run([sys.executable, "-m", "mem_tracer", "run", "-q", "-o", traces, SCRIPTS / "train.py",
                  Build.cuda, tmp_path / "unused.bin", "transformer", "adamw", "3", "unmodified"],
                 {"PYTHONPATH": f"{PACKAGE}:{SCRIPTS}"}, timeout=300)
    expected = json.loads(result.stdout.splitlines()[-1])
    (trace,) = tmp_path.glob("run-*.bin")
    training = json.loads(report(trace, "--format", "json"))["training"]
    assert training["categories_at_peak"] == expected["categories"]
    assert expected["categories"]["activation"] > 0 and expected["categories"]["input"] > 0
    assert [step["peak_bytes"] for step in training["steps"]] == [
        step["peak_bytes"] for step in expected["steps"]]


def test_the_page_stacks_the_timeline_by_category_with_phases_and_steps(build, tmp_path):
    trace, expected = train(tmp_path, "transformer", "adamw")
    page = tmp_path / "categories.html"
    run([Build.report, "html", "--group-by", "category", trace, "-o", page])
    match = re.search(r'<script type="application/json" id="memtrace-data">(.*?)</script>',
                      page.read_text(), re.S)
    timeline = json.loads(match.group(1))["timeline"]
    lanes = timeline["lane_names"]
    assert set(lanes) - {"other"} == {name for name, size in expected["categories"].items() if size}
    # Each sample's lanes are the categories live then; at the peak, the report's breakdown.
    peak = timeline["bytes"].index(max(timeline["bytes"]))
    at_peak = {name: timeline["lanes"][lane][peak] for lane, name in enumerate(lanes)}
    assert {name: size for name, size in at_peak.items() if size} == {
        name: size for name, size in expected["categories"].items() if size}
    # Three steps: a forward, backward and optimizer band each, and each step's end marked.
    marks = timeline["marks"]
    begins = [mark["name"] for mark in marks if mark["kind"] == "phase-begin"]
    assert begins == ["forward", "backward", "optimizer"] * 3
    assert len([mark for mark in marks if mark["kind"] == "phase-end"]) == 9
    assert [mark["name"] for mark in marks if mark["kind"] == "annotation"] == [
        "step 1", "step 2", "step 3"]
