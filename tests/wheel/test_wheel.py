"""The wheel as a user gets it: `make wheel` run first thing in a clean copy of the repository
(Note [Installed as users install it] in installing.py), then installed into fresh virtual
environments in another directory (no --system-site-packages: nothing of this interpreter or
this checkout is visible there): CPython 3.12 with torch's CUDA build from PyPI, this machine's
CPU torch, and no torch."""
import importlib.metadata
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from installing import (
    MODEL,
    clean_copy,
    in_venv,
    make_venv,
    python_of,
    runs_the_product_on_the_simulated_card,
    says_its_capabilities,
    site_package,
)
from memtrace_testing import BUILD, ROOT, run

SCRIPTS = ROOT / "tests" / "python" / "scripts"
# The CUDA build of torch the wheel is proven beside: the newest release memtrace supports.
CUDA_TORCH = "torch==2.14.1"
BRIDGED = ("2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """`make wheel` in a clean copy, as its first command; the copy (and its build tree) is
    deleted before the wheel is installed anywhere."""
    work = tmp_path_factory.mktemp("wheel")
    copy = clean_copy(work / "memtrace")
    built = subprocess.run(["make", "wheel"], cwd=copy, capture_output=True, text=True,
                           timeout=2400, env={k: v for k, v in os.environ.items()
                                              if not k.startswith("MEMTRACE_")})
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    wheels = list((copy / "dist").glob("mem_tracer-*.whl"))
    assert len(wheels) == 1, wheels
    path = work / wheels[0].name
    wheels[0].rename(path)
    build_tree = str(copy / "build" / "wheel")
    run(["rm", "-rf", copy])
    return path, build_tree


def trace_a_script(bin_dir, build, cwd):
    """python -m mem_tracer run on an unmodified script, on the simulated GPU's runtime (the
    build's libcudacalls.so calls it; its device is the one the profile describes, as a
    program on a card has its card); returns the trace."""
    card = {"MEMTRACE_GPU_PROFILE": str(BUILD / "simulator" / "profiles" / "h200.json")}
    result = in_venv(bin_dir, "python", "-m", "mem_tracer", "run", "-o", cwd / "run-%p.bin",
                     "--top", "5", SCRIPTS / "unmodified.py", build.cuda, "0", cwd=cwd, env=card)
    assert "script done" in result.stdout
    traces = list(cwd.glob("run-*.bin"))
    assert len(traces) == 1
    report = in_venv(bin_dir, "memtrace-report", traces[0], cwd=cwd).stdout
    assert "unmodified.py" in report and "96.00 MiB" in report, report
    return traces[0]


def test_wheel_is_manylinux_with_its_libraries_and_without_libtorch(wheel):
    path, _ = wheel
    assert re.search(r"-py3-none-manylinux_2_\d+_x86_64\.whl$", path.name), path.name
    names = zipfile.ZipFile(path).namelist()
    bundled = [Path(name).name for name in names if name.startswith("mem_tracer.libs/")]
    for library in ("libdw", "libelf", "libspdlog", "libfmt"):
        assert any(name.startswith(library + "-") for name in bundled), (library, bundled)
    assert not [name for name in bundled if name.startswith(("libtorch", "libc10"))]
    # The bundled libraries' licenses travel with them (elfutils' is the LGPL).
    assert "mem_tracer/licenses/libdw1.txt" in names and "mem_tracer/licenses/libelf1.txt" in names
    for name in ("mem_tracer/lib/libmemtrace.so", "mem_tracer/bin/memtrace-report",
                 "mem_tracer/bin/memtrace-estimate", "mem_tracer/bin/profiles/cuda.json"):
        assert name in names
    # Every module of the package, its subpackages' too (estimator/, simulated_gpu/).
    package = ROOT / "python"
    for module in sorted(package.rglob("*.py")):
        assert module.relative_to(package).as_posix() in names, (module, names)
    # A bridge to PyTorch's allocator for every release memtrace supports, and the simulated
    # GPU: each of its libraries under the file name a CUDA program asks for, every profile.
    for release in BRIDGED:
        assert f"mem_tracer/lib/libmemtrace-torch-{release}.so" in names, names
    for library in ("libcuda.so.1", "libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13",
                    "libcudnn.so.9", "libnccl.so.2", "libnvrtc.so.13", "libcufft.so.12",
                    "libcusolver.so.12", "libcusparse.so.12", "libnvidia-ml.so.1",
                    "libmemtrace-simgpu.so"):
        assert f"mem_tracer/simulator/lib/{library}" in names, names
    profiles = {Path(name).name for name in names
                if name.startswith("mem_tracer/simulator/profiles/") and name.endswith(".json")}
    assert profiles == {path.name for path in (ROOT / "simulator" / "profiles").glob("*.json")}
    show = run([sys.executable, "-m", "auditwheel", "show", path]).stdout
    assert "manylinux_2_" in show


def test_installed_with_torch_elsewhere(wheel, build, tmp_path):
    path, build_tree = wheel
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    torch = f"torch=={importlib.metadata.version('torch')}"  # this machine's (CPU) build
    bin_dir = make_venv(sys.executable, tmp_path / "venv", path, torch)
    site = site_package(bin_dir, elsewhere)
    assert site.is_relative_to(tmp_path / "venv")

    help_text = in_venv(bin_dir, "memtrace", "--help", cwd=elsewhere).stdout
    assert "usage:" in help_text and "run" in help_text
    version = (ROOT / "VERSION").read_text().strip()
    for command in ("memtrace-report", "memtrace-estimate"):
        assert in_venv(bin_dir, command, "--version", cwd=elsewhere).stdout == f"{command} {version}\n"
    said = in_venv(bin_dir, "memtrace", "--version", cwd=elsewhere).stdout
    assert said.startswith(f"memtrace {version}\n"), said
    cpu = importlib.metadata.version("torch")
    assert f"this Python's torch: {cpu} (a CPU build: nothing on a GPU to trace)" in said, said
    assert f"memtrace-estimate: built against torch {cpu}" in said, said
    trace_a_script(bin_dir, build, elsewhere)

    model = elsewhere / "model.pt"
    in_venv(bin_dir, "python", "-c", MODEL, model, cwd=elsewhere)
    estimate = in_venv(bin_dir, "memtrace-estimate", model, "--input", "32x64",
                       cwd=elsewhere).stdout
    assert "peak allocated" in estimate and "8.27 MiB" in estimate, estimate
    # The Python API runs the same program.
    api = in_venv(bin_dir, "python", "-c", "import sys, mem_tracer; print(mem_tracer.estimate("
                  "sys.argv[1], [(32, 64)]).peak_allocated_bytes)", model, cwd=elsewhere).stdout
    assert int(api.split()[-1]) > 8 << 20

    # Relocatable: LibTorch from the torch package beside it, every other library from the
    # wheel or the system, and no path of the machine or tree that built it.
    estimator = site / "bin" / "memtrace-estimate"
    dynamic = run(["readelf", "-d", estimator]).stdout
    rpath = re.search(r"R(?:UN)?PATH.*\[(.*)\]", dynamic).group(1).split(":")
    assert rpath == ["$ORIGIN/../../torch/lib", "$ORIGIN/../../mem_tracer.libs"], rpath
    for binary in (estimator, site / "bin" / "memtrace-report", site / "lib" / "libmemtrace.so"):
        libraries = run(["ldd", binary]).stdout
        assert "not found" not in libraries, libraries
        assert build_tree.encode() not in binary.read_bytes()
    libraries = run(["ldd", estimator]).stdout
    assert f"{site}/bin/../../torch/lib/libtorch_cpu.so" in libraries, libraries


def test_installed_without_torch(wheel, build, tmp_path):
    path, _ = wheel
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bin_dir = make_venv(sys.executable, tmp_path / "venv", path)
    no_torch = in_venv(bin_dir, "python", "-c", "import torch", cwd=elsewhere, check=False)
    assert no_torch.returncode != 0

    version = in_venv(bin_dir, "python", "-c", "import mem_tracer; print(mem_tracer.__version__)",
                      cwd=elsewhere).stdout.strip()
    assert version == (ROOT / "VERSION").read_text().strip()
    trace_a_script(bin_dir, build, elsewhere)
    refused = in_venv(bin_dir, "memtrace-estimate", "model.pt", "--input", "32x64", cwd=elsewhere,
                      check=False)
    assert refused.returncode != 0
    assert refused.stderr == ("memtrace-estimate: error: memtrace-estimate needs PyTorch: "
                              "pip install torch\n")
    # Its version it says all the same (the package's, which the program shares).
    answered = in_venv(bin_dir, "memtrace-estimate", "--version", cwd=elsewhere).stdout
    assert answered == f"memtrace-estimate {version}\n"
    api = in_venv(bin_dir, "python", "-c", "import mem_tracer\ntry:\n    mem_tracer.estimate("
                  "'model.pt', [(32, 64)])\nexcept mem_tracer.MemTracerError as error:\n"
                  "    print(error)", cwd=elsewhere).stdout
    assert api == "memtrace-estimate needs PyTorch: pip install torch\n"


def estimates_with_the_torch_python_imports(bin_dir, cwd, env=None):
    """memtrace-estimate and mem_tracer.estimate() work, with the torch this Python imports."""
    model = cwd / "model.pt"
    in_venv(bin_dir, "python", "-c", MODEL, model, cwd=cwd, env=env)
    estimate = in_venv(bin_dir, "memtrace-estimate", model, "--input", "32x64", cwd=cwd,
                       env=env).stdout
    assert "peak allocated" in estimate and "8.27 MiB" in estimate, estimate
    api = in_venv(bin_dir, "python", "-c", "import sys, mem_tracer; print(mem_tracer.estimate("
                  "sys.argv[1], [(32, 64)]).peak_allocated_bytes)", model, cwd=cwd, env=env).stdout
    assert int(api.split()[-1]) > 8 << 20


def test_torch_where_python_finds_it(wheel, tmp_path):
    """Note [The torch Python imports]: torch not beside the package, but where Python finds it
    (conda's prefix is one more site-packages: not made here)."""
    path, _ = wheel
    work = tmp_path / "work"
    work.mkdir()
    # A venv over the system's site-packages, whose torch it uses: the package's RUNPATH
    # ($ORIGIN/../../torch/lib) points into the venv, where no torch is.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", tmp_path / "venv"],
                   check=True, timeout=120)
    bin_dir = tmp_path / "venv" / "bin"
    run([bin_dir / "python", "-m", "pip", "install", "-q", "--no-deps", path], timeout=600)
    assert not (site_package(bin_dir, work).parent / "torch").exists()
    estimates_with_the_torch_python_imports(bin_dir, work)

    # A user site (pip install --user) beside the system's torch.
    user = {"PYTHONUSERBASE": str(tmp_path / "user")}
    run([sys.executable, "-m", "pip", "install", "-q", "--user", "--no-deps", path], timeout=600,
        env=user)
    python_dir = Path(sys.executable).parent
    (tmp_path / "user" / "bin" / "python").symlink_to(sys.executable)
    assert str(tmp_path / "user") in in_venv(
        tmp_path / "user" / "bin", "python", "-c", "import mem_tracer; print(mem_tracer.__file__)",
        cwd=work, env={**user, "PATH": f"{tmp_path / 'user' / 'bin'}:{python_dir}:/usr/bin:/bin"}
    ).stdout
    estimates_with_the_torch_python_imports(
        tmp_path / "user" / "bin", work,
        env={**user, "PATH": f"{tmp_path / 'user' / 'bin'}:{python_dir}:/usr/bin:/bin"})

    # Another torch release first on PYTHONPATH: refused in one line, before LibTorch loads.
    other = tmp_path / "other" / "torch"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "version.py").write_text("__version__ = '2.99.0+cpu'\n")
    refused = in_venv(bin_dir, "memtrace-estimate", "model.pt", "--input", "32x64", cwd=work,
                      check=False, env={"PYTHONPATH": str(other.parent)})
    built = importlib.metadata.version("torch").split("+")[0]
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(
        f"memtrace-estimate: error: memtrace-estimate was built against torch {built}, and this "
        f"Python imports torch 2.99.0+cpu ({other}): pip install torch=={built}, or reinstall "
        "mem_tracer from source to build it against 2.99.0"), refused.stderr


def test_installed_beside_torch_cuda_on_python_3_12(wheel, tmp_path):
    """What users have: a CUDA build of torch (from PyPI), another Python than the one that
    built the wheel; the three ways in trace tensors on the simulated card."""
    path, _ = wheel
    work = tmp_path / "work"
    work.mkdir()
    bin_dir = make_venv(python_of("3.12"), tmp_path / "venv", path, CUDA_TORCH, "pytest")
    says_its_capabilities(bin_dir, work, CUDA_TORCH.split("==")[1])
    runs_the_product_on_the_simulated_card(bin_dir, work)
