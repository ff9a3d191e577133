"""The report on traces with training records (Note [Training records]), written by hand so
that every byte is known: categories told after the allocation apply to its whole life, a
category for an address that starts no live allocation is ignored, the per-step table, the
PyTorch snapshot's categories, and damaged training records refused in one line."""
import json
import pickle
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memtrace_testing import Build, run  # noqa: E402
from memtrace_testing import report_fails as fails  # noqa: E402
from trace_writer import (ACTIVATION, BACKWARD, CATEGORY, FORWARD, GRADIENT, INPUT,  # noqa: E402
                          NO_PHASE, OPTIMIZER, OPTIMIZER_STATE, PARAMETER, STEP_END,
                          TRACE_CLOSED, TRACING_STARTED, TRAINING_PHASE, TraceWriter, varint)

KIB = 1024
P, A, G, S, X, T = (0x7f0000000000 + (i << 20) for i in range(6))


def two_steps(path):
    """Parameter P (4 KiB, before tracing), per step: input X (1 KiB), activation A (2 KiB),
    temporary T (8 KiB, in backward), gradient G (4 KiB, told at the optimizer's step),
    optimizer state S (4 KiB, made in step 1's optimizer phase and kept)."""
    w = TraceWriter()
    w.device(0, w.string("GPU 0"), 1 << 30).context(1, 0)
    w.alloc(1, P, 4 * KIB)
    w.marker(2, TRACING_STARTED)
    w.category(P, PARAMETER)
    time = 10
    for step in (1, 2):
        w.alloc(time, X, KIB)
        w.training_phase(time + 1, FORWARD)
        w.category(X, INPUT)
        w.alloc(time + 2, A, 2 * KIB)
        w.category(A, ACTIVATION)
        w.training_phase(time + 3, BACKWARD)
        w.alloc(time + 4, G, 4 * KIB)  # the step's peak, before T in step 2 (S is live)
        w.alloc(time + 5, T, 8 * KIB)
        w.free(time + 6, T)
        w.free(time + 7, A)
        w.training_phase(time + 8, OPTIMIZER)
        w.category(G, GRADIENT)
        if step == 1:
            w.alloc(time + 9, S, 4 * KIB)
        w.category(S, OPTIMIZER_STATE)
        w.category(0x1234, OPTIMIZER_STATE)  # no allocation starts there: ignored
        w.step_end(time + 10, step)
        w.training_phase(time + 10, NO_PHASE)
        w.free(time + 11, G)
        w.free(time + 12, X)
        time += 100
    w.marker(time, TRACE_CLOSED)
    return w.write(path)


def test_categories_told_late_apply_to_the_whole_allocation(build, tmp_path):
    trace = two_steps(tmp_path / "steps.bin")
    said = json.loads(run([build.report, trace, "--format", "json", "--group-by", "category"]).stdout)
    # The peak: step 2, at T (P + S + X + A + G + T).
    assert said["summary"]["peak_bytes"] == (4 + 4 + 1 + 2 + 4 + 8) * KIB
    training = said["training"]
    assert training["categories_at_peak"] == {
        "parameter": 4 * KIB, "gradient": 4 * KIB, "optimizer_state": 4 * KIB,
        "activation": 2 * KIB, "input": KIB, "temporary": 8 * KIB, "unknown": 0}
    assert training["categories_told"] == 11 and training["categories_ignored"] == 2
    steps = training["steps"]
    assert [(s["step"], s["finished"], s["peak_bytes"], s["peak_phase"]) for s in steps] == [
        (1, True, (4 + 1 + 2 + 4 + 8) * KIB, "backward"),
        (2, True, (4 + 4 + 1 + 2 + 4 + 8) * KIB, "backward")]
    assert steps[0]["categories"]["optimizer_state"] == 0
    assert steps[1]["categories"]["optimizer_state"] == 4 * KIB
    assert training["first_step"] == {"optimizer_state_bytes": 4 * KIB,
                                      "peak_difference_bytes": 4 * KIB}
    rows = {row["location"]: row["bytes"] for row in said["live"]["rows"]}
    assert rows == {"temporary": 8 * KIB, "parameter": 4 * KIB, "gradient": 4 * KIB,
                    "optimizer_state": 4 * KIB, "activation": 2 * KIB, "input": KIB}
    text = run([build.report, trace]).stdout
    assert "Steps (2):" in text
    assert "step 1 created the optimizer state: 4.000 KiB" in text


