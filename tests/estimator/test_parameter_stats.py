"""Parameter statistics (issue 53, item 4): mem_tracer.parameter_stats and `memtrace params`.

Their total is the estimate's weights (Note [Parameter bytes counted as the estimate counts
them] in python/mem_tracer/parameters.py): checked against mem_tracer.estimate on zoo
models, one with tied weights (GPT-2's head is its embedding), and against memtrace-estimate
on a TorchScript file; each file format against the module it was saved from; the values'
statistics against torch's own reductions, across chunk boundaries."""
import json
import re
import subprocess
import sys
from collections import OrderedDict

import pytest
import torch
from torch import nn

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "python"))

import mem_tracer  # noqa: E402
from mem_tracer import parameters as stats_module
from mem_tracer.parameters import parameter_stats

from conftest import REPOSITORY, estimate_json
import zoo


class Tied(nn.Module):
    """A tiny language model whose head is its embedding, with a buffer of each kind."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(100, 16)
        self.norm = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 100, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.full((16,), 2.0))
        self.register_buffer("offset", torch.zeros(16), persistent=False)

    def forward(self, ids):
        x = self.embed(ids) * self.scale + self.offset
        return self.head(self.norm(x.transpose(1, 2)).transpose(1, 2))


def tied_inputs():
    return (torch.randint(0, 100, (2, 8)),)


@pytest.mark.parametrize("name", ["gpt2-sdpa", "bert-sdpa", "unet"])
def test_total_is_the_estimates_weights(name):
    entry = zoo.ZOO[name]
    model = entry.build()
    args, kwargs = entry.example(2)
    stats = parameter_stats(model)
    predicted = mem_tracer.estimate(model, kwargs or args, method="record")
    assert stats.total_bytes == predicted.weight_bytes, (stats.total_bytes, predicted.weight_bytes)
    # Every tensor named once in its module, the totals by module summing to the whole.
    names = [entry.name for entry in stats.tensors]
    assert len(names) == len(set(names))
    assert sum(total.bytes for total in stats.modules) == stats.total_bytes
    assert sum(p.numel() for p in model.parameters()) == sum(
        e.elements for e in stats.tensors if e.kind == "parameter" and e.shares is None)
    if name == "gpt2-sdpa":
        # The head is the embedding: said, and counted once (50 KiB less than both).
        assert [(e.name, e.shares) for e in stats.shared] == [
            ("lm_head.weight", "transformer.wte.weight")]
        assert stats.total_bytes == sum(
            e.bytes for e in stats.tensors) - model.lm_head.weight.numel() * 4


def test_tied_module_and_its_files(tmp_path):
    model = Tied().eval()
    stats = parameter_stats(model)
    assert stats.format == "nn.Module"
    assert [(e.name, e.shares) for e in stats.shared] == [("head.weight", "embed.weight")]
    expected = (100 * 16 + 16 * 2) * 4 + (16 * 2 * 4 + 8) + 16 * 4 * 2  # params, norm, buffers
    assert stats.total_bytes == expected
    assert stats.bytes_of("buffer") == 16 * 2 * 4 + 8 + 16 * 4 * 2
    norm = next(total for total in stats.modules if total.module == "norm")
    assert (norm.tensors, norm.elements, norm.bytes) == (5, 16 * 4 + 1, 16 * 4 * 4 + 8)
    head = next(total for total in stats.modules if total.module == "head")
    assert (head.tensors, head.elements, head.bytes) == (1, 0, 0)
    # The estimate counts the same, from the recording and from TorchScript.
    assert mem_tracer.estimate(model, tied_inputs(), method="record").weight_bytes == expected
    assert mem_tracer.estimate(model, tied_inputs()).weight_bytes == expected

    scripted = tmp_path / "tied.pt"
    torch.jit.script(model).save(str(scripted))
    from_script = parameter_stats(scripted)
    assert from_script.format == "TorchScript"
    assert from_script.total_bytes == expected
    assert [(e.name, e.shares) for e in from_script.shared] == [("head.weight", "embed.weight")]
    said = estimate_json(scripted, "--input", "2x8:int64")
    assert said["summary"]["weight_bytes"] == expected

    frozen = tmp_path / "frozen.pt"
    torch.jit.freeze(torch.jit.script(model)).save(str(frozen))
    from_frozen = parameter_stats(frozen)
    assert {e.kind for e in from_frozen.tensors} == {"constant"}
    assert from_frozen.total_bytes == estimate_json(
        frozen, "--input", "2x8:int64")["summary"]["weight_bytes"]

    exported = tmp_path / "tied.pt2"
    torch.export.save(torch.export.export(model, tied_inputs()), str(exported))
    from_export = parameter_stats(exported)
    assert from_export.format == "torch.export"
    assert from_export.total_bytes == expected
    assert from_export.bytes_of("buffer") == stats.bytes_of("buffer")

    # A state dict keeps the tie (torch.save keeps shared storages) but not the buffer
    # registered non-persistent, and cannot say which tensors are parameters.
    state = tmp_path / "state.pt"
    torch.save({"epoch": 3, "state_dict": model.state_dict()}, str(state))
    from_state = parameter_stats(state)
    assert from_state.source.endswith("['state_dict']")
    assert {e.kind for e in from_state.tensors} == {"tensor"}
    assert from_state.total_bytes == expected - 16 * 4
    assert [(e.name, e.shares) for e in from_state.shared] == [("head.weight", "embed.weight")]

    # safetensors drops one name of a tied weight; the header alone gives what loading does.
    from safetensors.torch import load_file, save_model
    safetensors = tmp_path / "tied.safetensors"
    save_model(model, str(safetensors))
    from_header = parameter_stats(safetensors)
    assert from_header.total_bytes == expected - 16 * 4
    loaded = load_file(str(safetensors))
    assert {e.name: (e.shape, e.dtype, e.bytes) for e in from_header.tensors} == {
        name: (tuple(t.shape), str(t.dtype).removeprefix("torch."), t.numel() * t.element_size())
        for name, t in loaded.items()}
    with_values = {e.name: e.values for e in parameter_stats(safetensors, values=True).tensors}
    for name, tensor in loaded.items():
        assert with_values[name].mean == pytest.approx(float(tensor.double().mean()), abs=1e-12)
        assert with_values[name].max == float(tensor.max())


def test_values_against_torch(monkeypatch):
    model = Tied()
    with torch.no_grad():
        model.embed.weight[:10] = 0
        model.embed.weight[10, 0] = float("nan")
        model.embed.weight[10, 1] = float("-inf")
    # Chunks of 7 elements: every tensor here is read in several, one of them partial.
    monkeypatch.setattr(stats_module, "_CHUNK_ELEMENTS", 7)
    stats = parameter_stats(model, values=True)
    for entry in stats.tensors:
        tensor = model.get_parameter(entry.name) if entry.kind == "parameter" else \
            model.get_buffer(entry.name)
        values = tensor.detach().double().reshape(-1)
        finite = values[torch.isfinite(values)]
        said = entry.values
        assert said.non_finite == values.numel() - finite.numel()
        assert said.zero_share == pytest.approx(float((values == 0).double().mean()))
        assert said.mean == pytest.approx(float(finite.mean()), rel=1e-9, abs=1e-12)
        assert said.min == float(finite.min()) and said.max == float(finite.max())
        if finite.numel() > 1:
            assert said.std == pytest.approx(float(finite.std()), rel=1e-9, abs=1e-12)
        else:
            assert said.std is None
    embed = next(e for e in stats.tensors if e.name == "embed.weight")
    assert embed.values.non_finite == 2
    assert embed.values.zero_share == pytest.approx(10 * 16 / (100 * 16))
    written = {e["name"]: e for e in json.loads(stats.to_json())["tensors"]}
    assert written["embed.weight"]["values"]["non_finite"] == 2
    assert written["embed.weight"]["values"]["max"] == embed.values.max


def test_no_values_without_weights():
    with torch.device("meta"):
        model = Tied()
    stats = parameter_stats(model)  # shapes and bytes need no values; the tie is still seen
    assert [(e.name, e.shares) for e in stats.shared] == [("head.weight", "embed.weight")]
    with pytest.raises(mem_tracer.MemTracerError, match="^Tied: scale holds no values"):
        parameter_stats(model, values=True)


def memtrace(*arguments):
    return subprocess.run([sys.executable, "-m", "mem_tracer", "params", *map(str, arguments)],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPOSITORY / "python"), "PATH": "/usr/bin:/bin",
                               # every warning shown: torch's deprecation of TorchScript too
                               "PYTHONWARNINGS": "default"})


def test_command_line(tmp_path):
    model = Tied().eval()
    path = tmp_path / "tied.pt"
    torch.jit.script(model).save(str(path))
    said = memtrace(path, "--json")
    assert said.returncode == 0, said.stderr
    assert said.stderr == ""  # torch.jit.load's deprecation is memtrace's call, not the user's
    document = json.loads(said.stdout)
    assert document["total_bytes"] == parameter_stats(model).total_bytes
    assert document["shared"] == [{"name": "head.weight", "shares": "embed.weight"}]
    assert [m["module"] for m in document["modules"]] == ["", "embed", "norm", "head"]

    text = memtrace(path, "--values", "-o", tmp_path / "params.txt")
    assert text.returncode == 0, text.stderr
    written = (tmp_path / "params.txt").read_text()
    assert "head.weight is embed.weight's storage, counted once" in written
    assert re.search(r"^embed: 6.25 KiB, 1,600 elements in 1 tensor\n"
                     r"  weight +parameter +100x16 +float32 +6.25 KiB  mean ", written, re.M), \
        written
    assert "zeros 0.00%" in written and "mean " in written

    for bad, why in ((tmp_path / "missing.pt", "no such file"),
                     (REPOSITORY / "README.md", "not a TorchScript file")):
        refused = memtrace(bad)
        assert refused.returncode != 0
        assert why in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, \
            refused.stderr
    not_state = tmp_path / "list.pt"
    torch.save([torch.zeros(2)], str(not_state))
    refused = memtrace(not_state)
    assert refused.returncode != 0 and "not a state dict" in refused.stderr, refused.stderr


def test_plain_dict_inputs_are_not_modules():
    with pytest.raises(mem_tracer.MemTracerError, match="neither an nn.Module"):
        parameter_stats(OrderedDict(weight=torch.zeros(2)))
