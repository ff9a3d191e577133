"""How mem_tracer names an unnamed root module by its caller (Note [Naming a module without
its caller's locals] in python/mem_tracer/_modules.py), without torch: a stand-in Module whose
call names it from a file that ends as torch's module.py does, as the package's forward
pre-hook does from inside torch's Module.__call__. Prints what it found as one JSON line:
{case: the name given}, and whether the first batch of a training loop died at once.

    python naming.py  (with the package on PYTHONPATH)
"""
import json
import weakref

from mem_tracer import _modules

# torch.nn.Module as far as the naming reads it: children in _modules, parameters in
# _parameters, and __call__ going through _wrapped_call_impl and _call_impl, in a file whose
# name ends as torch's own does (the frames the naming passes over).
STAND_IN = '''
class Module:
    def __init__(self):
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_parameters", {})

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def _call_impl(self, *args, **kwargs):
        module_path(self)  # what the forward pre-hook does (mem_tracer._modules._enter)
        return self.forward(*args, **kwargs)

    def _wrapped_call_impl(self, *args, **kwargs):
        return self._call_impl(*args, **kwargs)

    __call__ = _wrapped_call_impl
'''
namespace = {"module_path": _modules.module_path}
exec(compile(STAND_IN, "/stand-in/torch/nn/modules/module.py", "exec"), namespace)
Module = namespace["Module"]


class Layer(Module):
    def forward(self, x, scale=1):
        return None  # holds nothing of its input


class Encoder(Layer):
    pass


class Batch:
    """A batch a loop holds (a tensor in a real one): it can be referenced weakly."""


def name_of(module):
    return _modules._names.get(module)


found = {}


# pytorch/examples' ImageNet train(): the batch in a local, the model called by a local.
def train(model):
    images = Batch()
    first = weakref.ref(images)
    output = model(images)
    images = Batch()  # the next iteration's batch
    found["first_batch_died"] = first() is None
    return output


# Each case's module is a new one, the last one gone (del): two roots alive under one name are
# told apart by their class (model[Layer]).
network = Layer()
train(network)
found["model(images)"] = name_of(network)
del network


def keywords(model):
    inputs = {"x": 1}
    return model(**inputs)  # transformers' Trainer.compute_loss


network = Layer()
keywords(network)
found["model(**inputs)"] = name_of(network)
del network


def one_keyword(model):
    return model(1, scale=2)


network = Layer()
one_keyword(network)
found["model(1, scale=2)"] = name_of(network)
del network


def spread_over_lines(model):
    return model(
        1,
        scale=2,
    )


network = Layer()
spread_over_lines(network)
found["model(...) over three lines"] = name_of(network)
del network


def nested(model, criterion):
    return criterion(model(1), 2)


network = Layer()
nested(network, lambda output, target: None)
found["criterion(model(1), 2)"] = name_of(network)
del network


class LitModel(Module):
    """A LightningModule: a module whose training_step is called as a method, never itself."""

    def __init__(self):
        super().__init__()
        self.encoder = Encoder()

    def training_step(self, x):
        return self.encoder(x)


lit = LitModel()
lit.training_step(1)
found["self.encoder(x)"] = name_of(lit.encoder)
del lit


class Trainer:
    """A loop's owner that is no module, holding the model as an attribute."""

    def __init__(self, model):
        self.model = model

    def step(self, x):
        return self.model(x)


trainer = Trainer(Encoder())
trainer.step(1)
found["self.model(x)"] = name_of(trainer.model)
del trainer


def subscript(models):
    return models[0](1)


models = [Layer()]
subscript(models)
found["models[0](1)"] = name_of(models[0])
del models


def through_map(model):
    return list(map(model, [1]))


network = Layer()
through_map(network)
found["list(map(model, [1]))"] = name_of(network)
del network


def conditional_argument(model, flag):
    return model(1 if flag else 2)


network = Layer()
conditional_argument(network, True)
found["model(1 if flag else 2)"] = name_of(network)
del network

net = Encoder()
net(1)  # at the module's top level
found["net(1) at top level"] = name_of(net)
del net

decoder = Layer()


def global_callee():
    return decoder(1)


global_callee()
found["decoder(1), a global"] = name_of(decoder)
decoder = None

at_top = [Encoder()]
at_top[0](1)
found["at_top[0](1) at top level"] = name_of(at_top[0])
del at_top

print(json.dumps(found))
