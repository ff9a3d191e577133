"""Training categories, phases and steps (docs/trace-format.md, "Training").

What each CUDA allocation holds in training (parameter, gradient, optimizer state, saved
activation, input, temporary), which phase the step is in (forward, backward, optimizer), and
where each step ends, learnt from PyTorch's own hooks with no change to the training loop:

- PyTorch's global optimizer step hooks (every optimizer, no need to know it): before
  ``step()`` the parameters of its param_groups and their ``.grad``; after it, the tensors of
  ``optimizer.state``, then the step's end. These need no model, so any ``start_tracing()``
  records parameters, gradients, optimizer state and steps; each of them is also told the
  module owning its parameter (Note [Everything a parameter has is its module's]).
- With ``start_tracing(model=model)``, hooks on that root module: its forward's tensor
  arguments are inputs; tensors autograd saves for backward during its forward (not
  parameters, not inputs) are activations (a ``saved_tensors_hooks`` pair, pushed for the
  forward only and chained to any pair already in force, so the program's own hooks still
  run); the phase becomes forward there, and backward when autograd reaches the root's output.
- Backward runs on autograd's threads on a GPU, where no Python frame of the program is on
  the stack: each module's output node, reached in backward, sets that thread's nn.Module
  (Note [Backward modules]).

Storages are named to the recorder by their address, at the moment the package learns what
they are: a ``.grad`` is only known at the step's end, long after backward allocated it; the
reader applies a category to the allocation's whole life. Tensors inside segments of
PyTorch's caching allocator (LD_PRELOAD without the cudaMallocAsync backend) are not
allocations of their own, so their categories are ignored: exact categories need tensor-level
events (``switch_allocator()``, or ``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``)."""
from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any, Callable

from . import _backward, _modules, _native, _storages, _torch_internals

# The numbers the trace format gives them (tracer/format/records.h: Category, TrainingPhase).
CATEGORIES = ("unknown", "parameter", "gradient", "optimizer_state", "activation", "input",
              "temporary")
_PARAMETER, _GRADIENT, _OPTIMIZER_STATE, _ACTIVATION, _INPUT = 1, 2, 3, 4, 5
_NONE, _FORWARD, _BACKWARD, _OPTIMIZER = 0, 1, 2, 3

_lock = threading.Lock()
_handles: list[Any] = []
_model: weakref.ref[Any] | None = None
_steps = 0
_parameters: set[int] = set()  # addresses of the parameters' storages, as last seen
_inputs: set[int] = set()  # of the running root forward's inputs


class _Forwards(threading.local):
    """A thread's root forwards running: per thread, because autograd's saved-tensor hooks,
    which a root forward pushes and pops, are the thread's own (two threads training at once
    must never pop each other's). `generation` ties the state to one install()."""

    def __init__(self) -> None:
        self.generation = -1
        self.depth = 0  # the root module's forward calls running (it may call itself)
        self.pushed: list[bool] = []  # per running root forward: whether it pushed a hooks pair
        self.roots: list[bool] = []  # per module forward running: whether it is a root's


_forwards_of_thread = _Forwards()
_generation = 0  # bumped by uninstall(): every thread's state from before is stale


def _forwards() -> _Forwards:
    state = _forwards_of_thread
    if state.generation != _generation:
        state.generation, state.depth, state.pushed, state.roots = _generation, 0, [], []
    return state
_thread = threading.local()  # .backward_module: a module this thread entered in backward;
# .stepping: whether it entered <optimizer.step> (Note [Owners that are not modules])
_torch: Any = None  # torch, bound by install()


# How a tensor's storage is named to the recorder (_storages.py); tests that mirror CPU tensors
# into memtrace set the resolver through this name.
_set_address_resolver = _storages.set_address_resolver


_bound: list[Any] = []  # the library whose training functions have their signatures set


def _library() -> Any:
    library = _native.library()
    if not _bound or _bound[0] is not library:
        import ctypes
        library.memtrace_set_category.argtypes = [ctypes.c_uint64, ctypes.c_int]
        library.memtrace_set_category.restype = ctypes.c_int
        library.memtrace_training_phase.argtypes = [ctypes.c_int]
        library.memtrace_training_phase.restype = ctypes.c_int
        library.memtrace_step_end.argtypes = [ctypes.c_uint64]
        library.memtrace_step_end.restype = ctypes.c_int
        _bound[:] = [library]
    return library


_address = _storages.address