def test_the_module_table_folds_blocks_and_sums_to_the_categories_line(build, tmp_path):
    # Note [The module table]: 3 blocks of 2 sublayers each, a head, and what no module made.
    w = TraceWriter()
    w.device(0, w.string("GPU 0"), 1 << 30).context(1, 0)
    w.marker(1, TRACING_STARTED)
    w.training_phase(2, FORWARD)
    address, time = 0x7f0000000000, 10
    for path, size, category in (
            [(f"model.layers.{i}.{part}", (i + 1) * KIB, ACTIVATION)
             for i in range(3) for part in ("attn", "mlp")]
            + [("model.head", 16 * KIB, 0), ("", 32 * KIB, PARAMETER)]):
        w.module_scope(w.string(path) if path else 0)
        w.alloc(time, address, size)
        if category:
            w.category(address, category)
        address += 1 << 20
        time += 1
    trace = w.write(tmp_path / "modules.bin")
    training = json.loads(run([build.report, trace, "--format", "json"]).stdout)["training"]
    table = training["modules_at_peak"]
    # 8 paths fit in 12 rows at full depth: the blocks fold, 3 of each sublayer.
    assert table["depth"] == 3
    assert [(r["module"], r["count"], r["bytes"]) for r in table["rows"]] == [
        ("", 1, 32 * KIB), ("model.head", 1, 16 * KIB),
        ("model.layers.*.attn", 3, 6 * KIB), ("model.layers.*.mlp", 3, 6 * KIB)]
    totals = {category: sum(r["categories"][category] for r in table["rows"])
              for category in training["categories_at_peak"]}
    assert totals == training["categories_at_peak"]
    assert table["rows"][0]["categories"]["parameter"] == 32 * KIB
    assert table["rows"][1]["categories"]["temporary"] == 16 * KIB
    text = run([build.report, trace]).stdout
    assert "By module at the peak (paths cut to 3 named parts, * for repeated blocks):" in text
    assert "model.layers.*.attn (x3)" in text and "<no module>" in text
    assert "(all: the categories line)" in text


def owners_and_modules(path):
    """13 modules model.part0..12 (1 KiB each: too many rows at depth 2, so the table is cut to
    `model`), and what the package charges to owners that are not modules (Note [Owners that
    are not modules] in python/mem_tracer/training.py): <DDP buckets> 64 KiB, <optimizer.step>
    32 KiB, with a dot in its name; and 2 KiB in no module."""
    w = TraceWriter()
    w.device(0, w.string("GPU 0"), 1 << 30).context(1, 0)
    w.marker(1, TRACING_STARTED)
    w.training_phase(2, FORWARD)
    address, time = 0x7f0000000000, 10
    for module, size in ([(f"model.part{i}", KIB) for i in range(13)]
                         + [("<DDP buckets>", 64 * KIB), ("<optimizer.step>", 32 * KIB),
                            ("", 2 * KIB)]):
        w.module_scope(w.string(module) if module else 0)
        w.alloc(time, address, size)
        address += 1 << 20
        time += 1
    return w.write(path)


def test_owners_that_are_not_modules_are_rows_of_their_own_never_cut(build, tmp_path):
    trace = owners_and_modules(tmp_path / "owners.bin")
    training = json.loads(run([build.report, trace, "--format", "json"]).stdout)["training"]
    table = training["modules_at_peak"]
    assert table["depth"] == 1
    assert [(r["module"], r["count"], r["bytes"]) for r in table["rows"]] == [
        ("<DDP buckets>", 1, 64 * KIB), ("<optimizer.step>", 1, 32 * KIB),
        ("model", 1, 13 * KIB), ("", 1, 2 * KIB)]
    text = run([build.report, trace]).stdout
    assert "By module at the peak (paths cut to 1 named part, * for repeated blocks):" in text
    assert re.search(r"^\s+32\.00 KiB\s+32\.00 KiB\s+<optimizer\.step>$", text, re.M), text


