"""Naming an unnamed root module by how its caller reaches it keeps none of the caller's locals
alive (Note [Naming a module without its caller's locals] in python/mem_tracer/_modules.py),
under every CPython we support: on 3.10 to 3.12, reading a function frame's f_locals keeps a
snapshot of them until the function returns, and a training loop kept its first batch for the
whole epoch (issue 48). No torch: scripts/naming.py calls a stand-in Module."""
import json
from pathlib import Path

import pytest

from memtrace_testing import ROOT, SUPPORTED_PYTHONS, installed_pythons, run

SCRIPTS = Path(__file__).parent / "scripts"
PYTHONS = installed_pythons()

# {the call, as scripts/naming.py writes it: the name its module is given}
NAMES = {
    "model(images)": "model",
    "model(**inputs)": "model",
    "model(1, scale=2)": "model",
    "model(...) over three lines": "model",
    "criterion(model(1), 2)": "model",
    "self.encoder(x)": "encoder",  # the attribute of the calling module (a LightningModule)
    "self.model(x)": "model",  # the attribute of an object that is no module (a Trainer)
    "models[0](1)": "Layer",  # a subscript: its class
    "list(map(model, [1]))": "Layer",  # the call calls `list`, which is not the module
    "model(1 if flag else 2)": "model",
    "net(1) at top level": "net",
    "decoder(1), a global": "decoder",
    "at_top[0](1) at top level": "Encoder",
}


@pytest.mark.parametrize("version", SUPPORTED_PYTHONS, ids=lambda version: "%d.%d" % version)
def test_naming_keeps_no_local_alive_and_names_the_callee(version):
    python = PYTHONS.get(version)
    assert python, f"CPython {version[0]}.{version[1]} is not installed (pyenv install): " \
                   "this test runs under each CPython the package supports"
    result = run([python, SCRIPTS / "naming.py"], {"PYTHONPATH": str(ROOT / "python")})
    found = json.loads(result.stdout.splitlines()[-1])
    # The batch a function held while it called the model died when it rebound the local, as
    # it does untraced.
    assert found.pop("first_batch_died") is True
    expected = dict(NAMES)
    if version < (3, 11):
        # No source positions: the bytecode walk does not cross the argument's jumps.
        expected["model(1 if flag else 2)"] = "Layer"
    assert found == expected