def _tell(tensors: Iterable[Any], category: int) -> None:
    set_category = _library().memtrace_set_category
    for tensor in tensors:
        address = _address(tensor)
        if address is not None:
            set_category(address, category)


# Parameters and optimizer state live across steps: each is told once per allocation. A
# tensor still alive at the address it was told at is the same allocation (a storage swapped
# for another is allocated before the old one is freed, so at another address).
_told: dict[int, tuple[weakref.ref[Any], int]] = {}


def _tell_lasting(tensors: Iterable[Any], category: int) -> None:
    set_category = _library().memtrace_set_category
    for tensor in tensors:
        address = _address(tensor)
        if address is None:
            continue
        known = _told.get(address)
        if known is not None and known[1] == category and known[0]() is tensor:
            continue
        set_category(address, category)
        _told[address] = (weakref.ref(tensor), category)
        if category == _PARAMETER:
            _parameters.add(address)


def _phase(phase: int) -> None:
    _library().memtrace_training_phase(phase)


def _tensors(value: Any) -> list[Any]:
    """The tensors in `value` (a tensor, or containers of them), found without pytree in the
    common cases: this runs at every module call."""
    tensor_type = _torch.Tensor
    if isinstance(value, tensor_type):
        return [value]
    if isinstance(value, (tuple, list)) and all(
            item is None or isinstance(item, tensor_type) for item in value):
        return [item for item in value if item is not None]
    return [leaf for leaf in _torch_internals.tree_leaves(value) if isinstance(leaf, tensor_type)]


# ---- the optimizer: parameters, gradients, optimizer state, steps -----------------------


def _optimizer_parameters(optimizer: Any) -> list[Any]:
    return [p for group in optimizer.param_groups for p in group["params"]]


# Note [Everything a parameter has is its module's]
# A parameter's gradient and optimizer state are its module's, as the parameter is (Note
# [Weights and their modules] in tracer/format/records.h), whoever allocated them: backward
# (the gradient, under the module whose backward made it, or none), the optimizer's lazy state
# in its first step (outside any module), a foreach or fused optimizer's (the same
# optimizer.state). The optimizer's hooks know each by the parameter it belongs to (its
# `.grad`, optimizer.state[parameter]), and the parameter's module by its identity: the module
# whose own _parameters hold it, among the modules named (Note [Module paths as the user names
# them] in _modules.py), the first named for a parameter two modules share (GPT-2's lm_head
# and wte: wte, named first). Each is told by a kOwnerModule record, which holds for the
# allocation's whole life, when the hooks first see it: the gradient before the step, the
# state after it, and the parameter itself then too (one put on the device again by `.to()`
# after its module last ran). A parameter of no named module (the user's own tensor given to
# the optimizer) has no owner, and its gradient and state stay where they were made.
_owners: dict[int, tuple[weakref.ref[Any], bytes]] = {}  # id(parameter) -> (it, module path)
_owning = False  # whether install() was asked for module attribution


def _learn_owners() -> None:
    _owners.clear()
    for module, path in list(_modules.named_modules()):
        encoded = path.encode()
        for parameter in module._parameters.values():
            if parameter is not None and id(parameter) not in _owners:
                _owners[id(parameter)] = (weakref.ref(parameter), encoded)


def _owner(parameter: Any) -> bytes | None:
    known = _owners.get(id(parameter))
    return known[1] if known is not None and known[0]() is parameter else None


def _tell_owners(parameters: list[Any], belongings: Callable[[Any], list[Any]]) -> None:
    """Tells each parameter's module that it owns what `belongings(parameter)` gives (Note
    [Everything a parameter has is its module's])."""
    if not _owning:
        return
    if any(_owner(parameter) is None for parameter in parameters):
        _learn_owners()  # a parameter not seen before, or a module named since
    for parameter in parameters:
        path = _owner(parameter)
        if path is not None:
            _storages.tell_owner_of(belongings(parameter), path)


