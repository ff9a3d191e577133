"""cuDNN's flat RNN weights (Note [cuDNN's flat RNN weights] in
python/mem_tracer/estimator/device_kernels.py): on a CUDA profile the estimate holds an nn.LSTM's
weights as the one buffer Module.cuda() leaves them in, and predicts the simulated card's
max_memory_allocated to the byte.

Assumed of the real card (what the simulated H100 runs is PyTorch's own code, torch 2.14.1+cu130,
around a simulated cuDNN): RNNBase._apply calls flatten_parameters, which allocates cuDNN's weight
space through the caching allocator and frees the weights' own blocks; cuDNN's weight space is the
weights' bytes packed without padding (the simulated cudnnGetRNNWeightSpaceSize; real cuDNN 9 packs
an LSTM's matrices and biases the same way for float32, not checked on a GPU here). The forward's
own buffers (cuDNN's work space inside _cudnn_rnn, and in a training step its reserve) are made
as RNN.cpp makes them (Note [cuDNN's RNN reserve, bracketed]), with the simulated cuDNN's sizes:
assumed of real cuDNN, each between nothing and twice those, which the estimate's bracket says.
The forward's peak is after them, at the projection that takes the cuBLAS workspace, as in
parakeet's prediction network.
"""
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPOSITORY, on_the_card
from torch import nn

sys.path.insert(0, str(REPOSITORY / "python"))
import mem_tracer  # noqa: E402
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
    card = on_the_card(program)
    assert card["storages"] == 1  # Module.cuda() flattened the weights into one buffer
    torch.manual_seed(0)
    model, x = Decoder().eval(), torch.randn(1, STEPS, HIDDEN)
    estimate = mem_tracer.estimate(model, (x,), device="cuda-sm90")
    assert estimate.raw["summary"]["baseline_allocated_bytes"] == card["held"]
    assert estimate.peak_allocated_bytes == card["peak"]
    # What the flat buffer's segment adds over the weights' own blocks is in both.
    assert card["held"] >= FLAT_SEGMENT


# Note [cuDNN's RNN reserve, bracketed]: a training step with an RNN. On a CUDA profile the
# recording makes cuDNN's call as RNN.cpp makes it (the input's copy, the output, the states, the
# work space and the reserve, the backward's copies, dw), with the simulated cuDNN's sizes: the
# simulated card's step to the byte. Real cuDNN's sizes are documented nowhere (assumed of real
# cuDNN: between nothing and twice the simulated ones): the estimate says approximate, and by how
# much.
SMALL, SMALL_LAYERS, SMALL_STEPS, SMALL_BATCH = 64, 2, 16, 2
PAIRS = SMALL_STEPS * SMALL_BATCH  # (time step, sequence) pairs
# The simulated cudnnGetRNNTempSpaceSizes (simulator/libraries/cudnn_rnn.cpp): the reserve keeps
# the gates, the cell state (LSTM, GRU) and the output per pair and layer; the work space one
# layer's input projections and two layer outputs.
RESERVE = {"lstm": SMALL_LAYERS * PAIRS * (4 * SMALL + SMALL + SMALL) * 4,
           "gru": SMALL_LAYERS * PAIRS * (3 * SMALL + SMALL + SMALL) * 4}
WORK = {"lstm": PAIRS * 4 * SMALL * 4 + 2 * PAIRS * SMALL * 4,
        "gru": PAIRS * 3 * SMALL * 4 + 2 * PAIRS * SMALL * 4}

STEP_PROGRAM = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_rnn_weights import CARD_MODELS, _first_sum, step_model
peaks = {{}}
for name in CARD_MODELS:
    model, x = step_model(name)
    model, x = model.cuda(), x.cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    for step in range(3):
        if step == 2:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        output = model(x)  # the loop "until-step-end": output and loss held to the end
        loss = _first_sum(output)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del output, loss
    torch.cuda.synchronize()
    peaks[name] = (torch.cuda.max_memory_allocated(),
                   torch.cuda.memory_stats()["requested_bytes.all.peak"])
    del model, x, optimizer
