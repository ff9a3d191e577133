"""The estimator against ground truth measured on the CPU.

Every test model is exported scripted and traced; the predicted activation peak of each
semantics must be within 2 % of the peak the live-storage tracker measures (memory_tracker.py)
at two batch sizes: eager against the nn.Module run by Python, torchscript against the exported
module run by the TorchScript interpreter. Parameter and buffer bytes must be exact, and the
tensors live at the predicted peak must be charged to the same lines of models.py as the
tensors live at the measured peak.
"""

from collections import defaultdict

import pytest
import torch

import models
from conftest import estimate_json
from memory_tracker import measure

BATCHES = (1, 3)
TOLERANCE = 0.02  # the accuracy budget for the CPU comparison
EXPORTS = ("scripted", "traced")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> export kind -> path of the saved TorchScript module."""
    directory = tmp_path_factory.mktemp("models")
    paths = defaultdict(dict)
    for name in models.MODELS:
        model = models.make_model(name)
        scripted = directory / f"{name}_scripted.pt"
        torch.jit.script(model).save(str(scripted))
        paths[name]["scripted"] = scripted
        traced = directory / f"{name}_traced.pt"
        with torch.no_grad():
            torch.jit.trace(model, models.make_input(name, 1), check_trace=False).save(str(traced))
        paths[name]["traced"] = traced
    return paths


def measured_peak(module, name, batch, warm_up):
    example = models.make_input(name, batch)
    # The profiling executor settles its plan over the first runs; measure the steady state.
    for _ in range(warm_up):
        measure(module, example)
    return measure(module, example, models.__file__)


def predicted_sweep(path, name, semantics):
    """batch -> summary, from one --batch sweep."""
    document = estimate_json(
        path,
        "--input",
        models.input_argument(models.make_input(name, 1)),
        "--batch",
        ",".join(map(str, BATCHES)),
        "--semantics",
        semantics,
    )
    assert document["format"] == "memtrace-estimate-sweep"
    return {point["batch"]: point for point in document["sweep"]}


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("name", list(models.MODELS))
def test_activation_peak_within_two_percent(name, export, exported):
    model = models.make_model(name)
    loaded = torch.jit.load(str(exported[name][export]))
    truth = {
        "eager": {batch: measured_peak(model, name, batch, 0).peak for batch in BATCHES},
        "torchscript": {batch: measured_peak(loaded, name, batch, 3).peak for batch in BATCHES},
    }
    for semantics, measured in truth.items():
        predicted = predicted_sweep(exported[name][export], name, semantics)
        for batch in BATCHES:
            point = predicted[batch]
            assert not point["lower_bound"]
            guess = point["summary"]["activation_peak_requested_bytes"]
            error = abs(guess - measured[batch]) / measured[batch]
            assert error <= TOLERANCE, (
                f"{name} {export} {semantics} batch {batch}: predicted {guess}, "
                f"measured {measured[batch]} ({100 * error:.2f} % off)"
            )


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("name", list(models.MODELS))
def test_parameter_and_buffer_bytes_are_exact(name, export, exported):
    model = models.make_model(name)
    document = estimate_json(
        exported[name][export], "--input", models.input_argument(models.make_input(name, 1))
    )
    summary = document["summary"]
    # parameters() counts a tied parameter once, as GPU memory does.
    assert summary["parameter_bytes"] == sum(p.numel() * p.element_size() for p in model.parameters())
    assert summary["buffer_bytes"] == sum(b.numel() * b.element_size() for b in model.buffers())
    assert summary["constant_bytes"] == 0
    assert summary["weight_bytes"] == summary["parameter_bytes"] + summary["buffer_bytes"]


def bytes_by_line(live):
    lines = defaultdict(int)
    for size, line in live:
        lines[line] += size
    return dict(lines)


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("name", list(models.MODELS))
def test_peak_is_charged_to_the_lines_that_make_the_tensors(name, export, exported):
    batch = BATCHES[-1]
    tracker = measured_peak(models.make_model(name), name, batch, 0)
    measured = bytes_by_line(tracker.peak_live)
    example = models.make_input(name, batch)
    document = estimate_json(exported[name][export], "--input", models.input_argument(example))
    source = models.__file__
    predicted = defaultdict(int)
    for group in document["peak"]["by_user_frame"]:
        if group["file"] == source:
            predicted[group["line"]] += group["bytes"]
    assert predicted, "no live bytes were charged to models.py"
    total = tracker.peak
    for line in set(measured) | set(predicted):
        difference = abs(predicted.get(line, 0) - measured.get(line, 0))
        assert difference <= TOLERANCE * total, (
            f"{name} {export}: models.py:{line} predicted {predicted.get(line, 0)} bytes live at "
            f"the peak, measured {measured.get(line, 0)}"
        )
    # The line holding the most is the same on both sides.
    top_measured = max(measured.values())
    top_lines = {line for line, size in measured.items() if size == top_measured}
    assert max(predicted, key=predicted.get) in top_lines
