"""Issue 12, rows 1-4 and the SIGKILL loop: the host program never dies of the recorder, and
the trace it leaves always reads, up to its last whole chunk, with nothing lost that the
write policy promises (Note [When records reach the file], tracer/recorder/recorder_state.h).
docs/reliability.md ("The injected library") lists what each test tries."""
import os
import random
import re
import resource
import select
import signal
import subprocess
import time

from memtrace_testing import Build, events, preloaded, report_json, run


def _memtrace_warnings(stderr):
    return [line for line in stderr.splitlines() if line.startswith("memtrace:")]


def _reads_to_a_whole_chunk(trace):
    """The report reads the trace; the file ends on a whole chunk. Returns the summary."""
    summary = report_json(trace)["summary"]
    assert summary["cut_offset"] == 0, summary
    return summary


# ---- Row 1: exit() from a thread while the others allocate ----

EXIT_RUNS = 20


def test_exit_from_a_thread_keeps_the_exit_status(build, tmp_path):
    program = build.program("exit_from_thread")
    untraced = run([program], check=False)
    assert untraced.returncode == 3
    statuses = []
    for attempt in range(EXIT_RUNS):
        trace = tmp_path / f"exit-{attempt}.bin"
        result = run([program], preloaded(trace), check=False)
        statuses.append(result.returncode)
        assert _memtrace_warnings(result.stderr) == [], result.stderr
        # Records made after exit() began (other threads, teardown) are written through.
        summary = _reads_to_a_whole_chunk(trace)
        assert summary["allocations"] >= 20000
    assert statuses == [3] * EXIT_RUNS


# ---- Row 2: a file-size limit (ulimit -f) ----

FILE_SIZE_LIMIT = 60_000


def _limit_file_size_only():
    # As `ulimit -f` does: SIGXFSZ keeps its default action (it kills the process).
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def test_file_size_limit_never_kills_the_program(build, tmp_path):
    command = [build.program("churn"), "30000", "10"]  # about 0.5 s, well over the limit
    untraced = run(command, preexec_fn=_limit_file_size_only)
    for attempt in range(3):
        trace = tmp_path / f"limited-{attempt}.bin"
        result = run(command, preloaded(trace), check=False, preexec_fn=_limit_file_size_only)
        assert result.returncode == untraced.returncode == 0, (result.returncode, result.stderr)
        assert result.stdout == untraced.stdout
        warnings = _memtrace_warnings(result.stderr)
        assert len(warnings) == 1 and "cannot write the trace file" in warnings[0], warnings
        assert "File too large" in warnings[0]
        assert trace.stat().st_size <= FILE_SIZE_LIMIT
        summary = _reads_to_a_whole_chunk(trace)
        assert 0 < summary["allocations"] < 30000


# ---- Row 3: forked children that end without exit() ----

def test_children_ending_with_exit_or_a_signal_lose_no_event(build, tmp_path):
    pattern = tmp_path / "child-%p.bin"
    result = run([build.program("exit_children")], preloaded(pattern))
    children = re.findall(r"child (\d+) (\d+) (\d+) (\S+)", result.stdout)
    statuses = dict(re.findall(r"status (\d+) (\d+)", result.stdout))
    assert len(children) == 7
    for pid, allocations, frees, how in children:
        # The ending is the program's, not the recorder's: _exit(7), or SIGTERM.
        assert int(statuses[pid]) == (signal.SIGTERM if how == "signal" else 7 << 8)
        trace = tmp_path / f"child-{pid}.bin"
        recorded = events(trace)
        inherited = [e for e in recorded if not e["traced"]]
        traced = [e for e in recorded if e["traced"]]
        assert [e["size"] for e in inherited] == [1 << 20]  # the parent's, live at fork
        assert len([e for e in traced if e["record"] == "alloc"]) == int(allocations), pid
        assert len([e for e in traced if e["record"] == "free"]) == int(frees), pid
        summary = _reads_to_a_whole_chunk(trace)
        assert not summary["ended_cleanly"]


# ---- Row 4: the disk fills (ENOSPC), EINTR and short writes ----

def _with_failing_writes(trace, budget, chaos=False, **extra):
    env = preloaded(trace, **extra)
    env["LD_PRELOAD"] = f"{Build.programs.parent / 'lib' / 'libfailing_write.so'}:{env['LD_PRELOAD']}"
    env.update(FAILING_WRITE_MATCH=trace.name, FAILING_WRITE_BYTES=str(budget),
               FAILING_WRITE_CHAOS="1" if chaos else "0")
    return env


def test_disk_full_before_the_first_chunk_of_events(build, tmp_path):
    # On main the first chunk waited for the flusher (100 ms of events, tens of KB) and
    # did not fit: the program went on but the trace was unreadable.
    command = [build.program("churn"), "20000", "5"]
    untraced = run(command)
    for budget in (400, 4096, 30_000):
        trace = tmp_path / f"full-{budget}.bin"
        result = run(command, _with_failing_writes(trace, budget), check=False)
        assert result.returncode == 0 and result.stdout == untraced.stdout, result.stderr
        warnings = _memtrace_warnings(result.stderr)
        assert len(warnings) == 1 and "No space left on device" in warnings[0], warnings
        assert trace.stat().st_size <= budget
        summary = _reads_to_a_whole_chunk(trace)
        assert 0 < summary["allocations"] < 20000