# Note [Owners that are not modules]
# Two kinds of allocation in a training step belong to no one module, and are large enough to
# hide the module table's answer when left in `<no module>` (DDP over 2 ranks: 25.6 % of the
# peak, tests/simulator/test_parallel_jobs.py):
# - the optimizer step's own temporaries (foreach AdamW's intermediate lists, one tensor a
#   parameter, made and freed inside step()) are charged to the owner `<optimizer.step>`, which
#   the stepping thread enters between the step's pre and post hooks (and while a GradScaler's
#   step and update run: _patch_grad_scaler). What the step makes that
#   belongs to a parameter (the lazy state of the first step) is told its parameter's module
#   after the step (Note [Everything a parameter has is its module's]), which holds over it.
# - DDP's gradient buckets (flat buffers, each holding the gradients of many parameters, of
#   several modules at once: DDP's first step has one bucket holding them all) are charged to
#   the owner `<DDP buckets>`: entered while DDP builds its Reducer (its first buckets) and
#   while the Reducer rebuilds them (at the second forward), the two places DDP allocates them.
#   These are patched onto DDP's class and the Reducer's type while tracing, and put back by
#   uninstall(); the program's DDP is otherwise untouched (a communication hook would have given
#   each bucket's buffer, but DDP takes only one, and the program may want its own).
# A name in angle brackets is an owner the package names, not a module path: the report shows
# it whole, never cut or folded (Note [The module table] in tracer/report/analysis.h).
OPTIMIZER_STEP_OWNER = b"<optimizer.step>"
DDP_BUCKETS_OWNER = b"<DDP buckets>"


def _enter_owner(owner: bytes) -> None:
    _native.library().memtrace_module_enter(owner)


def _leave_owner() -> None:
    _native.library().memtrace_module_exit()


def _enter_step_owner() -> None:
    if getattr(_thread, "stepping", False):  # a step that raised never reached its post hook
        _leave_owner()
    _enter_owner(OPTIMIZER_STEP_OWNER)
    _thread.stepping = True


def _leave_step_owner() -> None:
    if getattr(_thread, "stepping", False):
        _leave_owner()
        _thread.stepping = False


class _Patched:
    """An attribute of a class replaced while tracing, put back by remove() (a hook handle)."""

    def __init__(self, owner: Any, name: str, replacement: Callable[..., Any]) -> None:
        self.owner, self.name, self.original = owner, name, owner.__dict__[name]
        setattr(owner, name, replacement)

    def remove(self) -> None:
        setattr(self.owner, self.name, self.original)


def _charged_to(owner: bytes, function: Callable[..., Any]) -> Callable[..., Any]:
    def charged(*args: Any, **kwargs: Any) -> Any:
        _enter_owner(owner)
        try:
            return function(*args, **kwargs)
        finally:
            _leave_owner()
    charged.__wrapped__ = function  # type: ignore[attr-defined]
    return charged


def _patch_ddp_buckets() -> list[_Patched]:
    """DDP's bucket allocations charged to `<DDP buckets>` (Note [Owners that are not
    modules]); nothing where torch has no distributed package."""
    return [_Patched(owner, name, _charged_to(DDP_BUCKETS_OWNER, owner.__dict__[name]))
            for owner, name in _torch_internals.ddp_bucket_allocators()]


# A GradScaler's step and update are the optimizer's step as the program calls it
# (scaler.step(optimizer) unscales the gradients, checks them and steps; update() adjusts the
# scale): what they make themselves (the found-inf flags unscale_ keeps until update(), the
# inverse scale) is charged to <optimizer.step> in the optimizer phase, as the estimator's
# TrainingStep(scaler=True) records them (Note [Owners that are not modules]).
def _patch_grad_scaler() -> list[_Patched]:
    scaler = getattr(getattr(_torch, "amp", None), "GradScaler", None)
    if scaler is None:
        return []
    return [_Patched(scaler, name, _in_the_step(scaler.__dict__[name]))
            for name in ("step", "update")]


def _in_the_step(function: Callable[..., Any]) -> Callable[..., Any]:
    def stepping(*args: Any, **kwargs: Any) -> Any:
        _enter_owner(OPTIMIZER_STEP_OWNER)
        _phase(_OPTIMIZER)
        try:
            return function(*args, **kwargs)
        finally:
            _phase(_NONE)
            _leave_owner()
    stepping.__wrapped__ = function  # type: ignore[attr-defined]
    return stepping


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
    _leave_backward_module()
    _phase(_OPTIMIZER)
    if _owning:
        _enter_step_owner()
    parameters = _optimizer_parameters(optimizer)
    _tell_lasting(parameters, _PARAMETER)
    _tell([p.grad for p in parameters if p.grad is not None], _GRADIENT)
    _tell_owners(parameters, lambda parameter: [parameter, parameter.grad])
    return _closure_outside_the_step(args, kwargs)