def test_the_page_has_the_module_table_sortable_by_any_column(build, tmp_path):
    """The HTML page's module x category table beside the flame graph: the report's rows,
    largest first; a click on a title sorts by that column, a second reverses it."""
    import chromium
    assert chromium.executable() is not None, "Chromium is not installed (run scripts/setup.sh)"
    trace = owners_and_modules(tmp_path / "owners.bin")
    page = tmp_path / "owners.html"
    run([build.report, "html", trace, "-o", page])
    browser = chromium.Browser(width=1400, height=1000)
    try:
        browser.open(page)
        browser.wait_until("document.body && document.body.getAttribute('data-ready') === '1'")
        assert browser.evaluate("document.getElementById('modules-section').hidden") is False
        modules = "[...document.querySelectorAll('#modules tbody tr')].map(r => r.getAttribute('data-module'))"
        assert browser.evaluate(modules) == ["<DDP buckets>", "<optimizer.step>", "model",
                                             "<no module>"]
        assert browser.evaluate("[...document.querySelectorAll('#modules th')].map(t => t.textContent)") \
            == ["Total", "temporary", "Module"]
        footer = "[...document.querySelectorAll('#modules tfoot td')].map(t => t.textContent)"
        assert browser.evaluate(footer)[2] == "(all: the categories line)"
        assert browser.evaluate(footer)[0] == browser.evaluate(footer)[1]  # all temporary
        browser.evaluate("document.querySelector('#modules th[data-column=\"Module\"]').click()")
        assert browser.evaluate(modules) == ["<DDP buckets>", "<no module>", "<optimizer.step>",
                                             "model"]
        browser.evaluate("document.querySelector('#modules th[data-column=\"Module\"]').click()")
        assert browser.evaluate("document.getElementById('modules').getAttribute('data-sorted')") \
            == "Module descending"
        assert browser.evaluate(modules)[0] == "model"
        browser.evaluate("document.querySelector('#modules th[data-column=\"Total\"]').click()")
        assert browser.evaluate(modules)[0] == "<DDP buckets>"
        assert browser.problems() == []
    finally:
        browser.close()


