"""Per line as right as the total (issue 53): the estimator's zoo (tests/estimator/zoo.py), each
model's inference traced on the simulated card and predicted by the estimator for it
(cuda-sm90), compared row by row, by line and by module, not only at the peak.

Every model runs in scripts/zoo_lines.py: traced one after another in one process under
switch_allocator() (the cuBLAS workspaces given back between two, so that each takes them
fresh, as the estimate assumes), predicted with estimate(method="record"). A Hugging Face
model's allocations are all in transformers' own code, whose files are not the user's: they
meet at the line of zoo_lines.py that calls the model, and finely by module.

What makes a row right (Note [Workspaces on their lines] in estimator/passes/attribute_peak.h):
the workspaces are on the line and in the module of the op that took them, the weights and
inputs allocated before tracing beside the estimator's. The bar: every row within 0.1 % of the
measured peak (a few scalars, a cache's small tensors and who made a view differ by kilobytes;
the cuBLAS workspace alone is 32 MiB of the ~33 MiB peaks). Each workspace is checked to the
byte besides: cuBLAS's where the trace keeps it, and a cuDNN convolution's, on a card and an
estimate's profile that both state one, where the U-Net's peak holds it."""
import json
import sys
from pathlib import Path

import pytest

from memtrace_testing import Build, ROOT, parse_records, run

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "estimator"))
import zoo  # noqa: E402

TOLERANCE = 0.001
# What this comparison cannot take, and why.
LEFT_OUT = {
    # transformers' mixtures of experts call torch._grouped_mm, whose fake CUDA kernel refuses
    # float32 (the recording's device kernels; estimate()'s TorchScript front end takes them).
    "mixtral-sdpa": "recording refuses _grouped_mm in float32",
    "qwen2-moe-sdpa": "recording refuses _grouped_mm in float32",
}
# Rows the estimate charges to another module than the trace: the fused fast path of
# nn.TransformerEncoderLayer in eval runs no self_attn forward on the card, so the trace charges
# what its fused op allocates (cuBLAS's workspace among it) to the layer; the recording charges
# it to self_attn. Its lines agree.
MODULES_APART = {"transformer-encoder-eval"}
# cuBLAS's workspace on sm90 and newer (the simulated H200 and the estimate's cuda-sm90): a
# trace that keeps an allocation of this size took it, whether or not the estimate says so.
CUBLAS_WORKSPACE = 32 << 20
NAMES = [name for name in zoo.ZOO
         if (not name.endswith("-eager") or name.replace("-eager", "-sdpa") not in zoo.ZOO)
         and name not in LEFT_OUT]


@pytest.fixture(scope="module")
def measured_and_predicted(tmp_path_factory):
    return trace_and_predict(tmp_path_factory.mktemp("zoo-lines"), "", NAMES, timeout=900)


def trace_and_predict(directory, step, names, timeout):
    """scripts/zoo_lines.py's trace and predict (`step`: "" the forwards, "-step" a training
    step) of `names` into `directory`."""
    script = HERE / "scripts" / "zoo_lines.py"
    environment = {"PYTHONPATH": str(ROOT / "python")}
    run([sys.executable, script, "trace" + step, directory, *names], environment, timeout=timeout)
    run([sys.executable, script, "predict" + step, directory, *names], environment,
        timeout=timeout)
    return directory


def rows(directory, name, group_by):
    said = json.loads(run([Build.report, directory / f"{name}.bin", "--estimate",
                           directory / f"{name}.json", "--format", "json", "--top", "0",
                           "--group-by", group_by]).stdout)
    return said["summary"]["peak_bytes"], said["live"]["rows"]


