"""mem_tracer's naming of real torch modules keeps none of the program's tensors alive (issue 48),
without a GPU: scripts/naming_torch.py runs a training loop in a function (each batch in a
local, the model an unnamed root) and a call at a module's top level, under the global forward
pre-hook's naming, on torch's CPU tensors, and sees by weakref that each batch dies when the
program drops it, and that the module's namespace is left whole.

Which interpreters: MEMTRACE_NAMING_PYTHONS ("3.10 3.12 3.13": the `pythons.naming_torch`
entry, label interpreters, under the venvs `make pythons-venvs` makes,
build/venv-torch-cuda-<version>); unset, the interpreter running pytest (the `python` entry:
the build's Python, whose torch is 2.13.0+cpu, scripts/setup.sh). No other CPU build of torch
is on this machine or its mirror (only cp311's), so the other CPythons run the CUDA build's
venvs, on CPU tensors."""
import json
import os
import sys
from pathlib import Path

import pytest

from memtrace_testing import BUILD, ROOT, run

SCRIPTS = Path(__file__).parent / "scripts"


def pythons():
    """[(version, interpreter)] this run checks."""
    wanted = os.environ.get("MEMTRACE_NAMING_PYTHONS")
    if not wanted:
        return [("%d.%d" % sys.version_info[:2], sys.executable)]
    return [(version, str(BUILD / f"venv-torch-cuda-{version}" / "bin" / "python"))
            for version in wanted.split()]


@pytest.mark.parametrize("version,python", pythons(), ids=[v for v, _ in pythons()])
def test_naming_real_modules_keeps_no_batch_alive(version, python):
    assert os.access(python, os.X_OK), f"no Python {version} with torch at {python}: make " \
                                       "pythons-venvs makes it"
    result = run([python, SCRIPTS / "naming_torch.py"], {"PYTHONPATH": str(ROOT / "python")})
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["python"] == version
    # Each batch died when the next one rebound the local, as it does untraced.
    assert found["dropped"] == [True, True]
    # The naming before issue 48 (reading the caller's f_locals) kept them: the check can fail.
    # From 3.13 f_locals is a view (PEP 667) and keeps nothing, so there it cannot.
    kept = tuple(map(int, version.split("."))) < (3, 13)
    assert found["dropped reading f_locals"] == ([False, False] if kept else [True, True])
    # Named by how the code reaches them, the function's local and the module's global.
    assert found["train: model(images)"] == "model"
    assert found["net(batch) at top level"] == "net"
    # The module-level frame's locals are its namespace: naming left it whole, and the batch
    # lived until the program deleted it, and no longer.
    assert found["namespace kept"] is True
    assert found["top-level batch died on del"] is True