# Note [A closure inside the optimizer's step]
# optimizer.step(closure) (Lightning's loop, LBFGS) runs the closure (the forward, the loss,
# backward) inside the step, after its pre-hook. Left so, what the closure makes outside every
# module (the loss and what computes it) was charged to <optimizer.step>, and the step's own
# work came after backward's end, in no phase (Lightning's steps read a peak phase of "none").
# The pre-hook hands the step a closure that runs the program's outside <optimizer.step> and
# the optimizer phase and enters both again when it returns: the closure's allocations are
# charged as the same loop written without a closure charges them, the loop the estimator's
# TrainingStep predicts (the loss in <no module>, the step's temporaries in <optimizer.step>).
def _closure_outside_the_step(args: Any, kwargs: Any) -> tuple[Any, Any] | None:
    if args and callable(args[0]):
        return (_outside_the_step(args[0]), *args[1:]), kwargs
    if callable(kwargs.get("closure")):
        return args, {**kwargs, "closure": _outside_the_step(kwargs["closure"])}
    return None


def _outside_the_step(closure: Callable[..., Any]) -> Callable[..., Any]:
    def outside(*args: Any, **kwargs: Any) -> Any:
        stepping = getattr(_thread, "stepping", False)
        if stepping:
            _leave_step_owner()
        _phase(_NONE)
        try:
            return closure(*args, **kwargs)
        finally:
            _leave_backward_module()
            _phase(_OPTIMIZER)
            if stepping:
                _enter_step_owner()
    outside.__wrapped__ = closure  # type: ignore[attr-defined]
    return outside


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    global _steps
    _leave_step_owner()
    tensor_type = _torch.Tensor
    _tell_lasting([value for state in optimizer.state.values() for value in state.values()
                   if isinstance(value, tensor_type)], _OPTIMIZER_STATE)
    _tell_owners(list(optimizer.state), lambda parameter: [
        value for value in optimizer.state[parameter].values() if isinstance(value, tensor_type)])
    _steps += 1
    library = _library()
    library.memtrace_step_end(_steps)
    library.memtrace_training_phase(_NONE)


# ---- the root module: inputs, activations, phases ---------------------------------------


# Note [Saved tensors kept as autograd keeps them]
# A saved-tensors pack hook's result is held by the graph node that saved it, strongly and out
# of sight of Python's garbage collector. Without hooks, autograd saves a node's own output
# without its grad_fn (relu, softmax, tanh, exp save their result), so nothing cycles; a pack
# that returns the tensor itself closes the cycle tensor -> grad_fn -> packed tensor, which
# autograd breaks only when backward runs that node. A node backward never reaches (an output
# the loss does not use: a model's auxiliary outputs, hidden states beside its logits) then kept
# its saved tensors, and itself, for the rest of the process: memtrace changed the program
# (maskformer's training loop held 5.24 MiB more each step under `memtrace run`; the simulated
# card's counters, tests/simulator/test_unchanged.py's unused-output loop, 22 tensors after 4
# steps). So _pack keeps a detached alias (made outside any dispatch mode: the program's modes
# never see memtrace's own ops): the same storage, no grad_fn, held exactly as long
# as the node holds what it saved; autograd gives the unpacked tensor its grad_fn back. The
# estimator's recording had the same cycle (Note [Saved tensors packed without a cycle] in
# estimator/step_loop.py). Chained to the program's own hooks, their pack's result is kept, as
# without memtrace.


def _pack(tensor: Any) -> Any:
    address = _address(tensor)
    if address is not None and address not in _parameters and address not in _inputs:
        _library().memtrace_set_category(address, _ACTIVATION)
    # memtrace's own op: no dispatch mode of the program's (the simulated card's values mode, a
    # user's counter) sees it.
    with _torch_internals.disable_current_modes():
        return tensor.detach()


def _unpack(tensor: Any) -> Any:
    return tensor


def _chained(outer: tuple[Callable[[Any], Any], Callable[[Any], Any]] | None) -> tuple[Any, Any]:
    if outer is None:
        return _pack, _unpack
    outer_pack, outer_unpack = outer

    def pack(tensor: Any) -> Any:
        _pack(tensor)
        return outer_pack(tensor)

    return pack, outer_unpack