@pytest.mark.parametrize("name", NAMES)
def test_each_row_is_predicted_where_it_was_measured(measured_and_predicted, name):
    directory = measured_and_predicted
    errors = sorted(path.name for path in directory.glob(f"{name}.error"))
    assert not errors, (directory / errors[0]).read_text()
    for group_by in ("line", "module"):
        if group_by == "module" and name in MODULES_APART:
            continue
        peak, table = rows(directory, name, group_by)
        compared = [row for row in table if row.get("predicted_bytes") is not None]
        # Every row is one the estimate speaks to: nothing untraced is left unnamed.
        assert len(compared) == len(table), [row["location"] for row in table
                                             if row.get("predicted_bytes") is None]
        apart = {row["location"]: (row["bytes"], row["predicted_bytes"]) for row in compared
                 if abs(row["bytes"] - row["predicted_bytes"]) > TOLERANCE * peak}
        assert not apart, (group_by, peak, apart)
        if group_by == "line":
            # The row that holds cuBLAS's 32 MiB workspace (every model here runs a matmul but
            # the U-Net) is predicted with it.
            largest = max(table, key=lambda row: row["bytes"])
            assert name == "unet" or largest["predicted_bytes"] >= 32 << 20, largest


def kept_allocations(trace, sizes):
    """(bytes, the (file, line) of each frame of its stack, innermost first, its module) of every
    allocation of one of `sizes` that the trace holds to its end: the library workspaces a
    forward takes and keeps (no tensor of these tiny models is that large)."""
    strings, frames, stacks, kept = {}, {}, {}, {}
    module = None
    for record in parse_records(trace):
        kind = record["record"]
        if kind == "string":
            strings[record["id"]] = " ".join(record["words"]).strip('"')
        elif kind == "frame":
            frames[record["id"]] = (Path(strings[record["file"]]).name, int(record["line"]))
        elif kind == "pystack":
            stacks[record["id"]] = (record["parent"], record["frame"])
        elif kind == "scope":  # the module running from here on (one thread runs the forward)
            module = strings.get(record["module"])
        elif kind == "alloc" and int(record["size"]) in sizes:
            lines, stack = [], record["pystack"]
            while stack in stacks:
                stack, frame = stacks[stack]
                lines.append(frames[frame])
            kept[record["address"]] = (int(record["size"]), lines, module)
        elif kind == "free":
            kept.pop(record["address"], None)
    return sorted(kept.values())


@pytest.mark.parametrize("name", NAMES)
def test_each_workspace_is_predicted_where_it_was_taken(measured_and_predicted, name):
    """Each library workspace the trace holds at its end, to the byte, on the line of the
    user's code (and in the module) where the estimate puts one of exactly its size, and none
    predicted that was not taken: the workspace's row is right for the workspace itself, not
    only within the rows' tolerance."""
    directory = measured_and_predicted
    document = json.loads((directory / f"{name}.json").read_text())
    predicted = document["requested_peak"]["workspaces"]
    sizes = {workspace["bytes"] for workspace in predicted} | {CUBLAS_WORKSPACE}
    measured = kept_allocations(directory / f"{name}.bin", sizes)
    assert len(measured) == len(predicted), (measured, predicted)
    expected_count = 0 if name == "unet" else 1  # every model here runs a matmul but the U-Net
    assert len(predicted) == expected_count, predicted
    for workspace in predicted:
        where = (Path(workspace["user_frame"]["file"]).name, workspace["user_frame"]["line"])
        taken = [(size, module) for size, lines, module in measured if where in lines]
        assert [size for size, _ in taken] == [workspace["bytes"]], (where, measured)
        if name not in MODULES_APART:
            # The trace names the model it was given "model"; the estimate names its modules
            # from the model down (both are model=Caller, whose module is .model).
            assert taken[0][1] == f"model.{workspace['module_path']}", (taken, workspace)


# A convolution workspace both sides know: every cuDNN convolution plan of the simulated card
# asks for it (the profile's cudnn_workspaces, as a measurement would fill it: Note [Engines and
# workspaces] in simulator/libraries/cudnn_engines.cpp), and the estimate's profile states it as
# the bound cuDNN keeps to (convolution_workspace.bound_bytes). Neither profile measures one on
# its own, so the U-Net above takes none; here it takes one at each convolution, for the call.
CUDNN_WORKSPACE = 64 << 20