def owners_estimate(path):
    """An estimate of owners_and_modules()'s trace with module x category cells (Note [Module x
    category predicted] in estimator/passes/attribute_peak.h): <DDP buckets> as measured, none
    of <optimizer.step>, 12 of the 13 parts and 512 B in the root itself (one row at depth 1),
    and a parameter besides the temporaries in no module, a category the trace has none of."""
    cells = ([{"module_path": f"part{i}", "category": "temporary", "bytes": KIB} for i in range(12)]
             + [{"module_path": "", "category": "temporary", "bytes": 512},
                {"module_path": "<DDP buckets>", "category": "temporary", "bytes": 64 * KIB},
                {"module_path": "<no module>", "category": "temporary", "bytes": 2 * KIB},
                {"module_path": "<no module>", "category": "parameter", "bytes": KIB}])
    path.write_text(json.dumps({
        "format": "memtrace-estimate", "version": 1, "model": "hand", "semantics": "eager",
        "summary": {"peak_requested_bytes": 159 * KIB // 2, "peak_allocated_bytes": 80 * KIB},
        "requested_peak": {"by_frame": [], "by_user_frame": [], "by_module": [],
                           "by_module_category": cells}}))
    return path


def test_each_module_cell_has_its_prediction_beside_it(build, tmp_path):
    """Note [Predicted module cells] (tracer/report/prediction.cpp): the estimate's cells folded
    to the measured table's depth and joined by module: in JSON each row's "predicted", in the
    text a line beneath each row ("=" where the same to the byte), and on the page beneath
    each figure (Chromium)."""
    trace = owners_and_modules(tmp_path / "owners.bin")
    estimate = owners_estimate(tmp_path / "estimate.json")
    table = json.loads(run([build.report, trace, "--format", "json", "--estimate",
                            estimate]).stdout)["training"]["modules_at_peak"]
    predicted = {row["location"]: (row["predicted"]["bytes"],
                                   {k: v for k, v in row["predicted"]["categories"].items() if v})
                 for row in table["rows"]}
    assert predicted == {"<DDP buckets>": (64 * KIB, {"temporary": 64 * KIB}),
                         "<optimizer.step>": (0, {}),
                         "model": (12 * KIB + 512, {"temporary": 12 * KIB + 512}),
                         "<no module>": (3 * KIB, {"temporary": 2 * KIB, "parameter": KIB})}
    assert table["predicted_only"] == []
    assert table["predicted_total"]["bytes"] == 159 * KIB // 2
    text = run([build.report, trace, "--estimate", estimate]).stdout
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("By module at the peak"))
    assert lines[header + 1].startswith("  beneath each row, the estimate's prediction"), text
    assert lines[header + 2].split() == ["total", "parameter", "temporary", "module"], text
    assert lines[header + 3].endswith("  <DDP buckets>"), text
    assert lines[header + 4].split() == ["=", "=", "=", "predicted"], text
    assert lines[header + 6].split() == ["-", "=", "-", "predicted"], text  # <optimizer.step>
    assert lines[header + 8].split() == ["12.50", "KiB", "=", "12.50", "KiB", "predicted"], text
    assert lines[header + 10].split() == ["3.000", "KiB", "1.000", "KiB", "=", "predicted"], text

    import chromium
    assert chromium.executable() is not None, "Chromium is not installed (run scripts/setup.sh)"
    page = tmp_path / "owners.html"
    run([build.report, "html", trace, "--estimate", estimate, "-o", page])
    browser = chromium.Browser(width=1400, height=1000)
    try:
        browser.open(page)
        browser.wait_until("document.body && document.body.getAttribute('data-ready') === '1'")
        beneath = ("[...document.querySelectorAll('#modules tbody tr')].map(r => [r.dataset.module, "
                   "[...r.querySelectorAll('.predicted')].map(p => p.textContent)])")
        assert browser.evaluate(beneath) == [
            ["<DDP buckets>", ["=", "=", "="]], ["<optimizer.step>", ["-", "=", "-"]],
            ["model", ["12.50 KiB", "=", "12.50 KiB"]], ["<no module>", ["3.000 KiB", "1.000 KiB", "="]]]
        footer = "[...document.querySelectorAll('#modules tfoot .predicted')].map(p => p.textContent)"
        assert browser.evaluate(footer) == ["79.50 KiB", "1.000 KiB", "78.50 KiB"]
        assert "the estimate's" in browser.evaluate("document.getElementById('modules-title').textContent")
        assert browser.problems() == []
    finally:
        browser.close()


def test_at_the_end_categories_hold_and_untold_untraced_is_unknown(build, tmp_path):
    trace = two_steps(tmp_path / "steps.bin")
    said = json.loads(run([build.report, trace, "--format", "json", "--group-by", "category",
                           "--at", "end"]).stdout)
    rows = {row["location"]: row["bytes"] for row in said["live"]["rows"]}
    assert rows == {"parameter": 4 * KIB, "optimizer_state": 4 * KIB}


def test_the_pytorch_snapshot_carries_memory_viz_categories(build, tmp_path):
    trace = two_steps(tmp_path / "steps.bin")
    out = tmp_path / "snapshot.pickle"
    run([build.report, "export", "pytorch", trace, "--at", "peak", "-o", out])
    snapshot = pickle.loads(out.read_bytes())
    allocs = [(e["addr"], e["category"]) for e in snapshot["device_traces"][0]
              if e["action"] == "alloc"]
    assert allocs[:6] == [(P, "parameter"), (X, "input"), (A, "activation"), (G, "gradient"),
                          (T, "temporary"), (S, "optimizer_state")]
    blocks = {b["address"]: b["category"] for s in snapshot["segments"] for b in s["blocks"]}
    assert blocks == {P: "parameter", S: "optimizer_state", X: "input", A: "activation",
                      G: "gradient", T: "temporary"}
    # memory_viz throws on a snapshot whose categories lack "unknown" (annotate_snapshot's
    # `snapshot.categores.push('unknown')`): the first segment names it.
    categories = {e["category"] for e in snapshot["device_traces"][0] if "category" in e}
    assert "unknown" in categories
    first_segment = next(e for e in snapshot["device_traces"][0] if e["action"] == "segment_alloc")
    assert first_segment["category"] == "unknown"


