"""The pytest plugin (mem_tracer.pytest_plugin, issue 44): sessions of pytest run by pytester in
processes of their own, on PyTorch's CUDA build and the simulated card the plugin puts them on
(--memtrace-gpu PROFILE, Note [The library before the first CUDA allocation])."""
import importlib.util
import os
import re
import sys

import pytest
from memtrace_testing import BUILD, ROOT, Build, simulated_environment

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "mem_tracer.pytest_plugin")


@pytest.fixture
def session(pytester, monkeypatch, build):
    """Runs pytest with the plugin in a process of its own; the environment is memtrace's
    build, with nothing of memtrace's preloaded (the plugin must do that itself)."""
    for name in list(os.environ):
        if name.startswith("MEMTRACE_") or name in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF",
                                                    "PYTEST_XDIST_WORKER"):
            monkeypatch.delenv(name)
    # Whatever PYTHONPATH already holds stays after the package (a pytest-xdist beside it).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(ROOT / "python"), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MEMTRACE_LIBRARY", str(Build.library))
    monkeypatch.setenv("MEMTRACE_BIN_DIR", str(Build.report.parent))
    monkeypatch.setenv("MEMTRACE_SIMULATOR_DIR", str(BUILD / "simulator"))

    def run(*arguments, plugin=True):
        return pytester.runpytest_subprocess(*(PLUGIN if plugin else ()), "-p", "no:cacheprovider",
                                             *arguments, timeout=120)
    return run


LIMITS = '''
import functools
import os

import pytest
import torch

kept = []


@pytest.mark.limit_gpu_memory("100 MiB")
def test_over():
    big = torch.empty(200 << 20, dtype=torch.uint8, device="cuda")  # the line named
    small = torch.empty(50 << 20, dtype=torch.uint8, device="cuda")
    del big, small


@pytest.mark.limit_gpu_memory("1 GiB")
def test_under():
    torch.empty(10 << 20, dtype=torch.uint8, device="cuda")


@pytest.mark.limit_gpu_leaks("0 B")
def test_leaks():
    kept.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))  # the leaking line


@functools.lru_cache
def cache(name):
    return torch.empty(6 << 20, dtype=torch.uint8, device="cuda")  # the cache's line


@pytest.mark.limit_gpu_leaks("0 B")
def test_fills_a_cache():
    cache("first")


@pytest.mark.limit_gpu_leaks("0 B", warmups=1)
def test_fills_a_cache_in_its_warmup():
    cache("second")


@pytest.mark.limit_gpu_memory("2 pineapples")
def test_bad_size():
    pass


def test_reads_a_value():
    ones = torch.ones(1 << 20, device="cuda")
    torch.empty(int(ones.sum().item()) + 1024, device="cuda")


def test_forks():
    child = os.fork()
    if child == 0:
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
'''


