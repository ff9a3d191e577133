"""The recorder's Python stacks, under every CPython we support (3.10-3.13; CI runs them all; and
3.13t, the free-threaded build, where it is installed),
against the simulated GPU's runtime called as PyTorch calls CUDA: with the GIL released around the
call (ctypes.CDLL), from the op's own thread (Note [Python frames without the GIL],
tracer/recorder/python_stack.cpp). One case keeps the GIL held (ctypes.PyDLL), as a tensor's
free from its Python dealloc does.

What these tests assume of the real platform: that PyTorch's Python bindings release the GIL
around each op and call the allocator on the calling thread (its generated dispatch wrappers;
seen on an H200, docs/gpu-record-h200.md), and that autograd runs a GPU's backward on a thread
of its own that never ran Python (Note [Stacks lent to threads without Python])."""
import json
import re
import subprocess
from pathlib import Path

import pytest

from memtrace_testing import SUPPORTED_PYTHONS as SUPPORTED
from memtrace_testing import allocation_stacks, installed_pythons, preloaded, report_json, run

HERE = Path(__file__).parent
SCRIPTS = HERE / "scripts"


def _installed_free_threaded():
    """The free-threaded CPythons installed here (python3.13t), which have layouts of their own:
    tested where present, not required (pyenv builds them from source: 3.13.15t was)."""
    found = {}
    for candidate in sorted(Path("/root/.pyenv/versions").glob("3.*/bin/python3.*t")):
        match = re.fullmatch(r"python3\.(\d+)t", candidate.name)
        if match and (3, int(match.group(1))) in SUPPORTED:
            found.setdefault(int(match.group(1)), str(candidate))
    return list(found.values())


PYTHONS = installed_pythons()
SUPPORTED_PYTHONS = [PYTHONS.get(version, f"python{version[0]}.{version[1]}")
                     for version in SUPPORTED] + _installed_free_threaded()
OLDER_PYTHONS = [path for version, path in sorted(PYTHONS.items()) if version < (3, 10)]


def tagged_lines(script, tag):
    """{name: line number} of the lines marked `# TAG:name` in a script."""
    lines = {}
    for number, line in enumerate(script.read_text().splitlines(), start=1):
        for name in re.findall(rf"# {tag}:(\w+)", line):
            lines[name] = number
    return lines


def test_every_supported_python_is_installed():
    # The tests below run under each of them; CI must not pass by finding fewer.
    missing = [f"{major}.{minor}" for major, minor in SUPPORTED if (major, minor) not in PYTHONS]
    assert not missing, f"CPython {', '.join(missing)} not installed (pyenv install)"


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_layout_table_is_each_cpythons_own(python, tmp_path):
    # python_layouts.h against the headers of the CPython itself: every offset the recorder
    # reads without the GIL (tests/preload/probes/python_layout_probe.c).
    include = run([python, "-c", "import sysconfig; print(sysconfig.get_path('include'))"]).stdout.strip()
    probe = tmp_path / "probe"
    run(["cc", "-Wall", "-Werror", f"-I{HERE.parent.parent}", f"-I{include}", f"-I{include}/internal",
         HERE / "probes" / "python_layout_probe.c", "-o", probe])
    version = run([python, "-c", "import sys, sysconfig; print(sys.version_info[1], end='');"
                   "print('t' if sysconfig.get_config_var('Py_GIL_DISABLED') else '')"]).stdout.strip()
    assert run([probe]).stdout.strip() == f"layout ok 3.{version}"


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
@pytest.mark.parametrize("gil", ["released", "held"])
def test_python_lines_are_attributed(build, tmp_path, python, gil):
    trace = tmp_path / "layers.bin"
    script = SCRIPTS / "layers.py"
    result = run([python, script, build.cuda] + (["gil"] if gil == "held" else []), preloaded(trace))
    assert "memtrace:" not in result.stderr
    tagged = tagged_lines(script, "ALLOC")
    # Innermost frame: every allocation is made in cuda_alloc.
    innermost = report_json(trace)
    assert innermost["summary"]["peak_bytes"] == (16 + 6 + 2) << 20
    assert [(r["function"], r["count"]) for r in innermost["live"]["rows"]] == [("cuda_alloc", 5)]
    # The caller's lines: --group-by stack names the whole path; check the tagged lines.
    stacks = report_json(trace, "--group-by", "stack", "--top", "0")["live"]["rows"]
    by_line = {}
    for row in stacks:
        caller = row["location"].split("; ")[-2]  # the frame that called cuda_alloc
        by_line[int(caller.split(":")[1].split(" ")[0])] = row["bytes"]
    assert by_line == {tagged["weights"]: 16 << 20, tagged["activation"]: 6 << 20,
                       tagged["output"]: 2 << 20}
    assert all(row["location"].endswith("(cuda_alloc)") for row in stacks)
    # JSON keeps the absolute path (the text shows it relative to the working directory).
    assert innermost["live"]["rows"][0]["file"] == str(script)


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_direct_walk_without_the_gil_is_the_public_apis_with_it(build, tmp_path, python):
    # The same program walked two ways: directly, with the GIL released around every call
    # (as under PyTorch), and through the public C API, with the GIL held (which that walker
    # needs). Every stack must be the same, frame for frame.
    reports, walkers = [], []
    for walker, gil in (("auto", []), ("api", ["gil"])):
        trace = tmp_path / f"{walker}.bin"
        result = run([python, SCRIPTS / "walk.py", build.cuda] + gil,
                     preloaded(trace, MEMTRACE_PYTHON_WALKER=walker))
        walkers.append(result.stdout.split()[0])
        reports.append(run([build.report, trace, "--group-by", "stack", "--top", "0", "--at", "end",
                            "--format", "csv"]).stdout)
    assert reports[0] == reports[1]
    # The generator, the comprehension, the coroutine and the finalizer: four stacks, the
    # first two under 120 frames of recursion.
    assert len(reports[0].splitlines()) == 1 + 4
    assert max(row.count("(deep)") for row in reports[0].splitlines()) == 121
    assert walkers == ["python-walker=direct", "python-walker=public-api"]


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_two_threads_each_event_on_its_own_threads_line(build, tmp_path, python):
    # 100,000 allocations: a worker thread and the main thread allocate at once, each with the
    # GIL released, while the other runs Python (objects, cycles, forced collections).
    trace = tmp_path / "threads.bin"
    script = SCRIPTS / "two_threads.py"
    result = run([python, script, build.cuda, 25000], preloaded(trace), timeout=240)
    threads = {int(number): name for name, number in
               (line.split() for line in result.stdout.splitlines())}
    calls = tagged_lines(script, "CALL")
    inner = tagged_lines(script, "ALLOC")["both"]
    allocations = allocation_stacks(trace)
    assert len(allocations) == 50000 and sorted(threads.values()) == ["main", "worker"]
    wrong = [(thread, size, frames[-2:]) for thread, size, frames in allocations
             if [line for _, line, _ in frames[-2:]] != [calls[threads[thread]], inner]
             or size != (4096 if threads[thread] == "worker" else 8192)]
    assert not wrong, wrong[:5]


