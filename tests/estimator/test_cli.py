"""memtrace-estimate as a command: bad input, sweeps and budgets, control flow, frozen models,
device profiles and the output formats. Models are small and made here, in plain torch.nn."""

import inspect
import json

import pytest
import torch
import torch.nn as nn

import models
from conftest import BAD_INPUT, REPOSITORY, assert_bad_input, estimate_json, run_estimator
from memory_tracker import measure


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.fc(y.mean((2, 3)))


class Branch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            y = torch.cat([x, x, x, x], 1)
        else:
            y = x * 2
        return y + 1


class Loop(nn.Module):
    def forward(self, x):
        for _ in range(4):
            x = torch.cat([x, x], 1)
        return x


class While(nn.Module):
    def forward(self, x):
        while bool(x.sum() > 0):
            x = x - 1
        return x


class Nonzero(nn.Module):
    def forward(self, x):
        indices = torch.nonzero(x)
        return indices.float().sum() + x.relu()


class Checked(nn.Module):
    def forward(self, x):
        if x.dim() != 4:
            raise ValueError("expected a 4-d input")
        return x + 1


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cli")
    paths = {}
    for name, module in [
        ("small", Small()),
        ("branch", Branch()),
        ("loop", Loop()),
        ("while", While()),
        ("nonzero", Nonzero()),
        ("checked", Checked()),
    ]:
        paths[name] = directory / f"{name}.pt"
        torch.jit.script(module.eval()).save(str(paths[name]))
    paths["state"] = directory / "state.pt"
    torch.save(Small().state_dict(), str(paths["state"]))
    paths["text"] = directory / "notes.pt"
    paths["text"].write_text("not a model\n")
    resnet = torch.jit.freeze(torch.jit.script(models.make_model("resnet")))
    paths["frozen"] = directory / "frozen.pt"
    resnet.save(str(paths["frozen"]))
    paths["directory"] = directory
    return paths


def test_missing_file(saved):
    assert_bad_input(run_estimator(saved["directory"] / "absent.pt", "--input", "1x3"), "no such file")


def test_file_that_is_not_an_archive(saved):
    assert_bad_input(
        run_estimator(saved["text"], "--input", "1x3"), "not a TorchScript archive"
    )


def test_torch_save_file_is_not_torchscript(saved):
    assert_bad_input(run_estimator(saved["state"], "--input", "1x3"), "torch.save")


def test_wrong_number_of_inputs(saved):
    assert_bad_input(
        run_estimator(saved["small"], "--input", "1x3x8x8", "--input", "1x3x8x8"),
        "takes 1 input(s), 2 --input given",
    )
    assert_bad_input(run_estimator(saved["small"]), "no --input")


def test_wrong_rank_names_the_op_and_line(saved):
    result = run_estimator(saved["small"], "--input", "3x8x8x8x8")
    assert_bad_input(result, "aten::conv2d", "test_cli.py:", "[3, 8, 8, 8, 8]")


def test_model_assertion_is_reported(saved):
    assert_bad_input(
        run_estimator(saved["checked"], "--input", "2x3"), "raises", "expected a 4-d input"
    )
    assert run_estimator(saved["checked"], "--input", "2x3x4x4").returncode == 0


def test_unknown_dtype(saved):
    assert_bad_input(run_estimator(saved["small"], "--input", "1x3x8x8:float8"), "unknown dtype")


def test_bad_options(saved):
    assert_bad_input(run_estimator(saved["small"], "--input", "1x3x8x8", "--semantics", "lazy"))
    assert_bad_input(run_estimator(saved["small"], "--input", "1x3x8x8", "--budget", "lots"))
    assert_bad_input(run_estimator(saved["small"], "--input", "1x3x8x8", "--frobnicate"))
    assert_bad_input(
        run_estimator(saved["small"], "--input", "1x3x8x8", "--device", "tpu"),
        "known: cpu, cuda, cuda-no-cublas-workspace"
    )