def _root_forward_begins(module: Any, args: Any, kwargs: Any) -> None:
    import torch
    forwards = _forwards()
    forwards.depth += 1
    if forwards.depth > 1 or torch.compiler.is_compiling():
        # Nested, or being traced by torch.compile: its graph must not capture these hooks.
        forwards.pushed.append(False)
        return
    _leave_backward_module()
    _phase(_FORWARD)
    _inputs.clear()
    inputs = _tensors((args, kwargs))
    _tell(inputs, _INPUT)
    for tensor in inputs:
        address = _address(tensor)
        if address is not None:
            _inputs.add(address)
    pushed = False
    if torch.is_grad_enabled() and _torch_internals.saved_tensors_hooks_enabled():
        pack, unpack = _chained(_torch_internals.top_saved_tensors_hooks())
        _torch_internals.push_saved_tensors_hooks(pack, unpack)
        pushed = True
    forwards.pushed.append(pushed)


def _root_forward_ends(module: Any, args: Any, kwargs: Any, output: Any) -> None:
    forwards = _forwards()
    forwards.depth = max(0, forwards.depth - 1)
    if forwards.pushed and forwards.pushed.pop():
        _torch_internals.pop_saved_tensors_hooks()
    if forwards.depth == 0:
        _watch_backward(output, None, root=_path_of(module) if _owning else None)


def _backward_begins(*_: Any) -> None:
    _phase(_BACKWARD)
    try:
        _torch_internals.queue_backward_callback(_backward_ends)
    except RuntimeError:  # not inside a backward (a hook called some other way)
        pass


def _root_backward_begins(path: bytes, node_id: int) -> None:
    _backward_begins()
    _enter_backward_module(path, node_id)


def _backward_ends() -> None:
    _leave_backward_module()
    _phase(_NONE)


# Note [Backward modules]
# Autograd runs a module's backward on the thread of the device (a GPU's autograd thread;
# on the CPU the caller's), without any of the program's Python frames. Full backward
# hooks (register_full_backward_pre_hook) would say when a module's backward begins, but they
# wrap the module's inputs and outputs in an autograd Function, which changes the graph and
# makes an in-place op on an output fail ("a view created inside a custom Function"): a
# ResNet's ReLU(inplace=True) would break. Instead, when a module's forward returns, a pre-hook
# goes on its output's grad_fn (no change to the graph): when backward reaches that node, the
# module's backward begins, and the thread running it enters that module (replacing the one it
# entered before). Nested modules that end on the same node register in the order their
# forwards return, innermost first, so the first to fire on a node wins. The root module's
# output nodes enter the root: the ops its own forward ends with (transformers' models compute
# the loss there, and its backward, the logits' gradient in fp32, is the largest of a language
# model's step) are the root's until backward reaches a leaf module.


def _enter_backward_module(path: bytes, node_id: int) -> None:
    state = _thread.__dict__
    if state.get("node") == node_id:
        return  # an enclosing module ending on the same node: the innermost keeps it
    state["node"] = node_id
    library = _native.library()
    if state.get("backward_module"):
        library.memtrace_module_exit()
    library.memtrace_module_enter(path)
    state["backward_module"] = True


def _leave_backward_module() -> None:
    state = _thread.__dict__
    state["node"] = None
    if state.get("backward_module"):
        _native.library().memtrace_module_exit()
        state["backward_module"] = False


def _watch_backward(output: Any, path: bytes | None, inputs: Any = (),
                    root: bytes | None = None) -> None:
    """Pre-hooks on the grad_fn of `output`'s tensors: the root's (path None: the backward
    phase begins, and the thread running it enters the root module `root`, when given) or a
    module's (its backward begins on the thread that runs it). Nodes of `inputs` are not the
    module's: a module that passes a tensor through (Dropout(0), Identity) did not make its
    node."""
    nodes = [tensor.grad_fn for tensor in _tensors(output) if tensor.grad_fn is not None]
    if not nodes:
        return
    seen = {id(tensor.grad_fn) for tensor in _tensors(inputs) if tensor.grad_fn is not None}
    for node in nodes:
        node_id = id(node)
        if node_id in seen:
            continue
        seen.add(node_id)
        if path is None and root is None:
            node.register_prehook(_backward_begins)
        elif path is None:
            node.register_prehook(
                lambda grad_outputs, root=root, node_id=node_id: _root_backward_begins(root, node_id))
        else:
            node.register_prehook(
                lambda grad_outputs, path=path, node_id=node_id: _enter_backward_module(path, node_id))


_encoded_paths: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def _path_of(module: Any) -> bytes:
    path = _encoded_paths.get(module)
    if path is None:
        path = _encoded_paths[module] = _modules.module_path(module).encode()
    return path


