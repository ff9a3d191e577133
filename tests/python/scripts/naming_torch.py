"""Real torch modules named by mem_tracer's naming (Note [Naming a module without its caller's
locals] in python/mem_tracer/_modules.py) from a global forward pre-hook, as `memtrace run`
installs it (mem_tracer._modules._enter), on torch's CPU tensors: no GPU, no libmemtrace.
Prints one JSON line: the names given, whether each batch died when the program dropped it,
and the same loop under a hook that reads its caller's f_locals (the naming before issue 48),
so that the test can show it would see a batch kept alive.

    python naming_torch.py  (with the package on PYTHONPATH, under a Python with torch)
"""
import json
import sys
import weakref

import torch
from torch import nn
from torch.nn.modules import module as torch_module

from mem_tracer import _modules

found = {"python": "%d.%d" % sys.version_info[:2], "torch": torch.__version__}


# What mem_tracer._modules._enter does, less the recording (no libmemtrace here), in a frame the
# naming takes for the package's own, as it does _enter's: the module's globals' __name__.
HOOK = """
def name_it(module, args):
    _modules.module_path(module)
"""
hook_namespace = {"__name__": "mem_tracer.naming_torch_hook", "_modules": _modules}
exec(compile(HOOK, "<mem_tracer's forward pre-hook>", "exec"), hook_namespace)
name_it = hook_namespace["name_it"]


def read_callers_locals(module, args):
    """The naming before issue 48: the caller's f_locals read to find the module's name."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.endswith(_modules._TORCH_MODULE_FILE):
        frame = frame.f_back
    if frame is not None:
        for name, value in frame.f_locals.items():
            if value is module:
                return


def new_model():
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


# pytorch/examples' ImageNet train(): each batch in a function's local, the model an unnamed
# root called by a local. A batch is dropped when the next one rebinds the local.
def train(model, steps):
    dropped = []
    images = None
    for _ in range(steps):
        previous = weakref.ref(images) if images is not None else None
        images = torch.randn(8, 64)
        if previous is not None:
            dropped.append(previous() is None)
        output = model(images)
        output.sum().backward()
    return dropped


def loop_under(hook):
    handle = torch_module.register_module_forward_pre_hook(hook)
    try:
        model = new_model()
        dropped = train(model, 3)
        return dropped, _modules._names.get(model)
    finally:
        handle.remove()


found["dropped"], found["train: model(images)"] = loop_under(name_it)
found["dropped reading f_locals"], _ = loop_under(read_callers_locals)

# At a module's top level the frame's locals are the module's namespace: naming must neither
# copy nor clear it, so the batch lives as long as the module's global does, and no longer.
handle = torch_module.register_module_forward_pre_hook(name_it)
net = new_model()
batch = torch.randn(8, 64)
held = weakref.ref(batch)
net(batch)
found["net(batch) at top level"] = _modules._names.get(net)
found["namespace kept"] = "batch" in globals() and "net" in globals() and held() is batch
del batch
found["top-level batch died on del"] = held() is None
handle.remove()

print(json.dumps(found))
