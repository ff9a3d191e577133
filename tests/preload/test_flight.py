"""Issue 33, parts 1, 2 and 4: the flight recorder (MEMTRACE_MODE=flight; Note [The flight
recorder's file], tracer/format/records.h) and the reports the library writes itself (Note
[Reports the library writes itself], tracer/recorder/reports.cpp).

The same training loop (scripts/training_loop.py: parameters, four blocks' activations, a
peak long before the end, gradients, optimizer state, then a churn of small buffers) is traced
in full and by the flight recorder; everything the report shows at the peak, at the end and
at the first failed allocation must be the same, from a file that does not grow with the
run."""
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time

import pytest

from memtrace_testing import Build, parse_records, preloaded, report_json, run

SCRIPT = Build.root / "tests" / "preload" / "scripts" / "training_loop.py"
WINDOW = 2000  # MEMTRACE_FLIGHT_EVENTS: small, so that these runs are long by comparison


def _loop(path, mode, steps, churn, *extra, window=WINDOW, **env):
    environment = preloaded(path, MEMTRACE_MODE=mode, MEMTRACE_FLIGHT_EVENTS=window, **env)
    result = run([sys.executable, SCRIPT, Build.cuda, steps, churn, *extra], environment,
                 timeout=300)
    assert "done" in result.stdout
    assert not [line for line in result.stderr.splitlines() if line.startswith("memtrace:")], \
        result.stderr
    return path


def _table(trace, *options):
    document = report_json(trace, "--top", "0", *options)
    return document, [(row["location"], row["bytes"], row["count"])
                      for row in document["live"]["rows"]]


@pytest.fixture(scope="module")
def runs(build, tmp_path_factory):
    folder = tmp_path_factory.mktemp("flight")
    return {
        # Long enough for the file to outgrow the compaction's 256 KiB: a churn of 800 pairs a
        # step since format version 11's smaller events (Note [Events in fewer bytes]: 400 left
        # 98,648 events under 256 KiB); 400 was enough at version 8's 2.5 bytes an event (Note
        # [Times in microseconds]), 80 steps at version 7's nanoseconds.
        "full": _loop(folder / "full.bin", "full", 120, 800, 3),
        "flight": _loop(folder / "flight.bin", "flight", 120, 800, 3),
        # Long enough for the file to be compacted after the failed allocation: events on the
        # simulated card are small in the file (its addresses lie close together), and a
        # compaction waits for the file to double (Note [When the flight recorder compacts]).
        "full-oom": _loop(folder / "full-oom.bin", "full", 240, 400, 3, "oom"),
        "flight-oom": _loop(folder / "flight-oom.bin", "flight", 240, 400, 3, "oom"),
        "flight-long": _loop(folder / "flight-long.bin", "flight", 480, 800, 3),
    }


def test_the_flight_file_dropped_events_and_kept_the_peak(runs):
    summary = report_json(runs["flight"])["summary"]
    flight = summary["flight"]
    assert flight["dropped"] and flight["peak_section"], flight
    assert flight["window_events"] == WINDOW
    assert WINDOW <= flight["kept_events"] < summary["events"] / 2
    records = parse_records(runs["flight"])
    kinds = [record["kind"] for record in records if record["record"] == "section"]
    assert kinds[:2] == ["peak", "window"]  # then the frames of the kept events
    assert set(kinds[2:]) == {"frame"}


@pytest.mark.parametrize("options", [(), ("--group-by", "module"), ("--group-by", "category"),
                                     ("--group-by", "stack"), ("--frame", "user")],
                         ids=["line", "module", "category", "stack", "user"])
def test_the_peak_reads_as_in_the_full_trace(runs, options):
    full, full_rows = _table(runs["full"], *options)
    flight, flight_rows = _table(runs["flight"], *options)
    assert flight["summary"]["peak_bytes"] == full["summary"]["peak_bytes"]
    assert flight_rows == full_rows
    assert len(full_rows) >= 4


@pytest.mark.parametrize("point", ["end", "oom"])
def test_the_end_and_the_failed_allocation_read_as_in_the_full_trace(runs, point):
    suffix = "-oom" if point == "oom" else ""
    for options in [(), ("--group-by", "module"), ("--group-by", "category")]:
        full, full_rows = _table(runs["full" + suffix], "--at", point, *options)
        flight, flight_rows = _table(runs["flight" + suffix], "--at", point, *options)
        assert flight_rows == full_rows, options
        assert flight["live"]["bytes"] == full["live"]["bytes"]
    if point == "oom":
        # The failed allocation's events were dropped: its section stands for them.
        assert report_json(runs["flight-oom"])["summary"]["flight"]["oom_section"]