print(json.dumps(peaks))
"""


class SmallDecoder(nn.Module):
    """A 2-layer RNN (LSTM or GRU) under batch_first and a projection after it."""

    def __init__(self, kind="lstm", dropout=0.0):
        super().__init__()
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(SMALL, SMALL, num_layers=SMALL_LAYERS,
                                                          batch_first=True, dropout=dropout)
        self.projector = nn.Linear(SMALL, SMALL)

    def forward(self, x):
        return self.projector(self.rnn(x)[0])


class UnusedDecoder(nn.Module):
    """An encoder the loss reads and an LSTM whose output it does not (an RNN-T's prediction
    network beside its encoder, when the loss is the encoder's): the LSTM's backward never
    runs, and what it keeps for it (cuDNN's reserve, the input, the states) lives until the
    step ends, through the encoder's backward."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(SMALL, 4 * SMALL), nn.ReLU(),
                                     nn.Linear(4 * SMALL, SMALL))
        self.embedding = nn.Linear(SMALL, SMALL)
        self.lstm = nn.LSTM(SMALL, SMALL, num_layers=SMALL_LAYERS, batch_first=True)

    def forward(self, x):
        decoded = self.lstm(self.embedding(x))[0]
        return self.encoder(x), decoded


STEP_MODELS = ("lstm", "gru", "unused")  # estimated to the byte
CARD_MODELS = (*STEP_MODELS, "dropout")  # and an LSTM with dropout: within its bracket


def step_model(name):
    """(model, input) of a STEP_MODELS case, seeded."""
    torch.manual_seed(0)
    model = UnusedDecoder() if name == "unused" else \
        SmallDecoder("lstm", 0.1) if name == "dropout" else SmallDecoder(name)
    return model, torch.randn(SMALL_BATCH, SMALL_STEPS, SMALL)


def _first_sum(output):
    return (output[0] if isinstance(output, tuple) else output).sum()


def _approximate(document):
    return [a for a in document.get("assumptions", []) if a["kind"] == "approximate"]


def _byte_storages(document):
    """The bytes of each storage the step allocates as bytes (uint8): cuDNN's spaces."""
    return [document["storages"][allocation[0]]["bytes"] for node in document["nodes"]
            for allocation in node["allocates"] if allocation[2] == "uint8"]


def _ops(document):
    return {node["op"] for node in document["nodes"]}


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_an_rnn_on_cuda_is_cudnns_call_bracketed(kind):
    model, x = step_model(kind)
    on_cuda = step_graph.record(model, (x,), training=True, profile="cuda-sm90",
                                loss_fn=lambda output: output.sum())
    calls = _approximate(on_cuda)
    assert [call["op"] for call in calls] == [f"aten::{kind}"], on_cuda.get("assumptions")
    # Real cuDNN's reserve and work space may be anything from nothing to twice the simulated.
    spread = RESERVE[kind] + WORK[kind]
    assert calls[0]["under_by_at_most_bytes"] == calls[0]["over_by_at_most_bytes"] == spread
    assert "reserve" in calls[0]["detail"] and "cuDNN runs it" in calls[0]["detail"]
    # The reserve (kept for the backward) and the work space (forward's, and the backward's
    # two) are storages of the simulated sizes; the CPU's RNN kernels are not recorded.
    sizes = _byte_storages(on_cuda)
    assert sorted(sizes) == sorted([RESERVE[kind], WORK[kind], WORK[kind], WORK[kind]]), sizes
    assert not any("rnn" in op for op in _ops(on_cuda)), sorted(_ops(on_cuda))
    # The CPU's own profile runs the CPU's RNN: nothing to bracket.
    on_cpu = step_graph.record(model, (x,), training=True, profile="cpu",
                               loss_fn=lambda output: output.sum())
    assert not _approximate(on_cpu)
    assert not [size for size in _byte_storages(on_cpu) if size]
    # In evaluation mode cuDNN takes no reserve: the work space alone, and its bracket.
    evaluated = step_graph.record(model.eval(), (x,), training=False, profile="cuda-sm90")
    calls = _approximate(evaluated)
    assert [(c["over_by_at_most_bytes"], c["under_by_at_most_bytes"]) for c in calls] == [
        (WORK[kind], WORK[kind])], calls
    assert _byte_storages(evaluated) == [WORK[kind]]


def test_an_rnn_with_dropout_stays_the_cpus_call_bracketed():
    """cuDNN's dropout state (made once a process) is not recorded: such a call is the CPU's,
    with the wider bracket of the CPU's kernels against twice cuDNN's sizes and the state's."""
    torch.manual_seed(0)
    model = nn.LSTM(SMALL, SMALL, num_layers=SMALL_LAYERS, batch_first=True, dropout=0.1)
    x = torch.randn(SMALL_BATCH, SMALL_STEPS, SMALL)
    document = step_graph.record(model, (x,), training=True, profile="cuda-sm90",
                                 loss_fn=_first_sum)
    calls = _approximate(document)
    assert len(calls) == 1 and "as the CPU runs it" in calls[0]["detail"], calls
    dropped = (SMALL_LAYERS - 1) * PAIRS * SMALL  # a byte a dropped element between layers
    # cuDNN's dropout state, made once a process: twice the simulated H100's and H200's.
    state = 2 * 64 * 132 * 2048
    assert calls[0]["under_by_at_most_bytes"] == 2 * (RESERVE["lstm"] + dropped) + 2 * WORK[
        "lstm"] + state
    assert calls[0]["over_by_at_most_bytes"] > 0
    assert "dropout state" in calls[0]["detail"]


def test_the_cards_training_steps_are_the_estimates_to_the_byte():
    assert torch.backends.cuda.is_built(), "the card's side needs a CUDA build of torch"
    card = on_the_card(STEP_PROGRAM.format(tests=str(Path(__file__).parent)))
    assert sorted(card) == sorted(CARD_MODELS), card
    estimates = {}
    for name in CARD_MODELS:
        model, x = step_model(name)
        step = mem_tracer.TrainingStep(optimizer=torch.optim.AdamW(model.parameters()),
                                       loss_fn=_first_sum, loop="until-step-end")
        estimates[name] = mem_tracer.estimate(model, (x,), device="cuda-sm90", training=step)
    # max_memory_allocated and requested_bytes' peak, each model's: the unused LSTM's step
    # peaks in the encoder's backward with cuDNN's reserve held, the others in the optimizer.
    assert {name: (estimates[name].peak_allocated_bytes, estimates[name].peak_requested_bytes)
            for name in STEP_MODELS} == {name: tuple(card[name]) for name in STEP_MODELS}
    for name, estimate in estimates.items():
        bracket = estimate.approximate
        assert bracket is not None and bracket.calls == 1, estimate.raw.get("approximate")
        assert bracket.peak_allocated_low_bytes <= card[name][0] <= \
            bracket.peak_allocated_high_bytes, (name, card[name], bracket)
        assert "approximate: between" in str(estimate)
        if name in STEP_MODELS:
            kind = "gru" if name == "gru" else "lstm"
            assert bracket.over_by_at_most_bytes == bracket.under_by_at_most_bytes == \
                RESERVE[kind] + WORK[kind], name
    # With dropout the call is the CPU's, and the card holds cuDNN's dropout state (made by the
    # first step, kept: the simulated H100's 132 x 2,048 Philox states of 64 B) beside it: the
    # estimate lacks it, and its bracket says so.
    assert card["dropout"][0] - estimates["dropout"].peak_allocated_bytes >= 64 * 132 * 2048



# The estimate's cuDNN RNN sizes (device_kernels.cudnn_rnn_spaces) are the simulated cuDNN's
# formula written again in Python (simulator/libraries/cudnn_rnn.cpp, Note [RNN spaces]): the
# recording runs where no simulated card is loaded. This holds the two to the byte over the
# forms RNN.cpp asks about: each cell, one to three layers, both directions, an LSTM's
# projection, half, float and double, batch_first, a packed batch, dropout, training and
# evaluation. Assumed of the real card: nothing (real cuDNN's sizes are bracketed, above).
GRID = (  # kind, input, hidden, layers, bidirectional, projection, dtype, batch_first, dropout,
    #        packed lengths (or None)
    ("rnn_tanh", 24, 40, 1, False, 0, "float32", False, 0.0, None),
    ("rnn_relu", 24, 40, 3, True, 0, "float32", True, 0.0, None),
    ("gru", 24, 40, 2, True, 0, "float16", False, 0.0, None),
    ("gru", 24, 40, 1, False, 0, "float64", True, 0.0, None),
    ("lstm", 24, 40, 2, False, 16, "float32", False, 0.0, None),
    ("lstm", 24, 40, 3, True, 0, "float32", True, 0.25, None),
    ("lstm", 24, 40, 2, False, 0, "float32", False, 0.0, (7, 5, 2)),
    ("lstm", 24, 40, 1, True, 8, "float16", True, 0.0, None),
)
GRID_STEPS, GRID_BATCH = 7, 3

SIZES_PROGRAM = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_rnn_weights import GRID, grid_case
calls = 0
for index in range(len(GRID)):
    for training in (True, False):
        module, x = grid_case(index, "cuda")
        module.train(training)
        with torch.set_grad_enabled(training):
            output = module(x)[0]
            if training:
                data = output.data if hasattr(output, "batch_sizes") else output
                data.float().sum().backward()
        torch.cuda.synchronize()
        calls += 1
print(json.dumps({{"calls": calls}}))
"""


def grid_case(index, device="cpu"):
    """GRID[index]'s module and input on `device`, seeded."""
    kind, inputs, hidden, layers, bidirectional, projection, dtype, batch_first, dropout, \
        lengths = GRID[index]
    torch.manual_seed(index)
    dtype = getattr(torch, dtype)
    module = {"rnn_tanh": nn.RNN, "rnn_relu": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}[kind]
    extra = {"nonlinearity": kind[4:]} if kind.startswith("rnn_") else {}
    if projection:
        extra["proj_size"] = projection
    rnn = module(inputs, hidden, num_layers=layers, bidirectional=bidirectional,
                 batch_first=batch_first, dropout=dropout, dtype=dtype, device=device, **extra)
    shape = (GRID_BATCH, GRID_STEPS, inputs) if batch_first else (GRID_STEPS, GRID_BATCH, inputs)
    x = torch.randn(shape, dtype=dtype, device=device)
    if lengths is not None:
        x = nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lengths), batch_first=batch_first)
    return rnn, x


