"""cuDNN's flat RNN weights (Note [cuDNN's flat RNN weights] in
python/mem_tracer/estimator/device_kernels.py): on a CUDA profile the estimate holds an nn.LSTM's
weights as the one buffer Module.cuda() leaves them in, and predicts the simulated card's
max_memory_allocated to the byte.

Assumed of the real card (what the simulated H100 runs is PyTorch's own code, torch 2.14.1+cu130,
around a simulated cuDNN): RNNBase._apply calls flatten_parameters, which allocates cuDNN's weight
space through the caching allocator and frees the weights' own blocks; cuDNN's weight space is the
weights' bytes packed without padding (the simulated cudnnGetRNNWeightSpaceSize; real cuDNN 9 packs
an LSTM's matrices and biases the same way for float32, not checked on a GPU here). The forward's
own buffers (cuDNN's workspace inside _cudnn_rnn) are not modelled: the test's peak is after them,
at the projection that takes the cuBLAS workspace, as in parakeet's prediction network.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPOSITORY
from torch import nn

sys.path.insert(0, str(REPOSITORY / "python"))
import mem_tracer  # noqa: E402
from mem_tracer import simulated_gpu  # noqa: E402
from mem_tracer.estimator import step_graph  # noqa: E402

BUILD = os.environ.get("MEMTRACE_BUILD_DIR")
if BUILD:  # the build ctest names, not whatever the checkout's build/ holds
    os.environ.setdefault("MEMTRACE_BIN_DIR", str(Path(BUILD) / "bin"))
    os.environ.setdefault("MEMTRACE_SIMULATOR_DIR", str(Path(BUILD) / "simulator"))

# An LSTM of 26,255,360 B of float32 weights: above kMinLargeAlloc, its flat buffer takes a
# segment of its own, 27,262,976 B, and the 1,007,616 B left over (under kSmallSize) stay in
# the block: max_memory_allocated counts them. parakeet_tdt's prediction network (H = 640).
HIDDEN, LAYERS, STEPS = 640, 2, 16
WEIGHT_BYTES = LAYERS * (2 * 4 * HIDDEN * HIDDEN + 2 * 4 * HIDDEN) * 4
FLAT_SEGMENT = 27_262_976  # WEIGHT_BYTES rounded up to 2 MiB (kRoundLarge)

PROGRAM = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_rnn_weights import Decoder
torch.manual_seed(0)
model, x = Decoder().eval(), torch.randn(1, {steps}, {hidden})
model, x = model.cuda(), x.cuda()
flat = {{w.untyped_storage().data_ptr() for w in model.lstm.parameters()}}
torch.cuda.synchronize()
held = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    model(x)
torch.cuda.synchronize()
print(json.dumps({{"held": held, "peak": torch.cuda.max_memory_allocated(),
                  "storages": len(flat)}}))
"""


class Decoder(nn.Module):
    """An LSTM and a projection after it (parakeet's ParakeetRNNTDecoder, less the embedding)."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.lstm = nn.LSTM(HIDDEN, HIDDEN, num_layers=LAYERS, batch_first=True, dtype=dtype)
        self.projector = nn.Linear(HIDDEN, HIDDEN, dtype=dtype)

    def forward(self, x):
        return self.projector(self.lstm(x)[0])



def on_the_card(program):
    """`program` run on the simulated H100 with this checkout's package: its last line's JSON."""
    beside = dict(os.environ)
    beside["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY / "python"),
                                                         beside.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         env=simulated_gpu.environment("h100", base=beside), timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])

def _weight_storages(document):
    """The bytes of each storage that holds the LSTM's weights, in the document's order."""
    return [storage["bytes"] for storage in document["storages"]
            if storage["origin"] == "parameter" and storage.get("module") == "lstm"]


def test_an_lstm_is_one_weight_storage_on_cuda_only():
    model, x = Decoder().eval(), torch.randn(1, STEPS, HIDDEN)
    on_cuda = step_graph.record(model, (x,), training=False, profile="cuda-sm90")
    assert _weight_storages(on_cuda) == [WEIGHT_BYTES]
    on_cpu = step_graph.record(model, (x,), training=False, profile="cpu")
    assert sorted(_weight_storages(on_cpu)) == sorted(
        p.numel() * 4 for p in model.lstm.parameters())
    # bfloat16 is not a dtype cuDNN's RNN takes (cudnn.is_acceptable): flatten_parameters
    # leaves the weights where they are.
    half = Decoder(torch.bfloat16).eval()
    brain = step_graph.record(half, (x.to(torch.bfloat16),), training=False,
                              profile="cuda-sm90")
    assert len(_weight_storages(brain)) == 2 * 2 * LAYERS
    # The model itself is not touched: its weights stay apart.
    assert len({p.untyped_storage().data_ptr() for p in model.lstm.parameters()}) == 4 * LAYERS


def test_an_lstm_forward_is_the_simulated_cards_to_the_byte():
    assert torch.backends.cuda.is_built(), "the card's side needs a CUDA build of torch"
    program = PROGRAM.format(tests=str(Path(__file__).parent), steps=STEPS, hidden=HIDDEN)
    card = on_the_card(program)
    assert card["storages"] == 1  # Module.cuda() flattened the weights into one buffer
    torch.manual_seed(0)
    model, x = Decoder().eval(), torch.randn(1, STEPS, HIDDEN)
    estimate = mem_tracer.estimate(model, (x,), device="cuda-sm90")
    assert estimate.raw["summary"]["baseline_allocated_bytes"] == card["held"]
    assert estimate.peak_allocated_bytes == card["peak"]
    # What the flat buffer's segment adds over the weights' own blocks is in both.
    assert card["held"] >= FLAT_SEGMENT


# Note [cuDNN's RNN reserve, bracketed]: a training step with an LSTM. The recording runs the
# CPU's LSTM, which keeps for the backward what the CPU's kernels keep; on the card cuDNN keeps a
# reserve space (the simulated cuDNN's size: a stand-in for real cuDNN's, which is documented
# nowhere; assumed of real cuDNN: within twice the simulated estimate). The estimate says so.
SMALL, SMALL_LAYERS, SMALL_STEPS, SMALL_BATCH = 64, 2, 16, 2
PAIRS = SMALL_STEPS * SMALL_BATCH  # (time step, sequence) pairs
# The simulated cudnnGetRNNTempSpaceSizes (simulator/libraries/cudnn_rnn.cpp): the reserve keeps
# the 4 gates, the cell state and the output per pair and layer; the work space one layer's
# input projections and two layer outputs; each bounded by twice that.
RESERVE = SMALL_LAYERS * PAIRS * (4 * SMALL + SMALL + SMALL) * 4
WORK = PAIRS * 4 * SMALL * 4 + 2 * PAIRS * SMALL * 4

STEP_PROGRAM = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_rnn_weights import SmallDecoder
torch.manual_seed(0)
model, x = SmallDecoder().cuda(), torch.randn({batch}, {steps}, {hidden}).cuda()
optimizer = torch.optim.AdamW(model.parameters())
for step in range(3):
    if step == 2:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print(json.dumps({{"peak": torch.cuda.max_memory_allocated()}}))
"""


