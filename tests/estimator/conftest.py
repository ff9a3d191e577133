"""Shared helpers for the estimator's end-to-end tests: where the tool is, how to run it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPOSITORY = Path(__file__).resolve().parents[2]


def estimator_binary():
    build = Path(os.environ.get("MEMTRACE_BUILD_DIR", REPOSITORY / "build"))
    binary = build / "bin" / "memtrace-estimate"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: build first (make build)")
    return binary


def run_estimator(*arguments):
    """Runs memtrace-estimate; returns the CompletedProcess (text)."""
    return subprocess.run(
        [str(estimator_binary()), *map(str, arguments)], capture_output=True, text=True, timeout=300
    )


def estimate_json(*arguments):
    """Runs memtrace-estimate with --format json and returns the parsed document."""
    result = run_estimator(*arguments, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


BAD_INPUT = 2  # memtrace-estimate's exit status for input it refuses


def on_the_card(program, **environment):
    """What `program` (Python source) prints last, as JSON, run on the simulated H100 (PyTorch's
    own CUDA code around the simulated kernels and allocator) with this checkout's package and
    `environment`'s variables beside; fails with its stderr where it does not exit 0."""
    sys.path.insert(0, str(REPOSITORY / "python"))
    from mem_tracer import simulated_gpu

    beside = dict(os.environ, **environment)
    beside["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY / "python"),
                                                         beside.get("PYTHONPATH")]))
    build = os.environ.get("MEMTRACE_BUILD_DIR")
    if build:  # the build ctest names
        beside.setdefault("MEMTRACE_SIMULATOR_DIR", f"{build}/simulator")
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         env=simulated_gpu.environment("h100", base=beside), timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def assert_bad_input(result, *fragments):
    """memtrace-estimate refused its input: exit 2, one line on stderr naming what is wrong
    (each of `fragments` in it; never an internal error), nothing on stdout."""
    assert result.returncode == BAD_INPUT, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memtrace-estimate: error: "), lines[0]
    assert "internal error" not in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