def _grid_args(rnn, x, training):
    """torch.<kind>'s arguments as nn.RNNBase.forward passes them."""
    directions = 2 if rnn.bidirectional else 1
    packed = isinstance(x, nn.utils.rnn.PackedSequence)
    batch = int(x.batch_sizes[0]) if packed else x.shape[0 if rnn.batch_first else 1]
    output = rnn.proj_size or rnn.hidden_size
    dtype = x.data.dtype
    h = torch.zeros(rnn.num_layers * directions, batch, output, dtype=dtype)
    hx = (h, torch.zeros(rnn.num_layers * directions, batch, rnn.hidden_size, dtype=dtype)) \
        if isinstance(rnn, nn.LSTM) else h
    weights = list(rnn._flat_weights)
    if packed:
        return [x.data, x.batch_sizes, hx, weights, rnn.bias, rnn.num_layers, rnn.dropout,
                training, rnn.bidirectional]
    return [x, hx, weights, rnn.bias, rnn.num_layers, rnn.dropout, training,
            rnn.bidirectional, rnn.batch_first]


def test_the_estimates_rnn_spaces_are_the_simulated_cudnns(tmp_path):
    assert torch.backends.cuda.is_built(), "the card's side needs a CUDA build of torch"
    from mem_tracer.estimator.device_kernels import cudnn_rnn_spaces
    log = tmp_path / "sizes.jsonl"
    ran = on_the_card(SIZES_PROGRAM.format(tests=str(Path(__file__).parent)),
                      MEMTRACE_GPU_SIZES_LOG=str(log))
    assert ran["calls"] == 2 * len(GRID), ran
    card = {}  # (cell, layers, bidirectional, data type, mode, projection) -> {space: bytes}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if not entry["call"].startswith("cudnnGetRNNTempSpaceSizes"):
            continue
        shapes = entry["shapes"]
        key = (shapes["cell"], shapes["layers"], shapes["bidirectional"], shapes["data_type"],
               shapes["proj_size"], shapes["dropout"], shapes["packed"], shapes["mode"])
        space = entry["call"].split("(")[1].split()[0]  # "work" or "reserve"
        assert card.setdefault(key, {}).setdefault(space, entry["bytes"]) == entry["bytes"], \
            (key, space, entry["bytes"])  # the backward asks again: the same answer
    compared = 0
    for index, case in enumerate(GRID):
        kind, _, hidden, layers, bidirectional, projection, dtype, _, dropout, lengths = case
        for training in (True, False):
            rnn, x = grid_case(index)
            spaces = cudnn_rnn_spaces(kind, _grid_args(rnn, x, training))
            assert spaces is not None, case
            cudnn_type = {"float16": "half", "float32": "float", "float64": "double"}[dtype]
            key = (kind, layers, bidirectional, cudnn_type, projection if projection else hidden,
                   bool(dropout) and training, lengths is not None,
                   "training" if training else "inference")
            assert key in card, (key, sorted(card))
            assert card[key]["work"] == spaces.work, (case, training, card[key], spaces)
            assert card[key].get("reserve", 0) == spaces.reserve, (case, training, card[key],
                                                                   spaces)
            compared += 1
    assert compared == 2 * len(GRID)



