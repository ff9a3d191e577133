"""memtrace installed the way a user installs it (Note [Installed as users install it]): from a
clean copy of the repository, into fresh virtual environments outside it, with no memtrace
variable set and nothing of this checkout on any path; then the product's main promises run
there on the simulated card.

Note [Installed as users install it]
A build tree finds everything beside it: the bridges to PyTorch's allocator, the simulated GPU,
the estimator's LibTorch. An install has only what the wheel or `pip install .` put in it. So the
tests of the install (tests/wheel) start from a copy of the repository as a clone holds it (the
tracked and unignored files: no build/, no venv), build there with the commands the README
gives (`make wheel`, `pip install .`), install into fresh venvs of other Pythons with a CUDA
build of torch from PyPI, and run, from a folder outside the copy, with a PATH of the venv and
the system only: `memtrace run --gpu h100` on a training script (FITS, at the level of tensors,
its peak PyTorch's own requested peak to the byte), `pytest --memtrace-gpu l4` failing a test
over its budget at its line, and LD_PRELOAD of the installed library tracing tensors."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from memtrace_testing import ROOT, installed_pythons, run

# A training step whose peak PyTorch states itself: an MLP, AdamW, three steps.
TRAIN = """\
import torch

model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                            torch.nn.Linear(2048, 512)).cuda()
optimizer = torch.optim.AdamW(model.parameters())
for step in range(3):
    batch = torch.randn(256, 512, device="cuda")
    loss = model(batch).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
print("requested", stats["requested_bytes.all.peak"], "allocated",
      stats["allocated_bytes.all.peak"], "reserved", stats["reserved_bytes.all.peak"])
"""

# A small model saved as TorchScript, for memtrace-estimate (its arguments: the file).
MODEL = ("import sys, torch; torch.jit.script(torch.nn.Sequential(torch.nn.Linear(64, 256), "
         "torch.nn.ReLU(), torch.nn.Linear(256, 10))).save(sys.argv[1])")

# A test over its GPU memory budget: 64 MiB at line 7 against 16 MiB.
BUDGET_TEST = """\
import pytest
import torch


@pytest.mark.limit_gpu_memory("16 MiB")
def test_over_its_budget():
    activations = torch.empty(16 << 20, device="cuda")
    assert activations.numel() == 16 << 20
"""


def python_of(version):
    """The CPython `version` ("3.12") this machine has; fails saying so."""
    major, minor = (int(part) for part in version.split("."))
    found = installed_pythons().get((major, minor))
    if found is None:
        raise AssertionError(f"no CPython {version} on this machine (pyenv install {version}): "
                             "the install is tested under it")
    return Path(found)


def clean_copy(destination):
    """The repository as a fresh clone holds it, at `destination`: the files git tracks and
    those it does not ignore (what a commit of this tree would hold), nothing built."""
    listed = run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                  "--exclude-standard"]).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() or source.is_symlink():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return destination


def user_environment(bin_dir, **extra):
    """What a user's shell in that venv has: its bin/ first on PATH, no variable of the build or
    of this test run (no MEMTRACE_*, no LD_PRELOAD, no PYTHONPATH)."""
    return {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8", **extra}


def in_venv(bin_dir, *command, cwd, check=True, timeout=300, env=None):
    """Runs a command as a user of that environment would."""
    result = subprocess.run([str(c) for c in command], env=user_environment(bin_dir, **(env or {})),
                            cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}\nstdout:\n{result.stdout}\n"
                             f"stderr:\n{result.stderr}")
    return result


def make_venv(python, directory, *requirements, timeout=1200):
    """A fresh virtual environment of `python` with `requirements` installed; returns its bin/."""
    subprocess.run([str(python), "-m", "venv", str(directory)], check=True, timeout=120)
    bin_dir = directory / "bin"
    if requirements:
        in_venv(bin_dir, "python", "-m", "pip", "install", "-q", *requirements, cwd=directory,
                timeout=timeout)
    return bin_dir


def site_package(bin_dir, cwd):
    return Path(in_venv(bin_dir, "python", "-c", "import mem_tracer, os; "
                        "print(os.path.dirname(mem_tracer.__file__))", cwd=cwd).stdout.strip())


def report_json(bin_dir, trace, cwd):
    return json.loads(in_venv(bin_dir, "memtrace-report", trace, "--format", "json", "--top",
                              "20", cwd=cwd).stdout)


def pytorch_figures(stdout):
    """PyTorch's own peaks, as TRAIN prints them."""
    line = next(line for line in stdout.splitlines() if line.startswith("requested "))
    words = line.split()
    return dict(zip(words[0::2], map(int, words[1::2])))


def says_its_capabilities(bin_dir, cwd, release):
    """`memtrace --version` names `release` among the bridges, this Python's torch as traced
    from inside its allocator, and the simulated cards."""
    said = in_venv(bin_dir, "memtrace", "--version", cwd=cwd).stdout
    assert re.search(rf"this Python's torch: {re.escape(release)}(\+\w+)? \(tensors traced from "
                     r"inside its caching allocator\)", said), said
    bridges = next(line for line in said.splitlines() if "inside PyTorch's allocator" in line)
    for supported in ("2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1"):
        assert supported in bridges, said
    assert "h100-80gb" in said and "l4" in said, said
    return said


def runs_the_product_on_the_simulated_card(bin_dir, work):
    """The three ways in, installed, on the simulated card: `memtrace run --gpu`, the pytest
    plugin, LD_PRELOAD of the installed library."""
    (work / "train.py").write_text(TRAIN)
    ran = in_venv(bin_dir, "memtrace", "run", "--gpu", "h100", "-o", work / "run.bin",
                  "train.py", cwd=work, timeout=600)
    verdict = [line for line in ran.stderr.splitlines() if line.startswith("== memtrace: FITS")]
    assert len(verdict) == 1 and "tensors" in verdict[0], ran.stderr
    assert "segments" not in verdict[0] and "no bridge" not in ran.stderr, ran.stderr
    figures = pytorch_figures(ran.stdout)
    report = report_json(bin_dir, work / "run.bin", work)
    assert report["summary"]["level"] == "tensor", report["summary"]
    device = report["devices"][0]
    assert device["peak_bytes"] == figures["requested"], (device, figures)
    assert device["torch_reserved_peak_bytes"] == figures["reserved"], (device, figures)
    assert report["live"]["rows"][0]["location"].startswith("train.py:"), report["live"]

    (work / "test_budget.py").write_text(BUDGET_TEST)
    tested = in_venv(bin_dir, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "--memtrace-gpu", "l4", "test_budget.py", cwd=work, check=False,
                     timeout=600)
    assert tested.returncode == 1, tested.stdout + tested.stderr
    assert "over the limit of 16.00 MiB" in tested.stdout, tested.stdout
    assert "test_budget.py:7 (test_over_its_budget)" in tested.stdout, tested.stdout

    library = site_package(bin_dir, work) / "lib" / "libmemtrace.so"
    preloaded = in_venv(bin_dir, "python", "-m", "mem_tracer.simulated_gpu", "h100", "--",
                        "python", "train.py", cwd=work, timeout=600,
                        env={"LD_PRELOAD": str(library), "MEMTRACE_OUTPUT": str(work / "pre.bin")})
    figures = pytorch_figures(preloaded.stdout)
    assert "no bridge" not in preloaded.stderr, preloaded.stderr
    report = report_json(bin_dir, work / "pre.bin", work)
    assert report["summary"]["level"] == "tensor", report["summary"]
    assert report["devices"][0]["peak_bytes"] == figures["requested"], (report["devices"], figures)