def test_a_trace_cut_inside_a_step_shows_it_unfinished(build, tmp_path):
    w = TraceWriter()
    w.context(1, 0).marker(1, TRACING_STARTED)
    w.alloc(2, P, KIB).training_phase(3, FORWARD).step_end(4, 1)
    w.alloc(5, A, 2 * KIB)
    said = json.loads(run([build.report, w.write(tmp_path / "cut.bin"), "--format", "json"]).stdout)
    steps = said["training"]["steps"]
    assert [(s["step"], s["finished"], s["peak_bytes"]) for s in steps] == [
        (1, True, KIB), (2, False, 3 * KIB)]
    assert "first_step" not in said["training"]


@pytest.mark.parametrize("record, message", [
    (bytes([CATEGORY]) + varint(P) + bytes([7]), "an unknown category 7"),
    (bytes([TRAINING_PHASE]) + varint(1) + bytes([4]), "an unknown training phase 4"),
    (bytes([STEP_END]) + varint(1) + varint(0), "a step end numbered 0"),
    (bytes([CATEGORY]) + b"\xff\xff", "a record cut off by the end of its chunk"),
])
def test_damaged_training_records_are_refused_in_one_line(build, tmp_path, record, message):
    w = TraceWriter()
    w.context(1, 0).alloc(1, P, KIB)
    w.chunk += record
    trace = w.write(tmp_path / "bad.bin")
    for command in ([], ["parse"], ["export", "pytorch"]):
        fails([*command, trace], message, timeout=10)


def before_tracing(path):
    """Note [What was live before tracing]: allocated before tracing began, a parameter of
    model.head (told its category and its module), a buffer of model.blocks.0.attention (its
    module only: buffers have no category), a parameter no module was told for (an optimizer's),
    an input and something nothing was told of; then, traced, model.head's output at model.py:3
    and a tensor of no module at model.py:4."""
    w = TraceWriter()
    w.device(0, w.string("GPU 0"), 1 << 30).context(1, 0)
    head, attention = w.string("model.head"), w.string("model.blocks.0.attention")
    forward = w.string("forward")
    model = w.string("/home/user/model.py")
    output = w.python_stack(0, w.frame(model, forward, 3))
    other = w.python_stack(0, w.frame(model, forward, 4))
    for time, (address, size) in enumerate([(P, 4 * KIB), (A, 2 * KIB), (G, 8 * KIB), (X, KIB),
                                            (S, 16 * KIB)], start=1):
        w.alloc(time, address, size)
    w.marker(10, TRACING_STARTED)
    w.category(P, PARAMETER).owner_module(P, head)
    w.owner_module(A, attention)
    w.category(G, PARAMETER)
    w.category(X, INPUT)
    w.module_scope(head)
    w.alloc(11, T, 32 * KIB, python=output)
    w.module_scope(0)
    w.alloc(12, T + (1 << 19), 64 * KIB, python=other)
    w.marker(13, TRACE_CLOSED)
    return w.write(path, version=6)


WEIGHTS, INPUTS = "weights, allocated before tracing", "inputs, allocated before tracing"


def test_what_was_live_before_tracing_has_one_name_in_every_table(build, tmp_path):
    trace = before_tracing(tmp_path / "before.bin")

    def rows(*options):
        said = json.loads(run([build.report, trace, "--format", "json", *options]).stdout)
        return said, {row["location"]: (row["kind"], row["bytes"]) for row in said["live"]["rows"]}

    said, by_line = rows()
    assert by_line == {"/home/user/model.py:4 (forward)": ("python", 64 * KIB),
                       "/home/user/model.py:3 (forward)": ("python", 32 * KIB),
                       "untraced": ("untraced", 16 * KIB),
                       WEIGHTS: ("untraced", (4 + 2 + 8) * KIB), INPUTS: ("untraced", KIB)}
    # By module, the weights a module owns are its own, traced or not.
    _, by_module = rows("--group-by", "module")
    assert by_module == {"<no module>": ("module", 64 * KIB), "model.head": ("module", (32 + 4) * KIB),
                         "untraced": ("untraced", 16 * KIB), WEIGHTS: ("untraced", 8 * KIB),
                         "model.blocks.0.attention": ("module", 2 * KIB), INPUTS: ("untraced", KIB)}
    # The module table at the peak names its rows the same way (its blocks folded: Note [The
    # module table]).
    table = {row["location"]: row["bytes"] for row in said["training"]["modules_at_peak"]["rows"]}
    assert table == {name.replace(".0.", ".*."): size for name, (_, size) in by_module.items()}
    text = run([build.report, trace]).stdout
    assert f"{WEIGHTS}\n" in text and f"{INPUTS}\n" in text and "<no module>\n" in text, text
    # The records, as parse prints them.
    parsed = run([build.report, "parse", trace]).stdout
    assert f"owner-module address={P:#x} module={1 + 1}\n" in parsed, parsed