@pytest.fixture(scope="module")
def with_a_cudnn_workspace(tmp_path_factory):
    directory = tmp_path_factory.mktemp("zoo-lines-cudnn")
    card = json.loads((ROOT / "simulator" / "profiles" / "h200.json").read_text())
    card["cudnn_workspaces"]["entries"] = [
        {"match": {"operation": operation}, "workspace_bytes": CUDNN_WORKSPACE,
         "measured": "test_zoo_lines: every convolution plan asks for 64 MiB"}
        for operation in ("convolution_forward", "convolution_backward_data")]
    (directory / "card.json").write_text(json.dumps(card))
    profile = json.loads((ROOT / "estimator" / "profiles" / "cuda-sm90.json").read_text())
    profile["convolution_workspace"]["bound_bytes"] = CUDNN_WORKSPACE
    (directory / "estimate.json").write_text(json.dumps(profile))
    script = HERE / "scripts" / "zoo_lines.py"
    environment = {"PYTHONPATH": str(ROOT / "python")}
    run([sys.executable, "-m", "mem_tracer.simulated_gpu", directory / "card.json", "--",
         sys.executable, script, "trace", directory, "unet"], environment, timeout=300,
        own_card=True)
    run([sys.executable, script, "predict", directory, "--device", directory / "estimate.json",
         "unet"], environment, timeout=300)
    return directory


def test_a_cudnn_workspace_is_on_the_line_that_took_it(with_a_cudnn_workspace):
    """The U-Net's peak is inside a convolution, its cuDNN workspace live for the call: the
    peak, and the line and the module of that convolution, are predicted to the byte, the
    workspace in them; every other row as above."""
    directory = with_a_cudnn_workspace
    errors = sorted(path.name for path in directory.glob("unet.error"))
    assert not errors, (directory / errors[0]).read_text()
    document = json.loads((directory / "unet.json").read_text())
    workspaces = document["requested_peak"]["workspaces"]
    assert [(w["library"], w["bytes"], w["op"]) for w in workspaces] == [
        ("convolution", CUDNN_WORKSPACE, "aten::convolution")], workspaces
    workspace = workspaces[0]
    where = {"line": f"{Path(workspace['user_frame']['file']).name}:"
                     f"{workspace['user_frame']['line']}",
             "module": f"model.{workspace['module_path']}"}
    for group_by in ("line", "module"):
        peak, table = rows(directory, "unet", group_by)
        assert peak == document["summary"]["peak_requested_bytes"], (peak, document["summary"])
        holding = [row for row in table if row["location"].split(" ")[0].endswith(where[group_by])]
        assert len(holding) == 1, (where, [row["location"] for row in table])
        row = holding[0]
        assert row["bytes"] == row["predicted_bytes"] >= CUDNN_WORKSPACE, row
        assert row is max(table, key=lambda each: each["bytes"])
        apart = {row["location"]: (row["bytes"], row["predicted_bytes"]) for row in table
                 if abs(row["bytes"] - (row.get("predicted_bytes") or 0)) > TOLERANCE * peak}
        assert not apart, (group_by, apart)


# A training step, row by row (Note [The step's own calls] in estimator/passes/attribute_peak.h):
# zoo models whose AdamW step the referee finds exact to the byte on the simulated card
# (docs/referee.jsonl, train-b2: error 0.000 %). The plain ViT, a Hugging Face model (its forward
# meets at Caller's line) and a model whose blocks backward recomputes (checkpointing: backward's
# allocations on the forward's lines).
STEP_NAMES = ["vit-sdpa-functional", "gpt2-eager", "checkpointed-mlp"]


@pytest.fixture(scope="module")
def steps_measured_and_predicted(tmp_path_factory):
    return trace_and_predict(tmp_path_factory.mktemp("zoo-steps"), "-step", STEP_NAMES,
                             timeout=600)