def test_unsupported_op_from_an_unloaded_library(tmp_path):
    @torch.library.custom_op("memtrace_estimator_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    class Custom(nn.Module):
        def forward(self, x):
            return torch.ops.memtrace_estimator_test.twice(x) + 1

    path = tmp_path / "custom.pt"
    torch.jit.script(Custom()).save(str(path))
    assert_bad_input(
        run_estimator(path, "--input", "2x3"), "unsupported op memtrace_estimator_test::twice"
    )


def test_failure_leaves_no_output_file(saved, tmp_path):
    output = tmp_path / "estimate.json"
    result = run_estimator(saved["small"], "--input", "9x9", "--output", output)
    assert result.returncode == BAD_INPUT
    assert not output.exists()
    assert list(tmp_path.iterdir()) == []
    result = run_estimator(saved["small"], "--input", "1x3x8x8", "--format", "json", "--output", output)
    assert result.returncode == 0 and result.stdout == ""
    assert json.loads(output.read_text())["format"] == "memtrace-estimate"


def test_json_document(saved):
    document = estimate_json(saved["small"], "--input", "2x3x8x8")
    assert document["version"] == 1
    assert document["semantics"] == "eager"
    assert document["inputs"] == [{"shape": [2, 3, 8, 8], "dtype": "float32", "bytes": 2 * 3 * 64 * 4}]
    summary = document["summary"]
    # A forward of a TorchScript model: no training step figures.
    assert summary.pop("training_peak_bytes") is None
    assert summary.pop("training_breakdown") is None
    assert document["step"] is None
    for key, value in summary.items():
        if key != "convolution_workspace_bound_bytes":
            assert isinstance(value, int), key
    small = Small()
    assert summary["parameter_bytes"] == sum(p.numel() * 4 for p in small.parameters())
    assert summary["weight_bytes"] == summary["parameter_bytes"]
    assert summary["input_bytes"] == 2 * 3 * 64 * 4
    # The caching allocator's view is never below the exact one.
    assert summary["peak_allocated_bytes"] >= summary["peak_requested_bytes"]
    assert summary["peak_reserved_bytes"] >= summary["peak_allocated_bytes"]
    assert summary["baseline_requested_bytes"] == summary["weight_bytes"] + summary["input_bytes"]
    # One cuBLAS call (the linear layer): the default profile's 8.125 MiB workspace.
    assert summary["cublas_workspace_bytes"] == 8519680
    assert document["cublas_workspace_node"]["op"] == "aten::linear"
    assert summary["peak_requested_bytes"] >= summary["baseline_requested_bytes"] + 8519680
    assert summary["total_flops"] == 2 * (2 * 8 * 8 * 8 * 3 * 9) + 2 * 2 * 4 * 8
    peak = document["peak"]
    assert peak["live_activation_bytes"] == summary["activation_peak_requested_bytes"]
    assert sum(group["bytes"] for group in peak["by_frame"]) == peak["live_activation_bytes"]
    assert sum(group["bytes"] for group in peak["by_user_frame"]) == peak["live_activation_bytes"]
    assert sum(group["bytes"] for group in peak["by_module"]) == peak["live_activation_bytes"]
    assert document["unknown_ops"] == [] and document["lower_bound"] is False
    assert {entry["op"] for entry in document["flops"]} == {"aten::conv2d", "aten::linear"}


def test_device_profiles_change_the_workspace(saved, tmp_path):
    hopper = estimate_json(saved["small"], "--input", "2x3x8x8", "--device", "cuda-sm90")
    assert hopper["summary"]["cublas_workspace_bytes"] == 32 << 20
    off = estimate_json(saved["small"], "--input", "2x3x8x8", "--device", "cuda-no-cublas-workspace")
    assert off["summary"]["cublas_workspace_bytes"] == 0
    # A profile given as a file, stating a cuDNN workspace bound: each convolution takes it for
    # the call only (the conv's peak), not for good (the linear's, with cuBLAS's workspace).
    profile = json.loads((REPOSITORY / "estimator" / "profiles" / "cuda.json").read_text())
    profile["convolution_workspace"]["bound_bytes"] = 64 << 20
    path = tmp_path / "bounded.json"
    path.write_text(json.dumps(profile))
    bounded = estimate_json(saved["small"], "--input", "2x3x8x8", "--device", path)["summary"]
    plain = estimate_json(saved["small"], "--input", "2x3x8x8")["summary"]
    assert bounded["convolution_workspace_bound_bytes"] == 64 << 20
    assert plain["convolution_workspace_bound_bytes"] is None
    assert bounded["peak_requested_bytes"] > plain["peak_requested_bytes"]
    assert bounded["peak_requested_bytes"] - (64 << 20) < plain["peak_requested_bytes"]
    listing = run_estimator("--list-devices")
    assert listing.returncode == 0
    assert {line.split(":")[0] for line in listing.stdout.splitlines()} == {
        "cpu",
        "cuda",
        "cuda-sm90",
        "cuda-no-cublas-workspace",
    }


def test_the_lines_where_requested_bytes_peak_hold_the_workspaces(saved, tmp_path):
    # Note [Workspaces on their lines]: Small's activations peak at its convolution, but
    # requested_bytes peaks at its linear layer, which takes cuBLAS's workspace (8.125 MiB, kept).
    # There the lines, with the weights and the inputs, sum to the predicted peak, the workspace
    # on the line of the op that took it; by module, with each weight under its module.
    source, first = inspect.getsourcelines(Small.forward)
    conv_line = first + next(i for i, text in enumerate(source) if "self.conv(x)" in text)
    fc_line = first + next(i for i, text in enumerate(source) if "self.fc(" in text)
    document = estimate_json(saved["small"], "--input", "2x3x8x8")
    summary, requested = document["summary"], document["requested_peak"]
    assert requested["requested_bytes"] == summary["peak_requested_bytes"]
    assert requested["op"] == "aten::linear" and requested["user_frame"]["line"] == fc_line
    assert [(w["library"], w["bytes"], w["op"], w["user_frame"]["line"])
            for w in requested["workspaces"]] == [("cuBLAS", 8519680, "aten::linear", fc_line)]
    before_the_forward = summary["weight_bytes"] + summary["input_bytes"]
    for key in ("by_frame", "by_user_frame"):
        assert sum(g["bytes"] for g in requested[key]) + before_the_forward == summary["peak_requested_bytes"]
    # Live there: y (relu's output, held by its name) on the convolution's line; the mean fc is
    # fed, fc's output and the workspace on fc's.
    y, pooled, fc_output = 2 * 8 * 8 * 8 * 4, 2 * 8 * 4, 2 * 4 * 4
    assert {g["line"]: g["bytes"] for g in requested["by_user_frame"]} == {
        conv_line: y, fc_line: 8519680 + pooled + fc_output}
    small = Small()
    modules = {g["module_path"]: g["bytes"] for g in requested["by_module"]}
    assert sum(modules.values()) == summary["peak_requested_bytes"] - summary["input_bytes"]
    assert modules == {"fc": 8519680 + fc_output + sum(p.numel() * 4 for p in small.fc.parameters()),
                       "conv": sum(p.numel() * 4 for p in small.conv.parameters()), "": y + pooled}
    # With a cuDNN workspace bound stated, requested_bytes peaks inside the convolution, which
    # holds its workspace for the call: that is the convolution's line, and cuBLAS's is not
    # taken yet.
    profile = json.loads((REPOSITORY / "estimator" / "profiles" / "cuda.json").read_text())
    profile["convolution_workspace"]["bound_bytes"] = 64 << 20
    path = tmp_path / "bounded.json"
    path.write_text(json.dumps(profile))
    bounded = estimate_json(saved["small"], "--input", "2x3x8x8", "--device", path)["requested_peak"]
    assert [(w["library"], w["bytes"], w["op"]) for w in bounded["workspaces"]] == [
        ("convolution", 64 << 20, "aten::conv2d")]
    assert {g["line"]: g["bytes"] for g in bounded["by_user_frame"]}[conv_line] >= 64 << 20


def test_text_output(saved):
    result = run_estimator(saved["small"], "--input", "2x3x8x8")
    assert result.returncode == 0, result.stderr
    for fragment in ["weights", "activations", "peak allocated", "max_memory_allocated()",
                     "by line in your code", "test_cli.py:"]:
        assert fragment in result.stdout


def test_batch_sweep_and_budget(saved):
    sweep = estimate_json(saved["small"], "--input", "1x3x64x64", "--batch", "1,2,4")
    points = sweep["sweep"]
    assert [point["batch"] for point in points] == [1, 2, 4]
    assert [point["input_shapes"] for point in points] == [[[b, 3, 64, 64]] for b in (1, 2, 4)]
    activations = [point["summary"]["activation_peak_requested_bytes"] for point in points]
    assert activations[0] < activations[1] < activations[2]
    # Budget: what batch 40 reserves without a limit. Batches 7 and 8 reserve more (a second
    # small segment) and 9 to 40 do not, so the search must look past the dip; on a device of
    # that size, the allocator's release-and-retry lets a little more through.
    need = estimate_json(saved["small"], "--input", "1x3x64x64", "--batch", "8,40")["sweep"]
    budget = need[1]["summary"]["peak_reserved_bytes"]
    assert need[0]["summary"]["peak_reserved_bytes"] > budget
    answer = estimate_json(saved["small"], "--input", "1x3x64x64", "--budget", str(budget))
    largest = answer["budget"]["largest_batch"]
    assert largest >= 40
    at_largest = answer["budget"]["at_largest_batch"]["summary"]
    assert at_largest["peak_reserved_bytes"] <= budget
    tight = estimate_json(saved["small"], "--input", "1x3x64x64", "--budget", "1000")
    assert tight["budget"]["largest_batch"] is None
    text = run_estimator(saved["small"], "--input", "1x3x64x64", "--budget", str(budget))
    assert f"largest batch that fits: {largest}" in text.stdout


def test_loop_with_known_trip_count_is_unrolled(saved):
    example = torch.randn(2, 8)
    truth = measure(torch.jit.load(str(saved["loop"])), example).peak
    document = estimate_json(saved["loop"], "--input", "2x8", "--semantics", "torchscript")
    assert document["summary"]["activation_peak_requested_bytes"] == truth
    assert sum(1 for entry in document["peak"]["tensors"]) == 2  # the last cat's input, output
    assert document["lower_bound"] is False


def test_data_dependent_branch_takes_the_larger_side(saved):
    document = estimate_json(saved["branch"], "--input", "2x8")
    kinds = [assumption["kind"] for assumption in document["assumptions"]]
    assert "data_dependent_branch" in kinds
    # The cat branch: a 2x32 tensor, then y + 1 of the same size.
    assert document["summary"]["activation_peak_requested_bytes"] >= 2 * (2 * 32 * 4)
    assert document["lower_bound"] is False


def test_data_dependent_loop_makes_a_lower_bound(saved):
    document = estimate_json(saved["while"], "--input", "2x8")
    assert document["lower_bound"] is True
    assert any(a["kind"] == "data_dependent_loop" for a in document["assumptions"])


def test_unsized_op_is_listed_and_makes_a_lower_bound(saved):
    document = estimate_json(saved["nonzero"], "--input", "4x8")
    assert document["lower_bound"] is True
    assert [entry["op"] for entry in document["unknown_ops"]] == ["aten::nonzero"]
    assert document["unknown_ops"][0]["count"] == 1
    # x.relu() does not depend on the unknown op and is still counted.
    assert document["summary"]["activation_peak_requested_bytes"] >= 4 * 8 * 4
    text = run_estimator(saved["nonzero"], "--input", "4x8")
    assert "LOWER BOUND" in text.stdout and "aten::nonzero" in text.stdout


def test_frozen_weights_are_constants_not_activations(saved):
    loaded = torch.jit.load(str(saved["frozen"]))
    example = models.make_input("resnet", 2)
    for _ in range(3):
        measure(loaded, example)
    truth = measure(loaded, example).peak
    constants = {}
    for node in loaded.graph.findAllNodes("prim::Constant"):
        if node.output().type().kind() == "TensorType":
            storage = node.output().toIValue().untyped_storage()
            constants[storage._cdata] = storage.nbytes()
    document = estimate_json(saved["frozen"], "--input", "2x3x64x64", "--semantics", "torchscript")
    summary = document["summary"]
    assert summary["parameter_bytes"] == 0
    assert summary["constant_bytes"] == sum(constants.values())
    assert summary["weight_bytes"] == summary["constant_bytes"] + summary["buffer_bytes"]
    assert summary["activation_peak_requested_bytes"] == truth
    assert summary["activation_peak_requested_bytes"] < summary["constant_bytes"]
    eager = estimate_json(saved["frozen"], "--input", "2x3x64x64")
    assert any(a["kind"] == "semantics" for a in eager["assumptions"])


# ---- the command line (CLI11): --version, help, -f, progress --------------------------------

def test_version_and_help():
    version = (REPOSITORY / "VERSION").read_text().strip()
    result = run_estimator("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"memtrace-estimate {version}\n", "")
    text = run_estimator("--help").stdout
    assert "usage: memtrace-estimate MODEL.pt --input SHAPE[:DTYPE]" in text
    assert "examples:" in text and "--budget 24GiB" in text
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert_bad_input(run_estimator(saved_path := "m.pt", "--input"), "--input needs a value")
    assert_bad_input(run_estimator(saved_path, "n.pt", "--input", "1x3"), "more than one model given")


def test_an_output_is_never_overwritten_without_force(saved, tmp_path):
    output = tmp_path / "estimate.json"
    output.write_text("mine\n")
    for arguments in ([saved["small"], "--input", "1x3x8x8", "--format", "json"], ["--list-devices"]):
        for flag in ("--output", "-o"):
            result = run_estimator(*arguments, flag, output)
            assert_bad_input(result, f"{output} already exists", "-f/--force")
            assert output.read_text() == "mine\n"
            assert [p.name for p in tmp_path.iterdir()] == ["estimate.json"]
    result = run_estimator(saved["small"], "--input", "1x3x8x8", "--format", "json", "-o", output, "-f")
    assert result.returncode == 0, result.stderr
    assert json.loads(output.read_text())["format"] == "memtrace-estimate"
    result = run_estimator("--list-devices", "--force", "--output", output)
    assert result.returncode == 0 and output.read_text().startswith("cpu: ")
    # Written to, not replaced: a device is not a file to refuse.
    assert run_estimator("--list-devices", "-o", "/dev/null").returncode == 0


def test_loading_shows_progress_on_a_terminal(saved):
    import re

    from conftest import estimator_binary
    from memtrace_testing import progress_on_a_terminal

    text = progress_on_a_terminal([estimator_binary(), saved["small"], "--input", "1x3x8x8"])
    shown = re.findall(r"\r\x1b\[Kmemtrace-estimate: \S*small\.pt: ([a-z ]+?) +\d+%", text)
    assert shown and set(shown) == {"loading the model"}, text  # shown again every 200 ms
    assert text.endswith("\r\x1b[K")
    # Not a terminal: nothing on stderr.
    assert run_estimator(saved["small"], "--input", "1x3x8x8").stderr == ""