def test_a_modules_gradient_and_optimizer_state_before_tracing_are_named_by_what_they_hold(
        build, tmp_path):
    """Note [Everything a parameter has is its module's] in python/mem_tracer/training.py: a
    parameter's gradient and optimizer state, allocated before tracing, are told their category
    and their parameter's module. By module they are that module's; by line they are named by
    what they hold, not as its weights (which the module's parameter alone is)."""
    w = TraceWriter()
    w.device(0, w.string("GPU 0"), 1 << 30).context(1, 0)
    head = w.string("model.head")
    for time, (address, size) in enumerate([(P, 4 * KIB), (G, 8 * KIB), (S, 16 * KIB)], start=1):
        w.alloc(time, address, size)
    w.marker(10, TRACING_STARTED)
    w.category(P, PARAMETER).owner_module(P, head)
    w.category(G, GRADIENT).owner_module(G, head)
    w.category(S, OPTIMIZER_STATE).owner_module(S, head)
    w.marker(11, TRACE_CLOSED)
    trace = w.write(tmp_path / "state.bin", version=6)

    def rows(*options):
        said = json.loads(run([build.report, trace, "--format", "json", *options]).stdout)
        return {row["location"]: row["bytes"] for row in said["live"]["rows"]}

    assert rows() == {WEIGHTS: 4 * KIB, "gradients, allocated before tracing": 8 * KIB,
                      "optimizer state, allocated before tracing": 16 * KIB}
    assert rows("--group-by", "module") == {"model.head": 28 * KIB}


def test_the_weights_before_tracing_stand_beside_the_estimators(build, tmp_path):
    trace = before_tracing(tmp_path / "before.bin")
    estimate = tmp_path / "estimate.json"
    estimate.write_text(json.dumps({
        "format": "memtrace-estimate", "version": 1, "model": "hand", "semantics": "eager",
        "summary": {"peak_requested_bytes": 127 * KIB, "peak_allocated_bytes": 127 * KIB,
                    "weight_bytes": 14 * KIB, "input_bytes": KIB},
        "peak": {"by_user_frame": [{"file": "/home/user/model.py", "line": 3, "function": "forward",
                                    "bytes": 32 * KIB}]}}))
    said = json.loads(run([build.report, trace, "--estimate", estimate, "--format", "json"]).stdout)
    predicted = {row["location"]: row["predicted_bytes"] for row in said["live"]["rows"]}
    # The estimator's weights and inputs are what it counts as there before the forward.
    assert predicted == {WEIGHTS: 14 * KIB, INPUTS: KIB, "untraced": None,
                         "/home/user/model.py:3 (forward)": 32 * KIB,
                         "/home/user/model.py:4 (forward)": 0}
    text = run([build.report, trace, "--estimate", estimate]).stdout
    assert re.search(rf"^14\.00 KiB +14\.00 KiB +.*  {WEIGHTS}$", text, re.MULTILINE), text


def workspace_step(path, first_step):
    """Note [Where the step's workspaces are] (tracer/report/prediction.cpp): a training step of
    model.layer, whose parameter (4 KiB) was allocated before tracing, with a 32 KiB workspace
    W that is either taken in the trace, at model.py:3 in model.layer (`first_step`: the trace
    holds the program's first step), or allocated before tracing, of no known category (a trace
    of a later step); then the layer's activation (2 KiB) at model.py:4."""
    w = TraceWriter()
    w.device(0, w.string("GPU 0"), 1 << 30).context(1, 0)
    layer, forward = w.string("model.layer"), w.string("forward")
    model = w.string("/home/user/model.py")
    taking = w.python_stack(0, w.frame(model, forward, 3))
    activation = w.python_stack(0, w.frame(model, forward, 4))
    w.alloc(1, P, 4 * KIB)
    if not first_step:
        w.alloc(2, S, 32 * KIB)
    w.marker(3, TRACING_STARTED)
    w.category(P, PARAMETER).owner_module(P, layer)
    w.training_phase(4, FORWARD)
    w.module_scope(layer)
    if first_step:
        w.alloc(5, S, 32 * KIB, python=taking)
    w.alloc(6, A, 2 * KIB, python=activation)
    w.category(A, ACTIVATION)
    w.marker(7, TRACE_CLOSED)
    return w.write(path, version=6)