def test_the_run_s_counts_and_steps_are_the_full_trace_s(runs):
    full, flight = report_json(runs["full-oom"]), report_json(runs["flight-oom"])
    for key in ("events", "allocations", "frees", "failed_allocations", "allocated_bytes",
                "untraced_allocations", "peak_bytes"):
        assert flight["summary"][key] == full["summary"][key], key
    assert [device["peak_bytes"] for device in flight["devices"]] == \
        [device["peak_bytes"] for device in full["devices"]]
    full_steps, flight_steps = full["training"]["steps"], flight["training"]["steps"]
    assert len(flight_steps) == len(full_steps) == 240 + 120 + 1  # and the unfinished one
    for mine, theirs in zip(flight_steps, full_steps):
        assert (mine["step"], mine["peak_bytes"], mine["peak_phase"], mine["peak_module"]) == \
               (theirs["step"], theirs["peak_bytes"], theirs["peak_phase"], theirs["peak_module"])


def test_the_file_does_not_grow_with_the_run(runs):
    short, long = runs["flight"].stat().st_size, runs["flight-long"].stat().st_size
    full = runs["full"].stat().st_size
    # Four times the events: the flight file keeps the same window and a few bytes a step
    # (its size goes up and down between compactions, up to about three times what a
    # compaction leaves), and stays smaller than the full trace of the run a quarter as long.
    assert long < 3.5 * short, (short, long)
    assert long < full, (long, full)
    assert _table(runs["flight-long"])[1] == _table(runs["flight"])[1]


def test_the_views_at_the_peak_work_and_what_needs_every_event_is_refused(runs, tmp_path):
    trace = runs["flight"]
    report = Build.report
    run([report, "html", trace, "-o", tmp_path / "page.html"])
    assert "flight recorder" in (tmp_path / "page.html").read_text()
    run([report, "flamegraph", trace, "-o", tmp_path / "peak.svg"])
    run([report, "flamegraph", trace, "--format", "folded", "-o", tmp_path / "peak.folded"])
    full_folded = run([report, "flamegraph", runs["full"], "--format", "folded"]).stdout
    assert (tmp_path / "peak.folded").read_text() == full_folded
    run([report, "export", "pytorch", trace, "--at", "peak", "-o", tmp_path / "peak.pickle"])
    snapshot = pickle.loads((tmp_path / "peak.pickle").read_bytes())
    blocks = sum(block["size"] for segment in snapshot["segments"] for block in segment["blocks"])
    assert blocks == report_json(trace)["summary"]["peak_bytes"]
    summary = report_json(trace)["summary"]["flight"]
    before = summary["window_start_ns"] / 2e9
    for arguments, expected in [
            (["--at", f"{before:.6f}"], "is before what a flight recorder's file keeps"),
            (["--until", "stop"], "--until stop needs every event"),
            (["export", "perfetto"], "the full timeline) needs every event")]:
        command = [report, *arguments[:2], trace, *arguments[2:]] if arguments[0] == "export" \
            else [report, trace, *arguments]
        result = run(command, check=False)
        assert result.returncode == 2, result
        assert len(result.stderr.splitlines()) == 1 and expected in result.stderr, result.stderr
    # A time among the kept events reads.
    inside = (summary["window_start_ns"] + 1000) / 1e9
    run([report, trace, "--at", f"{inside:.9f}"])


def test_a_job_of_flight_recorders_reads_as_a_job(runs, tmp_path):
    # The job report over ranks' flight files (part 4): each rank's peak as in its full trace.
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, kind in enumerate(["flight", "flight-long"]):
        (folder / f"rank{rank}.bin").write_bytes(runs[kind].read_bytes())
    document = json.loads(run([Build.report, folder, "--format", "json"]).stdout)
    peaks = [rank["peak_bytes"] for rank in document["ranks"]]
    full_peak = report_json(runs["full"])["summary"]["peak_bytes"]
    assert peaks == [full_peak, full_peak]


