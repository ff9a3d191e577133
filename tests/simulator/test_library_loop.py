"""Where the memory goes when the loop is a library's (issue 40): transformers' Trainer trains a
tiny GPT-2 (bf16, gradient checkpointing off and on) under `memtrace run --gpu`, the user's code
one `trainer.train()` line. The report names the model's modules as the model names them
(Note [Module paths as the user names them] in python/mem_tracer/_modules.py), backward's
included, and its module x category table at the peak (Note [The module table] in
tracer/report/analysis.h) folds the blocks and sums to the categories line."""
import os
import re
import sys
from pathlib import Path

import pytest
from memtrace_testing import ROOT, report_json, run

HERE = Path(__file__).resolve().parent
TRAINER = HERE / "programs" / "trainer_gpt2.py"
LAYERS = 4  # trainer_gpt2.py's


def memtrace_run(*arguments):
    # Not on the tests' own simulated card: memtrace run --gpu puts the program on its own.
    import memtrace_testing
    saved, memtrace_testing.SIMULATED_GPU = memtrace_testing.SIMULATED_GPU, None
    path = os.pathsep.join(filter(None, [str(ROOT / "python"), os.environ.get("PYTHONPATH")]))
    try:
        return run([sys.executable, "-m", "mem_tracer", "run", *map(str, arguments)],
                   {"PYTHONPATH": path}, timeout=300)
    finally:
        memtrace_testing.SIMULATED_GPU = saved


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
    # module is what no module's forward or backward made (parameters put on the device, the
    # optimizer's state and its step).
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