def line_of(path, text):
    """The number of the line of `path` that holds `text`."""
    lines = path.read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def size_of(text):
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def test_limits_fail_naming_the_limit_the_figures_and_the_lines(pytester, session):
    source = pytester.makepyfile(test_limits=LIMITS)
    result = session("--memtrace-gpu", "h200", "-rA")
    output = result.stdout.str()
    result.assert_outcomes(passed=4, failed=3, errors=1)
    outcomes = {name: outcome for outcome, name in
                re.findall(r"^(PASSED|FAILED|ERROR) test_limits\.py::(\w+)", output, re.MULTILINE)}
    assert outcomes == {"test_over": "FAILED", "test_under": "PASSED", "test_leaks": "FAILED",
                        "test_fills_a_cache": "FAILED",
                        "test_fills_a_cache_in_its_warmup": "PASSED",
                        "test_bad_size": "ERROR", "test_reads_a_value": "PASSED",
                        "test_forks": "PASSED"}, output

    # Over the limit: the peak, the limit, and the lines live at the peak, largest first.
    assert ("GPU memory peaked at 250.00 MiB, over the limit of 100.00 MiB "
            "(limit_gpu_memory('100 MiB'))") in output
    big, small = line_of(source, "the line named"), line_of(source, "small = ")
    assert re.search(rf"200\.00 MiB  test_limits\.py:{big} \(test_over\)\n +50\.00 MiB  "
                     rf"test_limits\.py:{small} \(test_over\)", output), output
    # A tensor kept in a global, and a cache filled on the checked call: the line of each.
    assert re.search(r"GPU memory leaked: 3\.00 MiB was still allocated after the test returned, "
                     r"over the limit of 0 B \(limit_gpu_leaks\('0 B'\)\)", output), output
    assert f"3.00 MiB  test_limits.py:{line_of(source, 'the leaking line')} (test_leaks)" in output
    assert f"6.00 MiB  test_limits.py:{line_of(source, 'the cache')} (cache)" in output
    # A limit that does not parse: one line for that test, and the session went on.
    assert re.search(r"^limit_gpu_memory: '2 pineapples' is not a size \(write 24GiB, 80GB or a "
                     r"number of bytes\)$", output, re.MULTILINE), output

    # The summary: the tests by peak, each with its largest line at the peak.
    summary = output[output.index("memtrace: GPU memory by test on a simulated NVIDIA H200"):]
    size = r"[\d.]+ [KMG]iB|\d+ B"
    ranked = re.findall(rf"^ *({size}) +({size})  test_limits\.py::(\w+)$",
                        summary, re.MULTILINE)
    assert len(ranked) == 7 and ranked[0] == ("250.00 MiB", "0 B", "test_over"), summary
    peaks = [size_of(peak) for peak, _, _ in ranked]
    assert peaks == sorted(peaks, reverse=True), summary
    # The peak is what the card holds: test_leaks' 3 MiB, kept in a global, counts in every
    # test after it, where it is said to be from before the test's call.
    assert {name: leaked for _, leaked, name in ranked}["test_leaks"] == "3.00 MiB"
    warmed = summary[summary.index("::test_fills_a_cache_in_its_warmup"):].splitlines()[1]
    assert warmed.split() == ["9.00", "MiB", "live", "before", "the", "test's", "call",
                              "(untraced)"], summary
    assert (f"200.00 MiB test_limits.py:{big} (test_over)\n{' ' * 25}"
            f"50.00 MiB test_limits.py:{small} (test_over)\n") in summary, summary
    # The test that read a value on the simulated card is said to have.
    reads = summary[summary.index("::test_reads_a_value"):].splitlines()[1]
    assert "(read device values: shapes may follow zeros)" in reads, summary
    # A test that forks is said to have; its child's memory is its own process's.
    forks = summary[summary.index("::test_forks"):].splitlines()[1]
    assert forks.endswith("(forked: its child's memory is not counted)"), summary
    assert "forked" not in summary.replace(forks, ""), summary
    # Note [PyTorch's counters beside each test]: each test that raised PyTorch's peak had the
    # trace's peak equal to it.
    assert "PyTorch's own counters differ" not in output, output


OUTSIDE = '''
import ctypes

import torch


def test_allocates_beside_pytorch():
    kept = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    cudart = ctypes.CDLL("libcudart.so.13")  # the simulated card's, already loaded
    pointer = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(64 << 20)) == 0
    more = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")  # PyTorch's peak rises
    assert cudart.cudaFree(pointer) == 0
    del kept, more


def test_only_pytorch():
    torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
'''


def test_a_test_whose_trace_is_not_pytorchs_peak_is_said(pytester, session):
    # Note [PyTorch's counters beside each test]: 64 MiB from the runtime's cudaMalloc are in
    # the trace's peak (the preloaded hooks record them) and not in PyTorch's requested bytes.
    pytester.makepyfile(test_outside=OUTSIDE)
    result = session("--memtrace-gpu", "h200")
    result.assert_outcomes(passed=2)
    output = result.stdout.str()
    said = output[output.index("memtrace: PyTorch's own counters differ from the trace"):]
    lines = [line for line in said.splitlines()[1:] if line.startswith("test_outside.py")]
    assert lines == [
        f"test_outside.py::test_allocates_beside_pytorch: device 0: PyTorch's requested peak "
        f"{24 << 20:,} B, the trace's {88 << 20:,} B (memory allocated outside PyTorch's "
        f"allocator)"], said


FITS_AN_H100 = '''
import torch


def test_24_gib():
    weights = torch.empty(24 << 30, dtype=torch.uint8, device="cuda")
    assert torch.cuda.get_device_properties(0).total_memory > weights.numel()
'''


