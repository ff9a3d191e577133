"""Every PyTorch internal mem_tracer uses resolves on the installed torch (Note [PyTorch
internals], python/mem_tracer/_torch_internals.py), and the package names no other.

ctest runs this under each torch the project has: `python` (the default interpreter's torch,
2.13.0+cpu) and `python.torch_internals.cuda_build` (the CUDA build's venv, 2.14.1+cu130)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from mem_tracer import _torch_internals  # noqa: E402
from mem_tracer.errors import MemTracerError  # noqa: E402

# A private name of torch: a module or attribute path with a part that starts with "_"
# (torch._C, torch.utils._pytree, torch.testing._internal, ._execution_engine,
# getattr(_torch._C, "_current_graph_task_id"), ...).
# `_torch` (the package's lazy alias of torch) counts as torch, and so does a private name read
# with getattr from torch or one of its modules.
PRIVATE = re.compile(r"(?<![\w.])_?torch(\.[A-Za-z]\w*)*(\._(?!_)\w+|, [\"']_(?!_))|"
                     r"\._(cdata|schema|overloadpacket|"
                     r"execution_engine|pre_forward|verify_param_shape_across_processes)\b")


def test_the_installed_torch_is_supported():
    import torch
    assert _torch_internals.supported(), f"torch {torch.__version__}: update SUPPORTED"


def test_every_internal_resolves_on_this_torch():
    assert _torch_internals.check_all() == []


def test_only_the_internals_module_names_a_private_name():
    package = ROOT / "python" / "mem_tracer"
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "_torch_internals.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if PRIVATE.search(code) and not code.strip().startswith(('"', "'")):
                found.append(f"{path.relative_to(package)}:{number}: {line.strip()}")
    # Prose (docstrings) may name them; code may not.
    found = [entry for entry in found if not _in_docstring(package, entry)]
    assert found == []


def _in_docstring(package, entry):
    name, number = entry.split(":")[:2]
    lines = (package / name).read_text().splitlines()[:int(number)]
    return sum(line.count('"""') for line in lines[:-1]) % 2 == 1


@pytest.mark.parametrize(("version", "inside"), [
    ("2.10.1", False), ("2.11.0+cu130", True), ("2.13.0+cpu", True), ("2.14.1+cu130", True),
    ("2.15.0.dev20270101", False), ("3.0.0", False)])
def test_the_gate_reads_releases(version, inside):
    assert _torch_internals.supported(version) is inside


def test_the_gate_refuses_an_unsupported_release_in_one_line(monkeypatch):
    import torch
    monkeypatch.setattr(torch, "__version__", "2.15.0")
    monkeypatch.delenv(_torch_internals.UNTESTED_VARIABLE, raising=False)
    with pytest.raises(MemTracerError) as error:
        _torch_internals.require("estimate(training=True)")
    assert str(error.value) == (
        "estimate(training=True) uses PyTorch internals checked on torch 2.11 to 2.14, and torch "
        "2.15.0 is installed: install torch 2.11 to 2.14, or set MEMTRACE_UNTESTED_TORCH=1 to "
        "try this release")
    monkeypatch.setenv(_torch_internals.UNTESTED_VARIABLE, "1")
    _torch_internals.require("estimate(training=True)")


def test_a_fresh_process_imports_the_package_without_torch_internals_at_import():
    """Importing mem_tracer touches no internal (the tracer works without torch)."""
    code = ("import sys; import mem_tracer; "
            "assert 'torch._subclasses.fake_tensor' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