def workspace_estimate(path):
    """workspace_step()'s step as an estimate states it: the workspace apart (Note [The step's
    workspaces] in estimator/passes/attribute_peak.h), on model.py:3 and in `layer`."""
    line = {"file": "/home/user/model.py", "function": "forward"}
    path.write_text(json.dumps({
        "format": "memtrace-estimate", "version": 1, "model": "hand", "semantics": "eager",
        "summary": {"peak_requested_bytes": 38 * KIB, "peak_allocated_bytes": 38 * KIB,
                    "weight_bytes": 4 * KIB, "input_bytes": 0, "cublas_workspace_bytes": 32 * KIB,
                    "cublaslt_workspace_bytes": 0, "optimizer_state_bytes": 0},
        "requested_peak": {
            "by_frame": [{**line, "line": 4, "bytes": 2 * KIB}],
            "by_user_frame": [{**line, "line": 4, "bytes": 2 * KIB}],
            "by_module": [{"module_path": "layer", "bytes": 6 * KIB}],
            "by_step_call": [],
            "by_module_category": [
                {"module_path": "layer", "category": "parameter", "bytes": 4 * KIB},
                {"module_path": "layer", "category": "activation", "bytes": 2 * KIB}],
            "step_workspaces": {
                "bytes": 32 * KIB,
                "by_frame": [{**line, "line": 3, "bytes": 32 * KIB}],
                "by_user_frame": [{**line, "line": 3, "bytes": 32 * KIB}],
                "by_step_call": [],
                "by_module": [{"module_path": "layer", "bytes": 32 * KIB}],
                "by_module_category": [
                    {"module_path": "layer", "category": "temporary", "bytes": 32 * KIB}]}}}))
    return path


@pytest.mark.parametrize("first_step", [True, False], ids=["first-step", "later-step"])
def test_the_steps_workspaces_are_where_the_trace_shows_them(build, tmp_path, first_step):
    """The same estimate beside two traces: the workspace on the line and in the module that
    took it where the trace took it, beside the untraced row where it was there before
    tracing; every row and every cell equal to its prediction, by line and by module."""
    trace = workspace_step(tmp_path / "step.bin", first_step)
    estimate = workspace_estimate(tmp_path / "estimate.json")
    said = json.loads(run([build.report, trace, "--estimate", estimate, "--format", "json",
                           "--top", "0"]).stdout)
    lines = {row["location"].split(" ")[0].rsplit("/", 1)[-1]: (row["bytes"], row["predicted_bytes"])
             for row in said["live"]["rows"]}
    taken = {"model.py:3": (32 * KIB, 32 * KIB)} if first_step else {"untraced": (32 * KIB, 32 * KIB)}
    assert lines == {**taken, "model.py:4": (2 * KIB, 2 * KIB), "weights,": (4 * KIB, 4 * KIB)}
    assert said["estimate"]["predicted_only"] == [], said["estimate"]
    table = said["training"]["modules_at_peak"]
    cells = {row["location"]: ({k: v for k, v in row["categories"].items() if v},
                               {k: v for k, v in row["predicted"]["categories"].items() if v})
             for row in table["rows"]}
    layer = {"parameter": 4 * KIB, "activation": 2 * KIB}
    if first_step:
        assert cells == {"model.layer": ({**layer, "temporary": 32 * KIB},) * 2}, cells
    else:
        assert cells == {"model.layer": (layer, layer),
                         "untraced": ({"unknown": 32 * KIB},) * 2}, cells
    assert table["predicted_only"] == [] and table["predicted_total"]["bytes"] == 38 * KIB, table