def test_a_test_that_fits_an_h100_fails_on_an_l4(pytester, session):
    path = pytester.makepyfile(test_card=FITS_AN_H100)
    h100 = session("--memtrace-gpu", "h100")
    h100.assert_outcomes(passed=1)
    assert re.search(r"memtrace: GPU memory by test on a simulated NVIDIA H100 80GB HBM3 "
                     r"\(79\.\d\d GiB\)", h100.stdout.str()), h100.stdout.str()
    assert re.search(r"^ +24\.00 GiB +0 B  test_card\.py::test_24_gib$", h100.stdout.str(),
                     re.MULTILINE), h100.stdout.str()
    pytester.makeini("[pytest]\nmemtrace_gpu = l4\n")  # the ini option, as --memtrace-gpu
    l4 = session()
    l4.assert_outcomes(failed=1)
    output = l4.stdout.str()
    assert "torch.OutOfMemoryError" in output
    assert "memtrace: GPU memory by test on a simulated NVIDIA L4 (22.49 GiB)" in output
    said = ("ran out of memory on the 22.49 GiB card: asked for 24.00 GiB at "
            f"test_card.py:{line_of(path, 'torch.empty(24')} (test_24_gib), 0 B live")
    assert f"Captured memtrace call -\n{said}\n" in re.sub(r"-+\n", "-\n", output), output
    assert f"({said})" in output  # in the summary


def test_memtrace_alone_keeps_the_card_the_session_was_started_on(pytester, session,
                                                                 monkeypatch):
    # Started on a simulated H100 (as `memtrace run --gpu h100 -- pytest` does), without
    # libmemtrace.so: --memtrace adds it in front and keeps the card's libraries.
    path = pytester.makepyfile(test_card=FITS_AN_H100)
    simulated = simulated_environment({}, "h100")
    for name in ("LD_PRELOAD", "MEMTRACE_GPU_PROFILE", "MEMTRACE_GPU_COUNT"):
        monkeypatch.setenv(name, simulated[name])
    result = session("--memtrace")
    result.assert_outcomes(passed=1)
    output = result.stdout.str()
    assert re.search(r"memtrace: GPU memory by test on a simulated NVIDIA H100 80GB HBM3 "
                     r"\(79\.\d\d GiB\)", output), output
    line = line_of(path, "torch.empty(24")
    assert f"24.00 GiB test_card.py:{line} (test_24_gib)" in output, output


def test_an_unknown_profile_is_one_line(pytester, session):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = session("--memtrace-gpu", "h1000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert errors == [("ERROR: memtrace: no GPU profile 'h1000' (there are: a100-40gb, "
                       "a100-80gb, h100-80gb, h200, l4, rtx-4090; or give a profile file)")
                      ], result.stderr.str()
    assert "test_nothing" not in result.stdout.str()


PLAIN = '''
import os

import pytest


def test_passes():
    print("LD_PRELOAD", os.environ.get("LD_PRELOAD"))


def test_fails():
    assert 1 + 1 == 3


@pytest.mark.skip(reason="skipped")
def test_skipped():
    pass
'''


def test_a_session_without_the_flag_is_untouched(pytester, session):
    pytester.makepyfile(test_plain=PLAIN)

    def normalized(result):
        return re.sub(r" in [\d.]+s", " in Ts", result.stdout.str())

    without = session("-rA", "-s", plugin=False)
    loaded = session("-rA", "-s")
    without.assert_outcomes(passed=1, failed=1, skipped=1)
    loaded.assert_outcomes(passed=1, failed=1, skipped=1)
    assert normalized(loaded) == normalized(without)
    assert "LD_PRELOAD None" in loaded.stdout.str()
    assert "memtrace" not in loaded.stdout.str()
    # With limits in it, they are said not to have been checked, and nothing else changes.
    pytester.makepyfile(test_marked='''
import pytest


@pytest.mark.limit_gpu_memory("1 B")
def test_marked():
    pass
''')
    marked = session("test_marked.py", "--strict-markers")
    marked.assert_outcomes(passed=1)
    assert ("memtrace: 1 test(s) have GPU memory limits that were not checked (run pytest with "
            "--memtrace, or --memtrace-gpu PROFILE)") in marked.stdout.str()
    # The training fixture cannot give figures without tracing: one line says so.
    pytester.makepyfile(test_fixture="def test_steps(memtrace_training):\n    pass\n")
    fixture = session("test_fixture.py")
    fixture.assert_outcomes(errors=1)
    assert re.search(r"^memtrace_training needs a session that traces: run pytest with "
                     r"--memtrace, or --memtrace-gpu PROFILE$", fixture.stdout.str(),
                     re.MULTILINE), fixture.stdout.str()


