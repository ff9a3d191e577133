"""A few training steps on the simulated GPU's runtime, with mem_tracer's training categories.

argv: libcudart path, trace path, model (mlp | transformer), optimizer (sgd | adamw), steps,
and options: "nomodel" (start_tracing() without model=: only the optimizer's hooks),
"unmodified" (no start_tracing(): `memtrace run` traces the script), "estimate=PATH".
Prints, as its last line, what the test expects the report to say, computed here without
the report: the peak and its bytes by category, and each step's peak, from the mirror's own
count and from what this script sees (the parameters, each step's .grads, the optimizer's
state, and the tensors autograd saves, through a saved_tensors_hooks pair of its own)."""
import ctypes
import json
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)

import torch  # noqa: E402
from torch import nn  # noqa: E402

import mem_tracer  # noqa: E402
from mem_tracer import training  # noqa: E402
from host_mirror import HostMirror  # noqa: E402

trace_path, model_kind, optimizer_kind, steps = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
torch.manual_seed(0)
if model_kind == "mlp":
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    make_batch = lambda: (torch.randn(32, 64), torch.randint(0, 10, (32,)))  # noqa: E731
    loss_of = lambda out, y: nn.functional.cross_entropy(out, y)  # noqa: E731
else:
    model = nn.Sequential(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
                          nn.Linear(32, 8))
    make_batch = lambda: (torch.randn(4, 16, 32), torch.randn(4, 16, 8))  # noqa: E731
    loss_of = lambda out, y: ((out - y) ** 2).mean()  # noqa: E731
if optimizer_kind == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
else:
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.001)

mirror = HostMirror()
mirror.place(model.parameters())
training._set_address_resolver(mirror.address_of)
parameters = {mirror.serial_of(p) for p in model.parameters()}
gradients, state, inputs, saved = set(), set(), set(), set()


def pack(tensor):
    serial = mirror.serial_of(tensor)
    if serial is not None:
        saved.add(serial)
    return tensor


# "estimate=PATH": the estimator's prediction of this training step, written there first (the
# same model, optimizer, loss and batch shapes, recorded on fake tensors).
for option in sys.argv[6:]:
    if option.startswith("estimate="):
        x, y = make_batch()
        mem_tracer.estimate(model, (x,), training=True, optimizer=optimizer, loss_fn=loss_of,
                            targets=(y,), device="cpu", output=option.removeprefix("estimate="))
with_model = "nomodel" not in sys.argv[6:]
# "unmodified": the script does not trace itself; `memtrace run` traces it (its bootstrap installs
# the training hooks, the root module being the first one called).
unmodified = "unmodified" in sys.argv[6:]

if not unmodified:
    mem_tracer.start_tracing(trace_path, model=model if with_model else None)
step_peaks = []
with mirror:
    for _ in range(steps):
        x, y = make_batch()
        inputs.add(mirror.serial_of(x))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = model(x)
        loss = loss_of(out, y)
        loss.backward()
        gradients.update(mirror.serial_of(p.grad) for p in model.parameters())
        optimizer.step()
        state.update(mirror.serial_of(t) for s in optimizer.state.values() for t in s.values()
                     if isinstance(t, torch.Tensor))
        step_peaks.append(mirror.end_step())
        optimizer.zero_grad(set_to_none=True)
        del x, y, out, loss
if not unmodified:
    mem_tracer.stop_tracing()
training._set_address_resolver(None)


def categories(serials):
    # The order of precedence is what training.py tells last: a parameter or input saved for
    # backward stays a parameter or input.
    result = dict.fromkeys(training.CATEGORIES, 0)
    for serial in serials:
        if serial in parameters:
            name = "parameter"
        elif serial in gradients:
            name = "gradient"
        elif serial in state:
            name = "optimizer_state"
        elif serial in inputs and with_model:
            name = "input"
        elif serial in saved and with_model:
            name = "activation"
        else:
            name = "temporary"
        result[name] += mirror.sizes[serial]
    return result


print(json.dumps({"peak_bytes": mirror.peak, "categories": categories(mirror.peak_serials),
                  "steps": [{"peak_bytes": peak, "categories": categories(serials)}
                            for peak, serials in step_peaks]}))