# Note [cuDNN's RNN in the TorchScript front end] (estimator/torchscript/op_rules.cpp): a model
# saved as TorchScript and run on a CUDA card makes its RNN calls as cuDNN does, and the
# weights, loaded apart and moved with .cuda(), are copied into cuDNN's buffer at every call.
# The front end makes the same allocations with the simulated cuDNN's sizes: the card's peak to
# the byte, bracketed by real cuDNN's spaces (assumed: between nothing and twice the simulated
# ones). An RNN in training mode with dropout stays PyTorch's decomposition, bracketed.
SCRIPTED = (  # kind, layers, bidirectional, projection, dtype, batch_first, dropout-in-training
    ("lstm", 3, False, 0, "float32", False, False),
    ("lstm", 2, True, 16, "float32", True, False),
    ("gru", 2, True, 0, "float16", False, False),
    ("rnn_relu", 3, False, 0, "float32", True, False),
    ("rnn_tanh", 1, True, 0, "float64", False, False),
    ("lstm", 2, False, 0, "float32", False, True),  # last: cuDNN's dropout state is kept
)
SCRIPTED_SIZE, SCRIPTED_STEPS, SCRIPTED_BATCH = 48, 12, 4

SCRIPTED_PROGRAM = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_rnn_weights import SCRIPTED, scripted_input
peaks = []
for index, case in enumerate(SCRIPTED):
    model = torch.jit.load({folder!r} + f"/rnn{{index}}.pt").cuda()
    model.train(case[-1])
    x = scripted_input(index).cuda()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize()
    peaks.append(torch.cuda.max_memory_allocated())
    del model, x
