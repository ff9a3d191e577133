"""The estimator's zoo (tests/estimator/zoo.py), each model's inference traced on the simulated
card or predicted on the CPU, one file per model, for test_zoo_lines.py.

    python zoo_lines.py trace DIR NAME...     (PyTorch's CUDA build, on the simulated card:
                                              DIR/NAME.bin)
    python3 zoo_lines.py predict DIR [--device PROFILE.json] NAME...
                                             (the torch memtrace-estimate was built against:
                                              DIR/NAME.json, estimate(method="record") for
                                              cuda-sm90 or the profile given)
    python zoo_lines.py trace-step DIR NAME...   (an AdamW training step, the third, traced:
                                                  DIR/NAME.bin)
    python3 zoo_lines.py predict-step DIR NAME... (the same step predicted: DIR/NAME.json)

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


def on_the_card():
    """memtrace's allocator under PyTorch, and the card's known values under the program, as
    `memtrace run --gpu` and the referee (tests/estimator/referee.py) run it: the values the
    program fixes (a decoder's position ids, `arange`) read on the simulated card as a real
    GPU computes them, not as zeros (Note [Known values on the simulated card]). Without them
    GPT-2's position ids read as zeros, so transformers took them for packed sequences and
    built a causal mask the real card does not build (Note [Values Python knows on fake
    tensors]). On a real GPU install() does nothing: the values are there."""
    from mem_tracer.simulated_gpu import values

    mem_tracer.switch_allocator()
    values.install("known")


def failed(directory, name, error):
    """A model this side could not run: said in DIR/NAME.error, and the others go on."""
    Path(directory, f"{name}.error").write_text(f"{type(error).__name__}: {error}\n")


def trace(directory, names):
    on_the_card()
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


def loss_of(output):
    """The step's loss, on both sides: the sum of the output's first floating-point tensor."""
    if isinstance(output, torch.Tensor):
        return output.sum()
    values = output.values() if hasattr(output, "values") else output
    return next(value for value in values
                if isinstance(value, torch.Tensor) and value.is_floating_point()).sum()


def trace_step(directory, names):
    """Each model's third AdamW step traced (the first two make the optimizer's state and take
    the cuBLAS workspaces: the steady state a training estimate is of), the loop's calls each
    on a line of its own, as a training loop has them."""
    on_the_card()
    for name in names:
        try:
            caller, inputs = built(name)
            caller = caller.cuda().train()  # as the referee trains it (tests/estimator/referee.py)
            inputs = {key: value.cuda() for key, value in inputs.items()}
            optimizer = torch.optim.AdamW(caller.parameters())

            def step():
                output = caller(**inputs)
                loss = loss_of(output)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            step()
            step()
            with mem_tracer.trace(os.path.join(directory, f"{name}.bin"), model=caller):
                step()
        except Exception as error:  # noqa: BLE001 - said, and the test names it
            failed(directory, name, error)
        caller = inputs = optimizer = None
        gc.collect()
        torch._C._cuda_clearCublasWorkspaces()


def predict_step(directory, names):
    for name in names:
        caller, inputs = built(name)
        caller.train()
        try:
            step = mem_tracer.TrainingStep(optimizer=torch.optim.AdamW(caller.parameters()),
                                           loss_fn=loss_of, loop="until-step-end")
            mem_tracer.estimate(caller, inputs, device="cuda-sm90", training=step,
                                output=os.path.join(directory, f"{name}.json"))
        except Exception as error:  # noqa: BLE001
            failed(directory, name, error)


if __name__ == "__main__":
    {"trace": trace, "predict": predict, "trace-step": trace_step,
     "predict-step": predict_step}[sys.argv[1]](sys.argv[2], sys.argv[3:])