def over_the_limit(megabytes):
    return f'''
import pytest
import torch


@pytest.mark.limit_gpu_memory("100 MiB")
def test_over():
    torch.empty({megabytes} << 20, dtype=torch.uint8, device="cuda")


def test_under():
    torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
'''


def test_each_xdist_worker_traces_its_own_tests(pytester, session):
    if importlib.util.find_spec("xdist") is None:
        pytest.fail(f"pytest-xdist is not installed where {sys.executable} finds it: "
                    "make cuda-torch-venv installs it")
    pytester.makepyfile(test_first=over_the_limit(200), test_second=over_the_limit(300))
    result = session("--memtrace-gpu", "h200", "-p", "xdist", "-n", "2", "--dist", "loadfile")
    output = result.stdout.str()
    result.assert_outcomes(passed=2, failed=2)
    assert "created: 2/2 workers" in output, output
    # Each file failed on a worker of its own, which traced it: the workers inherit the
    # preloaded environment the controller was executed again with, and are not themselves.
    workers = re.findall(r"^\[(gw\d)\] linux", output, re.MULTILINE)
    assert sorted(workers) == ["gw0", "gw1"], output
    for name, megabytes in (("first", 200), ("second", 300)):
        line = line_of(pytester.path / f"test_{name}.py", f"torch.empty({megabytes} <<")
        assert f"{megabytes}.00 MiB  test_{name}.py:{line} (test_over)" in output, output
    # The controller gathers every worker's figures into one summary.
    summary = output[output.index("memtrace: GPU memory by test"):]
    ranked = re.findall(r"^ +(\S+ \S+) +\S+ \S+  (test_\w+\.py::\w+)$", summary, re.MULTILINE)
    assert ranked[:2] == [("300.00 MiB", "test_second.py::test_over"),
                          ("200.00 MiB", "test_first.py::test_over")], summary
    assert sorted(ranked[2:]) == [("1.00 MiB", "test_first.py::test_under"),
                                  ("1.00 MiB", "test_second.py::test_under")], summary


TRAINING = '''
import torch


def test_steps(memtrace_training):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    inputs = torch.randn(64, 1024, device="cuda")
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    with memtrace_training(model) as training:
        for _ in range(3):
            model(inputs).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    print("FIGURES", training)
    assert [step.number for step in training.steps] == [1, 2, 3]
    assert all(step.finished for step in training.steps)
    # AdamW's two moments, created by the first step and never again: the same bytes at every
    # step's peak, twice the parameters'.
    for step in training.steps:
        assert step.categories["parameter"] == parameters
        assert step.categories["optimizer_state"] == 2 * parameters
    assert training.steps[1].peak_bytes <= training.steps[0].peak_bytes
    assert training.peak_bytes == max(step.peak_bytes for step in training.steps)
    assert training.categories_at_peak["input"] == inputs.numel() * inputs.element_size()
    with memtrace_training(model) as again:  # a second block has its own steps
        model(inputs).square().mean().backward()
        optimizer.step()
    assert [step.number for step in again.steps] == [4]
'''


def test_the_training_fixture_gives_each_steps_figures(pytester, session):
    pytester.makepyfile(test_training=TRAINING)
    result = session("--memtrace-gpu", "h200", "-rA")
    result.assert_outcomes(passed=1)
    output = result.stdout.str()
    assert "FIGURES Training(peak_bytes=" in output
    # The summary's line of the module table at the test's peak (Note [The module table]): its
    # 3 largest rows, largest first, the model's Linear layers (their parameters, gradients and
    # AdamW's state) first; then how many more rows the table has.
    summary = output[output.index("memtrace: GPU memory by test"):]
    modules = re.search(r"^\s+by module: (.+)$", summary, re.M)
    assert modules, summary
    rows = re.findall(r"(?:^|, )(.+?) [\d.]+ [KMG]iB \((\d+) %\)", modules[1])
    shares = [int(share) for _, share in rows]
    assert len(rows) == 3 and shares == sorted(shares, reverse=True) and sum(shares) <= 100, rows
    assert rows[0][0] == "module[Linear]" and shares[0] >= 40, rows
    assert re.search(r", \d+ more$", modules[1]), modules[1]
