"""The training loop around the model while its step is recorded: forward and loss (binding
the loop's own names as LOOPS says), backward, the optimizer's step and zero_grad, micro-batches,
autocast and a GradScaler; one object (StepLoop) whose methods run each part, in its Phase."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _torch_internals
from .fake_copies import fake_optimizer
from .step_recorder import Phase, Recorder, StepGraphError, engine_sums, tensors_in

# Note [Saved tensors packed without a cycle]
# The recording learns what autograd saves for backward through saved_tensors_hooks. A pack
# hook's result is held by the graph node that saved it, strongly and out of sight of Python's
# garbage collector; when the saved tensor is that node's own output (relu, exp, softmax, tanh,
# sigmoid save their result), a pack returning the tensor itself closes a cycle: tensor ->
# grad_fn -> packed tensor. Autograd breaks it when backward runs the node (its saved values are
# released), but a node backward never reaches (an output the loss does not use: the hidden
# states a model returns beside its logits, an auxiliary head's branch) keeps its saved tensors,
# and the node, alive forever, where without hooks they die with the output (autograd saves an
# output without its grad_fn). The recording then carried them into the recorded step as "held
# from the step before" and never released them. Seen on torch 2.14.1: maskformer's AdamW step
# (the loss the first output's sum, the pixel decoder's and the transformer decoder's other
# outputs unused) held 96 storages, 5,493,824 B, of the first step through the recorded one:
# +2.92 % against the simulated H100, which holds none. So pack keeps a detached alias (the same
# storage, no grad_fn), which holds the storage exactly as long as the node holds what it saved,
# and closes no cycle; unpack hands it back (autograd re-attaches the grad_fn it unpacks for).
# memtrace's own tracing of a training step pushes the same kind of hooks and had the same cycle
# (Note [Saved tensors kept as autograd keeps them] in mem_tracer/training.py).

# Note [What the loop holds]
# How long the training loop's own names keep the model's output and the loss alive changes the
# peak by the output (a language model's logits: 8.6 % to 15.9 % of a small GPT-2's step on the
# CPU). The recorded loop is one of these, said with the figure:
LOOPS = {
    # `out = model(x); loss = f(out, y); loss.backward(); opt.step(); opt.zero_grad()` in the
    # loop's body, as PyTorch's mnist example, nanoGPT's train.py and scripts on Accelerate
    # (`outputs = model(**batch); loss = outputs.loss`) write it: both names keep their tensors
    # into the next step, until its forward and its loss rebind them.
    "until-next-forward": "the output and the loss stay named until the next step's forward "
                          "and loss rebind them (`out = model(x); loss = f(out, y)` in the "
                          "loop's body)",
    # `loss = f(model(x), y)`, or a function that returns the loss alone: transformers'
    # Trainer (compute_loss returns, dropping the outputs, before backward) and Lightning's
    # training_step: the output dies once the loss is made; the loss lives until rebound.
    "until-loss": "the output is dropped once the loss is made (`loss = f(model(x), y)`, or a "
                  "function that returns the loss, as transformers' Trainer); the loss stays "
                  "named until the next step's loss",
    # A train_step function that returns after zero_grad, or `del out, loss` at the end.
    "until-step-end": "the output and the loss stay named until the step ends, after zero_grad "
                      "(a train_step function, or `del out, loss`)",
}
DEFAULT_LOOP = "until-next-forward"


def default_loss(output: Any) -> Any:
    import torch
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(output, Mapping) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    tensors = [t for t in tensors_in(output) if t.is_floating_point()]
    if not tensors:
        raise StepGraphError("the model's output holds no floating-point tensor to take a loss "
                             "of: pass loss_fn=")
    return tensors[0].float().sum()


def call(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    return model(*args, **kwargs)


@dataclass(frozen=True)
class StepSpec:
    """What the step is (the user's model and optimizer, never run, and the options)."""

    model: Any
    training: bool
    loss_of: Callable[..., Any]
    optimizer: Any
    autocast: Any
    scaler: bool
    accumulate: int
    loop: str
    optimizer_settings: list[dict[str, Any]]


def _owner(name: str) -> str:
    """The module a parameter or buffer named `name` (named_parameters()'s) belongs to: its
    path less the last part ("h.0.attn.weight": "h.0.attn"; "weight": the root, "")."""
    return name.rpartition(".")[0]


class StepLoop:
    """`steps` steps of the copies on tensors of `device`; the last one recorded when the
    recorder records (fake tensors): the first makes the optimizer's state, so the last is the
    steady state."""

    def __init__(self, spec: StepSpec, recorder: Recorder, model: Any, args: list[Any],
                 kwargs: dict[str, Any], targets: list[Any], device: str) -> None:
        import torch
        self.spec, self.recorder, self.device = spec, recorder, device
        self.model, self.args, self.kwargs, self.targets = model, args, kwargs, targets
        self.optimizer = (fake_optimizer(spec.optimizer, spec.model, model,
                                         spec.optimizer_settings) if spec.training else None)
        self.scaler = torch.amp.GradScaler(device) if spec.scaler and spec.training else None
        # The .grad storages (indices) when the optimizer steps, each with its parameter's module.
        self.gradients: dict[int, str] = {}
        self.names: dict[str, Any] = {}  # what the loop's own names hold (Note [What the loop holds])

    def pack(self, tensor: Any) -> Any:
        """saved_tensors_hooks' pack: what autograd saves in the forward is an activation. It
        keeps a detached alias, never the tensor (Note [Saved tensors packed without a
        cycle])."""
        recorder = self.recorder
        if recorder.recording and recorder.phase is Phase.FORWARD:
            index = recorder.index_of(tensor)
            if index is not None:
                recorder.saved.add(index)
        with _torch_internals.disable_current_modes():  # an alias: no op of the step
            return tensor.detach()

    def autocast(self) -> Any:
        import torch
        return (torch.autocast(self.device, dtype=self.spec.autocast)
                if self.spec.autocast is not None else contextlib.nullcontext())

    def forward_and_loss(self) -> Any:
        """The forward and the loss, binding the loop's names as LOOPS[loop] says; returns the
        loss."""
        import torch
        with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda tensor: tensor), \
                self.autocast():
            output = call(self.model, self.args, self.kwargs)
            if self.spec.loop != "until-loss":
                self.names["output"] = output  # the previous step's output dies here
            loss = self.spec.loss_of(output, *self.targets)
            del output
            self.names["loss"] = loss
        return loss

    def optimizer_step(self) -> None:
        """The optimizer's step, in the optimizer phase; zero_grad after it, outside the step
        (as the tracer's phases)."""
        kernels = self.recorder.device_kernels
        if kernels is not None:
            kernels.optimizer_phase = True  # its host tensors are the device's host's
        try:
            if self.optimizer is None:
                with self.recorder.in_phase(Phase.OPTIMIZER):
                    for parameter in self.model.parameters():
                        parameter.grad = None
                return
            with self.recorder.in_phase(Phase.OPTIMIZER):
                if self.scaler is not None:
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        finally:
            if kernels is not None:
                kernels.optimizer_phase = False

    def step(self) -> None:
        import torch
        recorder = self.recorder
        recorder.replayed.clear()
        if not self.spec.training:
            with torch.no_grad(), recorder.in_phase(Phase.FORWARD):
                output = call(self.model, self.args, self.kwargs)
                del output
            return
        for _ in range(self.spec.accumulate):
            with recorder.in_phase(Phase.FORWARD):
                loss = self.forward_and_loss()
            with recorder.in_phase(Phase.BACKWARD):
                recorder.backward_module = None
                root = self.scaler.scale(loss) if self.scaler is not None else loss
                with engine_sums(recorder, root):  # Note [The engine's gradient sums in place]
                    root.backward()
                del loss, root
        owners = self.owners()
        for name, parameter in self.model.named_parameters():
            index = recorder.index_of(parameter.grad) if parameter.grad is not None else None
            if index is not None:
                self.gradients[index] = owners.get(id(parameter), _owner(name))
        self.optimizer_step()
        if self.spec.loop == "until-step-end":
            self.names.clear()

    def owners(self) -> dict[int, str]:
        """Each parameter's and buffer's module (by the tensor's id), named as the recorder names
        the modules the forward runs: named_modules() of the model as given, so that a wrapper
        made around it (DDP, whose parameters are named `module.0.weight`) adds no part to the
        path, as a trace adds none (Note [Module paths as the user names them] in
        _modules.py). Empty where the recorder names no module."""
        names = self.recorder.module_names
        owners: dict[int, str] = {}
        for module in self.model.modules():
            name = names.get(id(module))
            if name is None:
                continue
            for _, tensor in (*module.named_parameters(recurse=False),
                              *module.named_buffers(recurse=False)):
                owners.setdefault(id(tensor), name)
        return owners

    def declare_persistent(self) -> None:
        """The storages that live through the recorded step, as the tracer names them."""
        import torch
        recorder, model = self.recorder, self.model
        parameters = list(model.named_parameters())
        buffers = list(model.named_buffers())
        known = self.owners()
        owners = {id(tensor): known.get(id(tensor), _owner(name))
                  for name, tensor in (*parameters, *buffers)}
        recorder.persistent([p for _, p in parameters], "parameter", "parameter",
                            [name for name, _ in parameters],
                            [owners[id(p)] for _, p in parameters])
        recorder.persistent([b for _, b in buffers], "buffer", "parameter",
                            [name for name, _ in buffers], [owners[id(b)] for _, b in buffers])
        if self.optimizer is not None:
            # Each state's owner is its parameter's module (a parameter the model does not
            # hold, the user's own tensor, has none).
            state = [(f"{index}.{key}", value, owners.get(id(parameter)))
                     for index, (parameter, per_parameter)
                     in enumerate(self.optimizer.state.items())
                     for key, value in per_parameter.items()
                     if isinstance(value, torch.Tensor)]
            recorder.persistent([v for _, v, _ in state], "optimizer_state", "optimizer_state",
                                [f"optimizer state {name}" for name, _, _ in state],
                                [owner for _, _, owner in state])
        inputs = tensors_in((self.args, self.kwargs))
        recorder.persistent(inputs, "input", "input",
                            [f"input {index}" for index in range(len(inputs))])
        # The loss's targets are no argument of the forward: temporaries, as the tracer
        # counts them (it sees the root module's arguments only).
        labels = tensors_in(self.targets)
        recorder.persistent(labels, "input", "temporary",
                            [f"target {index}" for index in range(len(labels))])

    def run(self, steps: int) -> None:
        recorder = self.recorder
        for _ in range(steps - 1):
            self.step()  # the first step makes the optimizer's state: not the steady state
        if recorder.collect is None:
            self.declare_persistent()
            recorder.recording = True
            recorder.carried()
        self.gradients.clear()
        self.step()
        recorder.recording = False
        if recorder.collect is None:
            recorder.finish(self.gradients)
