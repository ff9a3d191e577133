"""Real programs run under LD_PRELOAD=libmemtrace.so on the simulated GPU's runtime and driver, and the
trace they leave read back with memtrace-report."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memtrace_testing import (events, live_and_peak, parse_records, preloaded, program_account,
                              recorded_events, report_json, run)

SCRIPTS = Path(__file__).parent / "scripts"


def _traces(folder):
    """The traces in `folder`: not the reports the library writes beside them when an
    allocation fails (TRACE.oom.txt: Note [Reports the library writes itself])."""
    return [path for path in folder.iterdir() if not path.name.endswith(".txt")]


# How the simulated runtime reaches the driver (MEMTRACE_GPU_RUNTIME_DRIVER: Note [The runtime
# over the driver] in simulator/runtime/memory.cpp): through cuGetProcAddress (CUDA's runtime
# since 11.4) or the PLT (up to 11.3). Either way the driver's hooks see the runtime's nested calls.
RUNTIME_DRIVER_WAYS = ["proc-address", "link"]


@pytest.mark.parametrize("driver_way", RUNTIME_DRIVER_WAYS)
def test_every_entry_point_is_recorded_once_in_order(build, tmp_path, driver_way):
    trace = tmp_path / "sequence.bin"
    result = run([build.program("sequence")],
                 preloaded(trace, MEMTRACE_GPU_MEMORY=10**9,
                           MEMTRACE_GPU_RUNTIME_DRIVER=driver_way))
    expected, _ = program_account(result.stdout)
    recorded = recorded_events(trace)
    # The simulated runtime's cudaMalloc calls the driver's cuMemAlloc_v2, a hook too (found through
    # cuGetProcAddress or bound through the PLT): the recursion guard must keep those nested
    # calls out (one event per program call, the runtime's).
    assert [r[:4] for r in recorded] == expected
    devices = [r[4] for r in recorded]
    apis = [r[1] for r in recorded]
    # cudaSetDevice(1) around the two driver allocations and the driver free.
    assert [d for d, a in zip(devices, apis) if a.startswith("cuMem")] == [1, 1, 1]
    assert set(d for d, a in zip(devices, apis) if not a.startswith("cuMem")) == {0}


def test_report_peak_matches_the_program(build, tmp_path):
    trace = tmp_path / "sequence.bin"
    result = run([build.program("sequence")], preloaded(trace, MEMTRACE_GPU_MEMORY=10**9))
    live, peak = live_and_peak(program_account(result.stdout)[0])
    report = report_json(trace)
    assert report["summary"]["peak_bytes"] == peak
    assert report["summary"]["end_bytes"] == live
    assert report["summary"]["failed_allocations"] == 1
    assert report["summary"]["allocations"] == 6 and report["summary"]["frees"] == 4
    assert report["summary"]["ended_cleanly"]
    names = {d["device"]: d["name"] for d in report["devices"]}
    assert names == {0: "NVIDIA H200", 1: "NVIDIA H200"}  # the tests' simulated card, twice
    oom = report_json(trace, "--at", "oom")
    assert oom["live"]["bytes"] == 1000 * 0 + 4096 + (3 << 20) + 512 + 2048


def test_nothing_is_written_without_preload(build, tmp_path):
    trace = tmp_path / "none.bin"
    run([build.program("sequence")], {"MEMTRACE_OUTPUT": str(trace)})
    assert not trace.exists()


def test_threads_every_event_is_accounted_for(build, tmp_path):
    trace = tmp_path / "threads.bin"
    result = run([build.program("threads")], preloaded(trace))
    said = dict(line.split() for line in result.stdout.splitlines())
    report = report_json(trace)
    summary = report["summary"]
    assert summary["allocations"] == int(said["allocations"])
    assert summary["frees"] == int(said["frees"])
    assert summary["unmatched_frees"] == 0
    assert summary["end_bytes"] == int(said["live_bytes"]) == int(said["library_current"])
    # The library's own counter and the report agree on the exact peak.
    assert summary["peak_bytes"] == int(said["library_peak"])
    threads = {r["thread"] for r in parse_records(trace) if r["record"] == "context"}
    assert len(threads) == 8


def test_killed_writer_leaves_a_readable_trace(build, tmp_path):
    trace = tmp_path / "killed.bin"
    env = preloaded(trace)
    env = {**os.environ, **env}
    process = subprocess.Popen([str(build.program("killed"))], env=env, stdout=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the flusher writes at least every 100 ms
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    report = report_json(trace)
    assert report["summary"]["allocations"] > 1000
    assert not report["summary"]["ended_cleanly"]
    # Never more than 16 allocations live, all of 4096..7168 bytes.
    assert report["summary"]["peak_bytes"] <= 16 * 7168
    text = run([build.report, trace]).stdout
    assert "no end mark" in text or "partial chunk" in text


def test_fork_child_writes_its_own_file(build, tmp_path):
    pattern = tmp_path / "fork-%p.bin"
    result = run([build.program("forking")], preloaded(pattern))
    parent_pid = int(re.search(r"parent (\d+)", result.stdout).group(1))
    child_pid = int(re.search(r"child (\d+)", result.stdout).group(1))
    parent = events(tmp_path / f"fork-{parent_pid}.bin")
    child = events(tmp_path / f"fork-{child_pid}.bin")
    assert [(e["record"], e["size"]) for e in parent] == [("alloc", 1 << 20), ("alloc", 4 << 20)]
    assert [(e["record"], e.get("size"), e["traced"]) for e in child] == [
        ("alloc", 1 << 20, False),  # inherited from the parent: live, untraced
        ("alloc", 2 << 20, True), ("free", 2 << 20, True), ("alloc", 3 << 20, True)]


def test_fork_without_pid_in_the_name(build, tmp_path):
    trace = tmp_path / "fork.bin"
    result = run([build.program("forking")], preloaded(trace))
    child_pid = int(re.search(r"child (\d+)", result.stdout).group(1))
    assert [e["size"] for e in events(trace)] == [1 << 20, 4 << 20]
    assert [e["size"] for e in events(Path(f"{trace}.{child_pid}"))] == [1 << 20, 2 << 20, 2 << 20, 3 << 20]


def test_a_second_process_does_not_overwrite_a_live_trace(build, tmp_path):
    # A traced Python process that starts a traced child with the same MEMTRACE_OUTPUT.
    trace = tmp_path / "shared.bin"
    code = ("import ctypes, subprocess, sys\n"
            "ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)\n"
            "rt = ctypes.CDLL(None); p = ctypes.c_void_p()\n"
            "rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(12345))\n"
            "child = subprocess.run([sys.argv[2]], capture_output=True)\n"
            "print(child.returncode)\n")
    result = run([sys.executable, "-c", code, build.cuda, build.program("sequence")],
                 preloaded(trace))
    assert result.stdout.strip() == "0"
    assert [e["size"] for e in events(trace)] == [12345]
    others = [p for p in _traces(tmp_path) if p.name.startswith("shared.bin.")]
    assert len(others) == 1 and len(events(others[0])) == 11


RANK_ENVIRONMENT = {"RANK": 5, "WORLD_SIZE": 8, "LOCAL_RANK": 1, "LOCAL_WORLD_SIZE": 4,
                    "GROUP_RANK": 1, "TORCHELASTIC_RESTART_COUNT": 2,
                    "TORCHELASTIC_RUN_ID": "job/7 a"}


def test_a_rank_names_its_file_and_says_which_rank_it_is(build, tmp_path):
    # What torchrun tells each worker (Note [A job's ranks]); the job id's '/' and ' ' are
    # not kept in a file name.
    pattern = tmp_path / "%j-r%r-w%w-l%l-g%g-a%a-%p.bin"
    result = run([build.program("sequence")], preloaded(pattern, MEMTRACE_GPU_MEMORY=10**9,
                                                          **RANK_ENVIRONMENT))
    (trace,) = _traces(tmp_path)
    pid = re.fullmatch(r"job_7_a-r5-w8-l1-g1-a2-(\d+)\.bin", trace.name).group(1)
    records = parse_records(trace)
    assert records[0]["record"] == "process" and records[0]["pid"] == pid
    assert {k: v for k, v in records[1].items() if k not in ("words",)} == {
        "record": "rank", "rank": "5", "world_size": "8", "local_rank": "1",
        "local_world_size": "4", "group_rank": "1", "restart_count": "2", "job": "job/7 a"}
    assert len(events(trace)) == len(program_account(result.stdout)[0])


def test_a_restarted_rank_writes_a_new_file_and_a_lone_process_says_no_rank(build, tmp_path):
    pattern = tmp_path / "rank%r-attempt%a.bin"
    for attempt in (0, 1):
        run([build.program("sequence")], preloaded(pattern, MEMTRACE_GPU_MEMORY=10**9,
                                                   **{**RANK_ENVIRONMENT,
                                                      "TORCHELASTIC_RESTART_COUNT": attempt}))
    assert sorted(p.name for p in _traces(tmp_path)) == ["rank5-attempt0.bin", "rank5-attempt1.bin"]
    # Without torchrun's variables: no rank record, and "x" for what is unknown.
    run([build.program("sequence")], preloaded(tmp_path / "alone-%r-%%.bin",
                                               MEMTRACE_GPU_MEMORY=10**9))
    records = parse_records(tmp_path / "alone-x-%.bin")
    assert "rank" not in [record["record"] for record in records]


def test_process_that_never_allocates_writes_no_file(build, tmp_path):
    trace = tmp_path / "quiet.bin"
    run(["/bin/true"], preloaded(trace))
    assert not trace.exists()


def test_cpp_exceptions_unwind_with_native_stacks_on(build, tmp_path):
    trace = tmp_path / "exceptions.bin"
    result = run([build.program("exceptions")], preloaded(trace, MEMTRACE_STACKS="all"))
    assert result.stdout.strip() == "caught 100"
    recorded = events(trace)
    assert len([e for e in recorded if e["record"] == "alloc"]) == 300
    assert all(e["native"] > 0 for e in recorded if e["record"] == "alloc")
    assert any(r["record"] == "module" for r in parse_records(trace))


def test_cudart_loaded_rtld_local_is_found(build, tmp_path):
    trace = tmp_path / "local.bin"
    result = run([build.program("dlopen_local"), build.workload], preloaded(trace))
    assert result.stdout.strip() == "workload 0"
    assert [(e["record"], e.get("size")) for e in events(trace)] == [
        ("alloc", 1 << 20), ("alloc", 5000), ("free", 1 << 20)]


def test_native_stacks_name_the_calling_functions(build, tmp_path):
    trace = tmp_path / "native.bin"
    run([build.program("native_stacks")], preloaded(trace, MEMTRACE_STACKS="native"))
    rows = report_json(trace)["live"]["rows"]
    assert [(r["location"].split(" ")[:2], r["bytes"], r["count"]) for r in rows] == [
        (["[native]", "allocateLayerWeights"], 4 << 20, 4),
        (["[native]", "allocateScratch"], 64 << 10, 1)]
    stack = report_json(trace, "--group-by", "stack")["live"]["rows"][0]["location"]
    frames = [frame.split(" ")[0] for frame in stack.split("; ")]
    assert frames[-3:] == ["main", "buildLayer", "allocateLayerWeights"]


def test_stacks_none_records_events_without_stacks(build, tmp_path):
    trace = tmp_path / "none.bin"
    run([sys.executable, SCRIPTS / "layers.py", build.cuda], preloaded(trace, MEMTRACE_STACKS="none"))
    recorded = events(trace)
    assert len(recorded) == 12 and all(e["pystack"] == 0 and e["native"] == 0 for e in recorded)
    assert report_json(trace)["live"]["rows"][0]["location"] == "<no stack>"


def test_full_device_warns_once_and_the_program_goes_on(build):
    # /dev/full opens fine and fails every write with ENOSPC, the file header's first.
    result = run([build.program("threads")], preloaded("/dev/full"))
    assert "allocations 40000" in result.stdout
    warnings = [l for l in result.stderr.splitlines() if l.startswith("memtrace:")]
    assert len(warnings) == 1 and "cannot open the trace file /dev/full" in warnings[0]


FILE_SIZE_LIMIT = 60_000


def _limit_file_size():
    import resource
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def test_write_failure_midway_warns_once_and_keeps_what_was_written(build, tmp_path):
    trace = tmp_path / "limited.bin"
    env = {**os.environ, **preloaded(trace)}
    process = subprocess.Popen([str(build.program("killed"))], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_limit_file_size)
    try:
        assert process.stdout.readline().strip() == "ready"
        # The writer fills the file up to the limit, then fails: the chunk that does not fit
        # is not left half-written (Note [Only whole chunks reach the file]).
        # Once the write fails the file stops growing: wait until it has stopped for 0.5 s.
        deadline, last_size, still_since = time.monotonic() + 20, -1, time.monotonic()
        while time.monotonic() < deadline:
            size = trace.stat().st_size
            if size != last_size:
                last_size, still_since = size, time.monotonic()
            elif size > FILE_SIZE_LIMIT // 2 and time.monotonic() - still_since > 0.5:
                break
            time.sleep(0.05)
        assert process.poll() is None, "the program must go on after the failed write"
    finally:
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate()
    warnings = [l for l in stderr.splitlines() if l.startswith("memtrace:")]
    assert len(warnings) == 1 and "cannot write the trace file" in warnings[0], stderr
    assert trace.stat().st_size <= FILE_SIZE_LIMIT
    summary = report_json(trace)["summary"]
    # What the 60 kB held is there, read whole. How many events that is depends on how many
    # were written through (a chunk each, about 30 bytes an event, in a file's first 100 ms)
    # rather than buffered (about 5): under ASan on a loaded machine most are, and the 60 kB
    # hold about 1000 allocations and their frees; buffered, several times more.
    assert summary["allocations"] > 500 and summary["cut_offset"] == 0


def test_unwritable_path_warns_once_and_the_program_goes_on(build, tmp_path):
    result = run([build.program("sequence")], preloaded(tmp_path / "missing" / "x.bin"))
    assert len(program_account(result.stdout)[0]) == 11
    warnings = [l for l in result.stderr.splitlines() if l.startswith("memtrace:")]
    assert len(warnings) == 1 and "cannot open the trace file" in warnings[0]


def test_autostart_off_waits_for_the_api(build, tmp_path):
    trace = tmp_path / "manual.bin"
    run([build.program("sequence")], preloaded(trace, MEMTRACE_AUTOSTART=0))
    assert not trace.exists()


@pytest.mark.parametrize("conf", [None, "max_split_size_mb:128", "backend:native",
                                  "backend:cudaMallocAsync", "expandable_segments:True"])
def test_pytorch_allocator_configuration_is_never_changed(build, tmp_path, conf):
    # Note [PyTorch's own allocator]: whatever the program set (or did not), it reads it back
    # as it set it; a cudaMalloc made by the program itself (not by PyTorch's libc10_cuda.so) is
    # one allocation as asked.
    trace = tmp_path / "conf.bin"
    env = preloaded(trace)
    if conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    code = ("import ctypes, os, sys\n"
            "ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)\n"
            "rt = ctypes.CDLL(None); p = ctypes.c_void_p()\n"
            "rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4096))\n"
            "print(os.environ.get('PYTORCH_CUDA_ALLOC_CONF'))\n")
    result = run([sys.executable, "-c", code, build.cuda], env)
    assert result.stdout.strip() == str(conf)
    levels = {r["level"] for r in parse_records(trace) if r["record"] == "context"}
    assert levels == {"tensor"}


def test_pluggable_entry_points_without_preload(build, tmp_path):
    trace = tmp_path / "api.bin"
    result = run([build.program("api_control"), build.library, trace])
    said = result.stdout
    assert "annotate_before_start -1 tracing has not started" in said
    assert "zero_size (nil)" in said
    # 10000 live before the start, 30000 freed before it: the library's peak saw both.
    assert "current 12000 peak 40000 current0 10000 peak1 2000" in said
    assert "peak_after_reset 12000" in said
    # The pool keeps its memory; allocation ran in relaxed capture mode (2).
    assert f"threshold0 {2**64 - 1} threshold1 {2**64 - 1} capture_mode 2" in said
    assert "trims 1" in said and "close 0" in said
    recorded = events(trace)
    assert [(e["record"], e.get("size"), e["traced"]) for e in recorded] == [
        ("alloc", 10000, False), ("alloc", 1000, True), ("alloc", 2000, True),
        ("free", 1000, True), ("alloc", 500, False), ("free", 500, False),
        ("free", 2000, False), ("free", 10000, False)]
    markers = [(r["kind"]) for r in parse_records(trace) if r["record"] == "marker"]
    assert markers == ["tracing-started", "phase-begin", "phase-end", "annotation",
                       "tracing-stopped", "trace-closed"]
    report = report_json(trace)
    assert report["summary"]["peak_bytes"] == 13000
    # Python stacks were on, but this C++ program has no Python: one group without frames.
    assert [(r["location"], r["bytes"]) for r in report["live"]["rows"]] == [
        ("untraced", 10000), ("<no Python frame>", 3000)]
    assert [m["name"] for m in report["markers"]] == ["forward", "", "after forward"]