print(json.dumps(peaks))
"""


class Scripted(nn.Module):
    """One RNN whose output is the model's."""

    def __init__(self, kind, layers, bidirectional, projection, dtype, batch_first, dropout):
        super().__init__()
        cell = {"lstm": nn.LSTM, "gru": nn.GRU}.get(kind, nn.RNN)
        extra = {"nonlinearity": kind[4:]} if kind.startswith("rnn_") else {}
        if projection:
            extra["proj_size"] = projection
        self.rnn = cell(SCRIPTED_SIZE, SCRIPTED_SIZE, num_layers=layers,
                        bidirectional=bidirectional, batch_first=batch_first,
                        dropout=0.3 if dropout else 0.0, dtype=getattr(torch, dtype), **extra)

    def forward(self, x):
        return self.rnn(x)[0]


def scripted_input(index):
    kind, _, _, _, dtype, batch_first, _ = SCRIPTED[index]
    torch.manual_seed(index)
    shape = (SCRIPTED_BATCH, SCRIPTED_STEPS, SCRIPTED_SIZE) if batch_first else (
        SCRIPTED_STEPS, SCRIPTED_BATCH, SCRIPTED_SIZE)
    return torch.randn(shape, dtype=getattr(torch, dtype))


def test_a_scripted_rnn_is_cudnns_call_on_the_card(tmp_path):
    assert torch.backends.cuda.is_built(), "the card's side needs a CUDA build of torch"
    import warnings
    paths = []
    for index, case in enumerate(SCRIPTED):
        torch.manual_seed(index)
        model = Scripted(*case).train(case[-1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
            torch.jit.script(model).save(str(tmp_path / f"rnn{index}.pt"))
        paths.append(tmp_path / f"rnn{index}.pt")
    card = on_the_card(SCRIPTED_PROGRAM.format(tests=str(Path(__file__).parent),
                                               folder=str(tmp_path)))
    for index, case in enumerate(SCRIPTED):
        estimate = mem_tracer.estimate(str(paths[index]), (scripted_input(index),),
                                       device="cuda-sm90")
        assert estimate.method == "file", estimate.method
        bracket = estimate.approximate
        assert bracket is not None and bracket.calls == 1, (case, estimate.raw.get("approximate"))
        assert bracket.peak_allocated_low_bytes <= card[index] <= \
            bracket.peak_allocated_high_bytes, (case, card[index], bracket)
        detail = [a["detail"] for a in estimate.raw["assumptions"] if a["kind"] == "approximate"]
        if case[-1]:  # dropout in training: the decomposition, bracketed
            assert "PyTorch's decomposition" in detail[0], detail
            continue
        assert estimate.peak_allocated_bytes == card[index], (case, card[index],
                                                              estimate.peak_allocated_bytes)
        assert "copied into its buffer" in detail[0], detail  # the weights, loaded apart


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
