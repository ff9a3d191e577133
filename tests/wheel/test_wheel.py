"""The wheel as a user gets it: built and repaired by tools/build_wheel.sh, its build tree
deleted, then installed into fresh virtual environments in another directory (no
--system-site-packages: nothing of this interpreter or this checkout is visible there), one
with torch and one without."""
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from memtrace_testing import ROOT, run

SCRIPTS = ROOT / "tests" / "python" / "scripts"
MODEL = ("import sys, torch; torch.jit.script(torch.nn.Sequential(torch.nn.Linear(64, 256), "
         "torch.nn.ReLU(), torch.nn.Linear(256, 10))).save(sys.argv[1])")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    build_tree = work / "build"
    # --no-build-isolation: scikit-build-core from this interpreter, so nothing is downloaded.
    built = run([ROOT / "tools" / "build_wheel.sh", work / "dist", "--no-build-isolation",
                 "-C", f"build-dir={build_tree}"], timeout=1500)
    path = Path(built.stdout.strip().splitlines()[-1])
    assert path.is_file() and (build_tree / "CMakeCache.txt").is_file()
    shutil.rmtree(build_tree)
    return path, str(build_tree)


def make_venv(directory, *requirements):
    """A fresh virtual environment with `requirements` installed; returns its bin/."""
    subprocess.run([sys.executable, "-m", "venv", directory], check=True, timeout=120)
    bin_dir = directory / "bin"
    run([bin_dir / "python", "-m", "pip", "install", "-q", *requirements], timeout=900)
    return bin_dir


def in_venv(bin_dir, *command, cwd, check=True, timeout=300, env=None):
    """Runs a command as a user of that environment would: its bin/ first on PATH, and no
    variable of the build or of this test run (but `env`'s)."""
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"),
           "LANG": "C.UTF-8", **(env or {})}
    result = subprocess.run([str(c) for c in command], env=env, cwd=cwd, capture_output=True,
                            text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}\nstdout:\n{result.stdout}\n"
                             f"stderr:\n{result.stderr}")
    return result


def site_package(bin_dir, cwd):
    return Path(in_venv(bin_dir, "python", "-c", "import mem_tracer, os; "
                        "print(os.path.dirname(mem_tracer.__file__))", cwd=cwd).stdout.strip())


def trace_a_script(bin_dir, build, cwd):
    """python -m mem_tracer run on an unmodified script, against the test CUDA runtime;
    returns the trace."""
    result = in_venv(bin_dir, "python", "-m", "mem_tracer", "run", "-o", cwd / "run-%p.bin",
                     "--top", "5", SCRIPTS / "unmodified.py", build.cudart, "0", cwd=cwd)
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
    show = run([sys.executable, "-m", "auditwheel", "show", path]).stdout
    assert "manylinux_2_" in show


def test_installed_with_torch_elsewhere(wheel, build, tmp_path):
    path, build_tree = wheel
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    torch = f"torch=={importlib.metadata.version('torch')}"  # this machine's (CPU) build
    bin_dir = make_venv(tmp_path / "venv", path, torch)
    site = site_package(bin_dir, elsewhere)
    assert site.is_relative_to(tmp_path / "venv")

    help_text = in_venv(bin_dir, "memtrace", "--help", cwd=elsewhere).stdout
    assert "usage:" in help_text and "run" in help_text
    version = (ROOT / "VERSION").read_text().strip()
    for command in ("memtrace", "memtrace-report", "memtrace-estimate"):
        assert in_venv(bin_dir, command, "--version", cwd=elsewhere).stdout == f"{command} {version}\n"
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
    bin_dir = make_venv(tmp_path / "venv", path)
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
