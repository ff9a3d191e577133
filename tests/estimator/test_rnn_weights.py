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
    beside = dict(os.environ)
    beside["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY / "python"),
                                                         beside.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         env=simulated_gpu.environment("h100", base=beside), timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    card = json.loads(run.stdout.strip().splitlines()[-1])
    assert card["storages"] == 1  # Module.cuda() flattened the weights into one buffer
    torch.manual_seed(0)
    model, x = Decoder().eval(), torch.randn(1, STEPS, HIDDEN)
    estimate = mem_tracer.estimate(model, (x,), device="cuda-sm90")
    assert estimate.raw["summary"]["baseline_allocated_bytes"] == card["held"]
    assert estimate.peak_allocated_bytes == card["peak"]
    # What the flat buffer's segment adds over the weights' own blocks is in both.
    assert card["held"] >= FLAT_SEGMENT


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