def _module_forward_ends(module: Any, args: Any, output: Any) -> None:
    # Leaf modules only: where a container and its last child end on the same node the child
    # wins anyway, and a container's own ops (a residual add) cost little in backward next to
    # what a hook on every container costs in forward. The root's own ops that end its forward
    # (a loss computed in the model's forward, as transformers' models do) are the root's: its
    # backward begins there (_root_forward_ends).
    if module._modules or not _torch.is_grad_enabled() or _torch.compiler.is_compiling():
        return
    _watch_backward(output, _path_of(module), args)


# ---- install / uninstall ----------------------------------------------------------------


def install(model: Any = None, *, modules: bool = True, announce: bool = True) -> None:
    """Installs the hooks (start_tracing() calls it): the optimizer's always, the root
    module's when `model` is given, and the backward module attribution when `modules`.
    `announce` writes the first training record now (the trace is a training one from here)."""
    global _model, _torch, _owning
    with _lock:
        if _handles:
            # Tracing started again (maybe into another file): tell the parameters again.
            _told.clear()
            if model is not None and _model is not None and _model() is model:
                _tell_lasting(list(model.parameters()), _PARAMETER)
            return
        try:
            import torch
            from torch.nn.modules import module as torch_module
            from torch.optim import optimizer as torch_optimizer
        except ImportError:
            return
        _torch = torch
        _owning = modules
        _handles.append(torch_optimizer.register_optimizer_step_pre_hook(_before_step))
        _handles.append(torch_optimizer.register_optimizer_step_post_hook(_after_step))
        lending = _backward.lend_stacks_to_autograd()
        if lending is not None:
            _handles.append(lending)
        if announce:
            _library().memtrace_training_phase(_NONE)  # the trace has training records from here
        if modules:
            # With or without a model: backward is charged to the module whose backward runs
            # whichever way the modules were named (Note [Module paths as the user names them]).
            _handles.append(torch_module.register_module_forward_hook(_module_forward_ends))
            _handles.extend(_patch_ddp_buckets())
            _handles.extend(_patch_grad_scaler())
        if model is None or not isinstance(model, torch.nn.Module):
            return
        _model = weakref.ref(model)
        parameters = list(model.parameters())
        _tell_lasting(parameters, _PARAMETER)
        _handles.append(model.register_forward_pre_hook(_root_forward_begins, with_kwargs=True))
        _handles.append(model.register_forward_hook(_root_forward_ends, with_kwargs=True,
                                                    always_call=True))


def _inside_backward() -> bool:
    """Whether autograd's engine is running a graph task on this thread: a forward there is a
    re-entrant checkpoint's recomputation, part of backward."""
    return _torch_internals.inside_backward()


def _automatic_begins(module: Any, args: Any) -> None:
    # A root: called with no module's forward running, and with gradients on (a forward under
    # no_grad is inference, which gets no training records), and not from inside backward (a
    # checkpoint recomputing its block: the phase stays backward, and its end is not the step's).
    roots = _forwards().roots
    root = not roots and _torch.is_grad_enabled() and not _inside_backward()
    roots.append(root)
    if root:
        _root_forward_begins(module, args, {})


def _automatic_ends(module: Any, args: Any, output: Any) -> None:
    roots = _forwards().roots
    if roots and roots.pop():
        _root_forward_ends(module, args, {}, output)


def install_automatic() -> None:
    """The hooks for a program that does not call start_tracing(model=...) (`memtrace run
    script.py`): the optimizer's, the backward modules', and the root module's for whichever
    module is called with no module's forward running and gradients on (its positional
    arguments are its inputs).
    Nothing is written until the program trains: a program that only infers, or never
    allocates, gets no training records (and no file)."""
    install(None, announce=False)
    with _lock:
        if _torch is None:
            return
        from torch.nn.modules import module as torch_module
        _handles.append(torch_module.register_module_forward_pre_hook(_automatic_begins))
        _handles.append(torch_module.register_module_forward_hook(_automatic_ends,
                                                                  always_call=True))


def uninstall() -> None:
    """Removes the hooks (stop_tracing() calls it)."""
    global _model, _generation
    with _lock:
        _generation += 1
        while _handles:
            _handles.pop().remove()
        _model = None
        _inputs.clear()
        _told.clear()
        _parameters.clear()
        _encoded_paths.clear()
        _owners.clear()
    _leave_backward_module()
    _leave_step_owner()