def traced_script(build, tmp_path, python, name, tag):
    """Runs scripts/NAME.py under LD_PRELOAD: its allocations (allocation_stacks) and the lines
    it marks `# TAG:...`."""
    trace = tmp_path / f"{name}.bin"
    run([python, SCRIPTS / f"{name}.py", build.cuda], preloaded(trace))
    return allocation_stacks(trace), tagged_lines(SCRIPTS / f"{name}.py", tag)


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_unwinding_and_callbacks_name_their_lines(build, tmp_path, python):
    allocations, tagged = traced_script(build, tmp_path, python, "unwinding", "ALLOC")
    named = {size: frames[-2][1] for _, size, frames in allocations}
    assert named == {1 << 20: tagged["finally"], 2 << 20: tagged["handler"],
                     3 << 20: tagged["exit"], 4 << 20: tagged["callback"]}


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_a_fork_while_tracing_names_the_childs_lines(build, tmp_path, python):
    pattern = tmp_path / "fork-%p.bin"
    script = SCRIPTS / "forking.py"
    result = run([python, script, build.cuda], preloaded(pattern))
    child = int(result.stdout.split()[1])
    tagged = tagged_lines(script, "ALLOC")
    parent_file, = [p for p in tmp_path.iterdir() if p.name != f"fork-{child}.bin"]
    lines = lambda trace: [(size, frames[-2][1] if frames else None)  # noqa: E731
                           for _, size, frames in allocation_stacks(trace)]
    assert lines(parent_file) == [(1 << 20, tagged["before"]), (3 << 20, tagged["parent"])]
    # The child's file opens with what it inherited (live, untraced: no stack), then its own.
    assert lines(tmp_path / f"fork-{child}.bin") == [(1 << 20, None), (2 << 20, tagged["child"])]


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_a_lent_stack_names_a_thread_without_python(build, tmp_path, python):
    allocations, lend = traced_script(build, tmp_path, python, "lend", "LEND")
    stacks = {size: frames for _, size, frames in allocations}
    assert stacks[6 << 20] == []  # after the stack was taken back: nothing to name it
    file, line, function = stacks[5 << 20][-1]
    assert (Path(file).name, line, function) == ("lend.py", lend["call"], "backward")


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_code_objects_made_and_dropped_name_their_own_allocations(build, tmp_path, python):
    # Note [Code objects that die]: 4 x 500 functions (code.replace, exec of a new function, a
    # closure of a new factory, a lambda), each called once to allocate, then dropped; the next
    # one often takes the dead one's address. Before: 1,999 of 2,000 named after another.
    trace = tmp_path / "churn.bin"
    result = run([python, SCRIPTS / "code_churn.py", build.cuda, 500], preloaded(trace))
    expected = [(file, int(line), function) for file, line, function in
                (text.rsplit(" ", 2) for text in result.stdout.splitlines())]
    named = [tuple(frames[-1]) if frames else None for _, _, frames in allocation_stacks(trace)]
    assert len(expected) == len(named) == 2000
    wrong = [(got, want) for got, want in zip(named, expected) if got != want]
    assert not wrong, (len(wrong), wrong[:5])


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_a_thread_without_the_gil_never_walks_the_holders_frames(build, tmp_path, python):
    # The public C API's walker, after a sub-interpreter was made: 3.10 and 3.11 then answer
    # PyGILState_Check() with 1 on every thread. Before: up to a sixth of the allocations of
    # threads that never ran Python were named by the GIL holder's line (and 3.10 crashed).
    trace = tmp_path / "subinterpreter.bin"
    run([python, SCRIPTS / "subinterpreter.py", build.cuda, 300],
        preloaded(trace, MEMTRACE_PYTHON_WALKER="api"))
    allocations = allocation_stacks(trace)
    assert len(allocations) == 300
    assert [frames for _, _, frames in allocations if frames] == []


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_a_fork_during_a_lend_leaves_it_in_the_parent(build, tmp_path, python):
    # Note [Stacks lent to threads without Python]: the lender is not in the child (a worker
    # thread forked), so a thread without Python there borrows nothing; the parent still does.
    pattern = tmp_path / "lend-%p.bin"
    result = run([python, SCRIPTS / "fork_during_lend.py", build.cuda], preloaded(pattern))
    child = int(result.stdout.split()[1])
    lend = tagged_lines(SCRIPTS / "fork_during_lend.py", "LEND")["parent"]
    parent_file, = [p for p in tmp_path.iterdir() if p.name != f"lend-{child}.bin"]
    stacks = lambda trace: {size: [line for _, line, _ in frames]  # noqa: E731
                            for _, size, frames in allocation_stacks(trace)}
    assert stacks(parent_file)[1 << 20][-1] == lend
    assert stacks(tmp_path / f"lend-{child}.bin")[2 << 20] == []