def line_of(text):
    """`file:line` of the line of scripts/zoo_lines.py that holds `text` (once)."""
    lines = (HERE / "scripts" / "zoo_lines.py").read_text().splitlines()
    found = [number for number, line in enumerate(lines, 1) if line.strip() == text]
    assert len(found) == 1, (text, found)
    return f"zoo_lines.py:{found[0]}"


@pytest.mark.parametrize("name", STEP_NAMES)
def test_a_training_step_is_predicted_where_it_was_measured(steps_measured_and_predicted, name):
    """The third step of a training loop traced (the first two took the cuBLAS workspaces and
    made AdamW's state), beside the estimate of that steady-state step: each line's bytes at the
    peak predicted to the byte; what was there before tracing (the workspaces, untraced; the
    optimizer's state; the weights; the inputs) beside what the estimate holds before its step;
    the gradients on the line that called backward() and foreach AdamW's temporaries on the one
    that called optimizer.step(), where the trace puts them."""
    directory = steps_measured_and_predicted
    errors = sorted(path.name for path in directory.glob(f"{name}.error"))
    assert not errors, (directory / errors[0]).read_text()
    document = json.loads((directory / f"{name}.json").read_text())
    summary = document["summary"]
    peak, table = rows(directory, name, "line")
    assert peak == summary["peak_requested_bytes"], (peak, summary["peak_requested_bytes"])
    by_location = {row["location"].split(" ")[0].rsplit("/", 1)[-1]: row for row in table}
    # Every row is one the estimate speaks to, and says to the byte.
    assert all(row.get("predicted_bytes") is not None for row in table), list(by_location)
    apart = {where: (row["bytes"], row["predicted_bytes"]) for where, row in by_location.items()
             if row["bytes"] != row["predicted_bytes"]}
    assert not apart, (peak, apart)
    # Before tracing: the two cuBLAS workspaces (the forward's thread's and autograd's), and
    # AdamW's two moments a parameter.
    assert by_location["untraced"]["bytes"] == 2 * CUBLAS_WORKSPACE == (
        summary["cublas_workspace_bytes"] + summary["cublaslt_workspace_bytes"])
    optimizer_state = by_location["optimizer"]  # "optimizer state, allocated before tracing"
    assert optimizer_state["location"].startswith("optimizer state, allocated before tracing")
    assert optimizer_state["bytes"] == summary["optimizer_state_bytes"] == \
        2 * summary["parameter_bytes"]
    # The loop's own calls: backward's gradients, the optimizer's temporaries.
    calls = {call["phase"]: call["bytes"] for call in document["requested_peak"]["by_step_call"]}
    backward = by_location[line_of("loss.backward()")]
    assert backward["bytes"] == calls["backward"] >= summary["training_breakdown"]["gradient"] > 0
    if document["step"]["peak_phase"] == "optimizer":
        assert by_location[line_of("optimizer.step()")]["bytes"] == calls["optimizer"] > 0
    # By module x category too (Note [Where the step's workspaces are] in
    # tracer/report/prediction.cpp): the workspaces beside the untraced row, as by line, and in
    # no module's cell; every cell to the byte. (Before: they were in the cells of the modules
    # whose matmuls take them, 64 MiB over, and `untraced` had no prediction.)
    table = json.loads(run([Build.report, directory / f"{name}.bin", "--estimate",
                            directory / f"{name}.json", "--format", "json", "--top", "0"]).stdout)
    table = table["training"]["modules_at_peak"]
    cells = {row["location"]: (row["categories"], row["predicted"] and row["predicted"]["categories"])
             for row in table["rows"]}
    assert all(measured == predicted for measured, predicted in cells.values()), cells
    assert table["predicted_only"] == [], table["predicted_only"]
    assert cells["untraced"][1]["unknown"] == 2 * CUBLAS_WORKSPACE, cells["untraced"]
