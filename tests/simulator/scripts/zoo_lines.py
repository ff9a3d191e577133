"""The estimator's zoo (tests/estimator/zoo.py), each model's inference traced on the simulated
card or predicted on the CPU, one file per model, for test_zoo_lines.py.

    python zoo_lines.py trace DIR NAME...     (PyTorch's CUDA build, on the simulated card:
                                              DIR/NAME.bin)
    python3 zoo_lines.py predict DIR [--device PROFILE.json] NAME...
                                             (the torch memtrace-estimate was built against:
                                              DIR/NAME.json, estimate(method="record") for
                                              cuda-sm90 or the profile given)

Both call the model through Caller, whose forward is one line of this file: a Hugging Face
model's allocations are all in transformers' code, so that line is the user's line that names
them on both sides (the torch releases differ, and so do the paths of torch's and transformers'
own files, which no row can be keyed by). Each model is built as the zoo builds it (seed 0, its
mode), its inputs at BATCH; between two models the cuBLAS workspaces are given back, so that
each trace takes them as a fresh process would, as the estimate assumes."""
import gc
import os
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "estimator"))
import zoo  # noqa: E402

import mem_tracer  # noqa: E402

BATCH = 2


class Caller(nn.Module):
    def __init__(self, model, positional):
        super().__init__()
        self.model, self.positional = model, positional

    def forward(self, **inputs):
        return self.model(*inputs.values()) if self.positional else self.model(**inputs)  # the call


def built(name):
    entry = zoo.ZOO[name]
    model = entry.build()
    torch.manual_seed(1)
    return Caller(model, entry.positional), dict(entry.inputs(BATCH))


def failed(directory, name, error):
    """A model this side could not run: said in DIR/NAME.error, and the others go on."""
    Path(directory, f"{name}.error").write_text(f"{type(error).__name__}: {error}\n")


def trace(directory, names):
    mem_tracer.switch_allocator()
    for name in names:
        try:
            caller, inputs = built(name)
            caller = caller.cuda()
            inputs = {key: value.cuda() for key, value in inputs.items()}
            with mem_tracer.trace(os.path.join(directory, f"{name}.bin"), model=caller), \
                    torch.no_grad():
                caller(**inputs)
        except Exception as error:  # noqa: BLE001 - said, and the test names it
            failed(directory, name, error)
        caller = inputs = None
        # What the model left in reference cycles is freed before the next one's trace starts,
        # which would otherwise count it as its own (untraced) memory.
        gc.collect()
        torch._C._cuda_clearCublasWorkspaces()


def predict(directory, names):
    device = "cuda-sm90"
    if names[:1] == ["--device"]:  # a profile file of the test's own
        device, names = Path(names[1]), names[2:]
    for name in names:
        caller, inputs = built(name)
        try:
            with torch.no_grad():
                mem_tracer.estimate(caller, inputs, device=device, method="record",
                                    output=os.path.join(directory, f"{name}.json"))
        except Exception as error:  # noqa: BLE001
            failed(directory, name, error)


if __name__ == "__main__":
    {"trace": trace, "predict": predict}[sys.argv[1]](sys.argv[2], sys.argv[3:])