class SmallDecoder(nn.Module):
    """A 2-layer LSTM and a projection, small enough for a training step in seconds."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(SMALL, SMALL, num_layers=SMALL_LAYERS, batch_first=True)
        self.projector = nn.Linear(SMALL, SMALL)

    def forward(self, x):
        return self.projector(self.lstm(x)[0])


def _approximate(document):
    return [a for a in document.get("assumptions", []) if a["kind"] == "approximate"]


def test_an_lstm_in_a_training_step_on_cuda_is_bracketed():
    model, x = SmallDecoder(), torch.randn(SMALL_BATCH, SMALL_STEPS, SMALL)
    on_cuda = step_graph.record(model, (x,), training=True, profile="cuda-sm90",
                                loss_fn=lambda output: output.sum())
    calls = _approximate(on_cuda)
    assert [call["op"] for call in calls] == ["aten::lstm"], on_cuda.get("assumptions")
    # What cuDNN may hold: the reserve's and the work space's bounds.
    assert calls[0]["under_by_at_most_bytes"] == 2 * RESERVE + 2 * WORK
    # What the CPU's LSTM held for the backward, measured on the recording: something.
    assert calls[0]["over_by_at_most_bytes"] > 0
    assert "reserve" in calls[0]["detail"]
    # The CPU's own profile runs the CPU's LSTM: nothing to bracket; nor does an RNN in
    # evaluation mode take a reserve.
    assert not _approximate(step_graph.record(model, (x,), training=True, profile="cpu",
                                              loss_fn=lambda output: output.sum()))
    assert not _approximate(step_graph.record(model.eval(), (x,), training=False,
                                              profile="cuda-sm90"))


def test_the_cards_training_step_lies_within_the_bracket():
    assert torch.backends.cuda.is_built(), "the card's side needs a CUDA build of torch"
    program = STEP_PROGRAM.format(tests=str(Path(__file__).parent), batch=SMALL_BATCH,
                                  steps=SMALL_STEPS, hidden=SMALL)
    card = on_the_card(program)
    torch.manual_seed(0)
    model, x = SmallDecoder(), torch.randn(SMALL_BATCH, SMALL_STEPS, SMALL)
    step = mem_tracer.TrainingStep(optimizer=torch.optim.AdamW(model.parameters()),
                                   loss_fn=lambda output: output.sum(), loop="until-step-end")
    estimate = mem_tracer.estimate(model, (x,), device="cuda-sm90", training=step)
    bracket = estimate.approximate
    assert bracket is not None and bracket.calls == 1, estimate.raw.get("approximate")
    assert bracket.peak_allocated_low_bytes <= card["peak"] <= bracket.peak_allocated_high_bytes
    assert bracket.peak_allocated_low_bytes == \
        estimate.peak_allocated_bytes - bracket.over_by_at_most_bytes
    assert estimate.raw["approximate"]["under_by_at_most_bytes"] == 2 * RESERVE + 2 * WORK
    assert "approximate: between" in str(estimate)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