def test_the_library_writes_the_report_of_the_failed_allocation(runs):
    text = runs["flight-oom"].with_name("flight-oom.bin.oom.txt").read_text()
    assert "an allocation failed (out of memory)" in text
    assert "The failing request: 1024.00 TiB (1125899906842624 bytes) on device 0" in text
    lines = SCRIPT.read_text().splitlines()
    oom_line = next(i for i, line in enumerate(lines, 1) if "ALLOC:oom" in line)
    assert f"training_loop.py:{oom_line} (main)" in text.split("Live when it failed")[0]
    # Not the trace's peak: the failed request's own line, and what was live by line.
    table = text.split("By line")[1].split("By nn.Module")[0]
    parameter_line = next(i for i, line in enumerate(lines, 1) if "ALLOC:parameter" in line)
    state_line = next(i for i, line in enumerate(lines, 1) if "ALLOC:state" in line)
    assert f"3.00 MiB        3  " in table and f"training_loop.py:{parameter_line}" in table
    assert f"6.00 MiB        3  " in table and f"training_loop.py:{state_line}" in table
    # The full trace's library report says the same.
    assert runs["full-oom"].with_name("full-oom.bin.oom.txt").read_text().split("By line")[1] == \
        text.split("By line")[1].replace("flight-oom.bin", "full-oom.bin")


KILLS = 8
# Allocation+free pairs after which a flight file of 3000 events has compacted at least once:
# 100,000 events of a few bytes each are well past 2 x its first size and 256 KiB.
PAIRS_PAST_COMPACTION = 50_000


def test_sigkill_at_any_moment_leaves_a_readable_flight_file(build, tmp_path):
    # Killed anywhere, a compaction included: the file reads, its counts are the program's
    # own account of what it did (carried by the sections), and it keeps the window.
    rng = random.Random(331)
    for attempt in range(KILLS):
        trace, account = tmp_path / f"k{attempt}.bin", tmp_path / f"a{attempt}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
        env.update(preloaded(trace, MEMTRACE_MODE="flight", MEMTRACE_FLIGHT_EVENTS=3000),
                   DYING_ACCOUNT=str(account))
        process = subprocess.Popen([str(build.program("dying")), "kill", "0"], env=env)
        # Past the first compaction before the random moment (it comes after about 256 KiB of
        # events: kMinimumGrowth in flight.cpp), however slow the machine (a sanitizer build
        # beside other tests took longer than the 0.3 s this waited at least before).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
                not account.exists() or account.stat().st_size < 8
                or int.from_bytes(account.read_bytes()[:8], "little") < PAIRS_PAST_COMPACTION):
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 1.2))
        process.send_signal(signal.SIGKILL)
        process.wait()
        allocations, frees = (int.from_bytes(account.read_bytes()[i:i + 8], "little")
                              for i in (0, 8))
        summary = report_json(trace)["summary"]
        assert allocations <= summary["allocations"] <= allocations + 1, (attempt, summary)
        assert frees <= summary["frees"] <= frees + 1, (attempt, summary)
        assert summary["flight"]["dropped"], attempt
        assert summary["flight"]["kept_events"] >= 3000
        assert summary["peak_bytes"] > 0
        # The window of events, the tables, and a killed writer's mapped window of zeros.
        assert trace.stat().st_size < (2 << 20) + (2 << 20)


def test_a_snapshot_on_sigusr1_while_it_runs(build, tmp_path):
    trace, account = tmp_path / "running.bin", tmp_path / "account"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update(preloaded(trace), DYING_ACCOUNT=str(account))
    process = subprocess.Popen([str(build.program("dying")), "kill", "50"], env=env)
    try:
        deadline = time.monotonic() + 20
        while not (trace.exists() and trace.stat().st_size > 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        for number in (1, 2):
            process.send_signal(signal.SIGUSR1)
            snapshot = trace.with_name(f"running.bin.snapshot-{number}.txt")
            while not snapshot.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            text = snapshot.read_text()
            assert f"memtrace snapshot {number} in process {process.pid}" in text
            assert "Live now: " in text and "By line" in text and "<no Python frame>" in text
            assert process.poll() is None  # it runs on
    finally:
        process.kill()
        process.wait()
    marks = [marker["name"] for marker in report_json(trace)["markers"]]
    assert marks == ["memtrace snapshot 1", "memtrace snapshot 2"]


def test_a_program_that_handles_the_signal_keeps_its_handler(build, tmp_path):
    # memtrace took SIGUSR1 at load (it was at its default); the program installs its own
    # afterwards, which replaces memtrace's: the program's handler runs, the program goes on.
    trace = tmp_path / "own.bin"
    script = ("import ctypes, os, signal, sys\n"
              "seen = []\n"
              "signal.signal(signal.SIGUSR1, lambda *a: seen.append(1))\n"
              "ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)\n"
              "runtime = ctypes.CDLL(None)\n"
              "p = ctypes.c_void_p()\n"
              "runtime.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4096))\n"
              "os.kill(os.getpid(), signal.SIGUSR1)\n"
              "print('handled', len(seen))\n")
    result = run([sys.executable, "-c", script, Build.cuda], preloaded(trace))
    assert "handled 1" in result.stdout