def test_interrupted_and_short_writes_lose_nothing(build, tmp_path):
    # EINTR and short writes on every other write, and room for everything: the trace is
    # whole and ends cleanly.
    trace = tmp_path / "chaos.bin"
    result = run([build.program("churn"), "3000", "50"],
                 _with_failing_writes(trace, 10**9, chaos=True), check=False)
    assert result.returncode == 0 and _memtrace_warnings(result.stderr) == [], result.stderr
    summary = _reads_to_a_whole_chunk(trace)
    assert summary["ended_cleanly"]
    assert (summary["allocations"], summary["frees"]) == (3000, 3000 - 16)


# ---- The SIGKILL loop ----

KILL_RUNS = 20
# The kill's moment after the program's first `progress` line: up to 1 s, so that about half the
# kills (10 of the 20 the seed draws) come more than a flush period and the slack after it, with
# records owed through the buffer, and the rest earlier (3 in the first 100 ms: the first flush
# period, written through).
LATEST_KILL_S = 1.0
FLUSH_PERIOD_S = 0.1
# The flusher is a thread of a program on a shared, loaded machine: its 100 ms may start
# late. This is scheduling slack, not a looser promise.
SCHEDULING_SLACK_S = 0.4
# How long the program may take to say it has begun (loading the simulated card's libraries and
# the recorder, under a loaded machine's scheduler): a bound against a hang, not a figure.
STARTED_WITHIN_S = 60


def _first_line(process, attempt):
    """The program's first line of output, read as it comes; the test fails saying so when none
    comes in STARTED_WITHIN_S."""
    ready, _, _ = select.select([process.stdout], [], [], STARTED_WITHIN_S)
    if not ready:
        process.kill()
        process.wait()
        raise AssertionError(f"attempt {attempt}: churn printed nothing in {STARTED_WITHIN_S} s")
    return process.stdout.readline()


def test_sigkill_at_random_moments(build, tmp_path):
    # A trace cut by SIGKILL at a random moment of a program that records reads, up to its last
    # whole chunk, and holds everything the write policy promised by then (Note [When records
    # reach the file], tracer/recorder/recorder_state.h): through the buffer, whatever the
    # program had done a flush period before the kill, and, from the file's first flush period
    # (written through), its first allocation at least. The moment is drawn after the program
    # said it had made its first 200 allocations (its first `progress` line), not after its
    # start: under a loaded machine's scheduler a moment drawn from the start (0-0.6 s) often came
    # before the first allocation had opened the trace, and, twice on 2026-11-30, between the
    # file's header and its opening chunk, which leaves a file that holds no record and that the
    # report refuses as such ("the trace holds no records"; 3 of 300 kills drawn in the first
    # 50 ms left one): those attempts tested nothing of the claim, and failed on the refusal. A
    # kill before anything was recorded is not what this loop tests; the seed's moments test the
    # buffer's promise in half the kills (before, 2 of 30 came late enough to).
    rng = random.Random(12)
    env = {**os.environ, "MEMTRACE_BUILD_DIR": str(Build.dir)}
    owed = 0  # attempts with records owed through the buffer (a flush period and the slack old)
    for attempt in range(KILL_RUNS):
        trace = tmp_path / f"killed-{attempt}.bin"
        # Through the buffer: what it promises (a flush period). A mapped trace loses nothing
        # (test_dying.py's SIGKILL loop).
        env.update(preloaded(trace, MEMTRACE_MAP_FILE=0))
        delay = rng.uniform(0.0, LATEST_KILL_S)
        process = subprocess.Popen([str(build.program("churn")), "100000000", "20", "200"],
                                   env=env, stdout=subprocess.PIPE, text=True)
        first = _first_line(process, attempt)
        assert first.startswith("progress "), (attempt, first)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic_ns()
        stdout, _ = process.communicate()
        assert process.returncode == -signal.SIGKILL, (attempt, process.returncode)
        progress = [tuple(int(x) for x in line.split()[1:])
                    for line in (first + stdout).splitlines() if line.startswith("progress")]
        # Whatever the program had done a flush period (and the slack) before the kill is
        # in the trace.
        bound = killed_at - int((FLUSH_PERIOD_S + SCHEDULING_SLACK_S) * 1e9)
        old = [(a, f) for a, f, at in progress if at < bound]
        summary = report_json(trace)["summary"]  # reads, whole chunks only
        assert not summary["ended_cleanly"]
        owed_allocations = max(1, old[-1][0] if old else 0)
        assert summary["allocations"] >= owed_allocations, (attempt, delay, summary, old[-1:])
        if old:
            owed += 1
            assert summary["frees"] >= old[-1][1], (attempt, delay, summary, old[-1])
    # Every kill drawn later than the flush period and the slack after the first line had its
    # first line's records owed: the loop tested the buffer's promise, not only the opening.
    assert owed >= KILL_RUNS // 3, f"{owed} of {KILL_RUNS} kills had records owed to the file"