@pytest.mark.parametrize("python", OLDER_PYTHONS or ["python3.9"])
def test_an_older_python_says_so_once(build, tmp_path, python):
    # No frame layout is known for it: allocations made with the GIL released get no Python
    # frame (never a guess); 3.9's made with it held are named through the public API (older
    # ones lack it); one line on stderr says why.
    trace = tmp_path / "old.bin"
    code = ("import ctypes, sys\n"
            "ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)\n"
            "with_gil, without_gil = ctypes.PyDLL(None), ctypes.CDLL(None)\n"
            "for i in range(3):\n"
            "    for runtime, size in ((with_gil, 1 << 20), (without_gil, 2 << 20)):\n"
            "        runtime.cudaMalloc(ctypes.byref(ctypes.c_void_p()), ctypes.c_size_t(size))\n")
    result = run([python, "-c", code, build.cuda], preloaded(trace))
    version = run([python, "-c", "import sys; print(sys.version.split()[0])"]).stdout.strip()
    warnings = [line for line in result.stderr.splitlines() if line.startswith("memtrace:")]
    assert len(warnings) == 1 and f"CPython {version}" in warnings[0] and "3.10-3.13" in warnings[0]
    rows = report_json(trace)["live"]["rows"]
    if version.startswith("3.9."):
        assert [(r["location"], r["bytes"]) for r in rows] == [
            ("<no Python frame>", 6 << 20), ("<string>:6 (<module>)", 3 << 20)]
    else:
        assert [(r["location"], r["bytes"]) for r in rows] == [("<no Python frame>", 9 << 20)]


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_a_stack_like_the_last_is_still_its_own(build, tmp_path, python):
    # Note [Python stacks flat in depth]: a walk stops where the rest of the chain is its last
    # walk's. Every allocation's stack, on two threads at once, is what the program saw: a callee
    # pushed again at the same address under a caller on another line, recursion to varying
    # depths (past MEMTRACE_PYTHON_DEPTH: the innermost 256 kept; 240 frames deep under a caller
    # whose line changes: compared through more than one block of the comparison's unrolled loop,
    # Note [The chain compared a frame at a time], on every interpreter and in every process, not
    # only where the frames' addresses happen to let the walk meet the innermost ones again:
    # stack_reuse.py's DEEP says why), a generator and a coroutine resumed from other callers, a
    # freed frame's memory taken by another function's.
    trace = tmp_path / "reuse.bin"
    result = run([python, SCRIPTS / "stack_reuse.py", build.cuda, 3],
                 preloaded(trace, MEMTRACE_PYTHON_DEPTH=256), timeout=240)
    expected = {}
    for line in result.stdout.splitlines():
        thread, size, frames = line.split(" ", 2)
        stack = [tuple(frame) for frame in json.loads(frames)][-256:]
        expected.setdefault(int(thread), []).append((int(size), stack))
    recorded = {}
    for thread, size, frames in allocation_stacks(trace):
        recorded.setdefault(thread, []).append((size, [tuple(frame) for frame in frames]))
    assert sorted(len(events) for events in expected.values()) == [3 * 38, 3 * 38]  # 38 allocations a round
    assert recorded.keys() == expected.keys()
    for thread, events in expected.items():
        wrong = [(index, want[0], got[1][-3:], want[1][-3:])
                 for index, (got, want) in enumerate(zip(recorded[thread], events)) if got != want]
        assert len(recorded[thread]) == len(events) and not wrong, (len(wrong), wrong[:3])
