"""Issue 33, part 0: nothing lost at the end. However the process dies (abort, std::terminate,
a fatal signal, _exit, SIGKILL, in an exit handler, in a static destructor, a thread calling
std::terminate while the interpreter finalizes), every event it made before is in the trace:
a mapped trace has each record in the page cache as it is written (Note [Records reach the
page cache as they are written], tracer/recorder/trace_file.h). Each program keeps its own
account of its events in a file it maps (programs/dying_account.h), which survives it too."""
import os
import signal
import struct
import subprocess
import sys
import time

import pytest

from memtrace_testing import Build, preloaded, report_json, run


def _account(path):
    allocations, frees = struct.unpack("<QQ", path.read_bytes()[:16])
    return allocations, frees


def _counts(trace):
    summary = report_json(trace)["summary"]
    return summary["allocations"], summary["frees"], summary


# (how, pairs made before dying, the exit status). The pairs take longer than a buffered
# trace's first 100 ms, which it writes through: past them, the buffer of before lost the end.
PAIRS = 300_000
WAYS = [
    ("abort", PAIRS, -signal.SIGABRT),
    ("terminate", PAIRS, -signal.SIGABRT),
    ("segv", PAIRS, -signal.SIGSEGV),
    ("_exit", PAIRS, 7),
    ("atexit-abort", PAIRS, -signal.SIGABRT),
    ("destructor-abort", PAIRS, -signal.SIGABRT),
]


# Under the sanitizer build (make test-sanitize: ASAN_OPTIONS=...:abort_on_error=1) ASan catches
# the SIGSEGV the program raises and aborts instead: it must die of its own signal, as it does
# unsanitized. Without ASan the option is read by nobody.
SIGNALS_AS_RAISED = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":handle_segv=0"}


@pytest.mark.parametrize("how,pairs,status", WAYS, ids=[way[0] for way in WAYS])
def test_every_event_before_the_end_is_in_the_trace(build, tmp_path, how, pairs, status):
    trace, account = tmp_path / "trace.bin", tmp_path / "account"
    result = run([build.program("dying"), how, pairs], {**preloaded(trace), **SIGNALS_AS_RAISED,
                                                         "DYING_ACCOUNT": str(account)},
                 check=False)
    assert result.returncode == status, result.stderr
    allocations, frees = _account(account)
    # The program's own count: pairs, and 100 more in an exit handler or destructor.
    assert allocations == pairs + (100 if how.endswith("-abort") else 0)
    assert _counts(trace)[:2] == (allocations, frees)


def test_buffered_trace_loses_the_end_mapped_does_not(build, tmp_path):
    # The same abort through the buffer of before (MEMTRACE_MAP_FILE=0): what the 100 ms
    # flusher had not written is gone. The mapped trace above keeps it; this shows what the
    # test would catch.
    trace, account = tmp_path / "trace.bin", tmp_path / "account"
    env = {**preloaded(trace, MEMTRACE_MAP_FILE=0), "DYING_ACCOUNT": str(account)}
    run([build.program("dying"), "destructor-abort", PAIRS], env, check=False)
    allocations, _ = _account(account)
    assert _counts(trace)[0] < allocations


def test_a_thread_calling_terminate_while_main_allocates(build, tmp_path):
    trace, account = tmp_path / "trace.bin", tmp_path / "account"
    result = run([build.program("dying"), "thread-terminate", PAIRS],
                 {**preloaded(trace), "DYING_ACCOUNT": str(account)}, check=False)
    assert result.returncode == -signal.SIGABRT
    recorded_allocations, recorded_frees, _ = _counts(trace)
    allocations, frees = _account(account)
    # The main thread may have been inside a hook when the process died: that one event was
    # not made (its call had not returned), and may or may not be on disk.
    assert allocations <= recorded_allocations <= allocations + 1
    assert frees <= recorded_frees <= frees + 1


def test_a_thread_calling_terminate_while_the_interpreter_finalizes(build, tmp_path):
    trace, account = tmp_path / "trace.bin", tmp_path / "account"
    library = Build.programs.parent / "lib" / "libterminator.so"
    script = Build.root / "tests" / "preload" / "scripts" / "terminate_at_finalization.py"
    env = {**preloaded(trace), "DYING_ACCOUNT": str(account),
           "LD_LIBRARY_PATH": str(Build.simulator)}
    result = run([sys.executable, script, library], env, check=False)
    assert "main done" in result.stdout
    assert result.returncode == -signal.SIGABRT, result.stderr
    assert "terminate called" in result.stderr
    recorded_allocations, recorded_frees, _ = _counts(trace)
    allocations, frees = _account(account)
    assert allocations > 200 * 50
    assert allocations <= recorded_allocations <= allocations + 1
    assert frees <= recorded_frees <= frees + 1


KILLS = 20


def test_sigkill_at_any_moment_loses_no_event(build, tmp_path):
    # Every event the program had made (its account, in the page cache too) is in the trace,
    # however soon after the start the kill comes, without the flush period of the buffered
    # trace (test_reliability.py's SIGKILL loop keeps testing that one).
    import random
    rng = random.Random(33)
    for attempt in range(KILLS):
        trace, account = tmp_path / f"killed-{attempt}.bin", tmp_path / f"account-{attempt}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
        env.update(preloaded(trace), DYING_ACCOUNT=str(account))
        process = subprocess.Popen([str(build.program("dying")), "kill", "20"], env=env)
        time.sleep(rng.uniform(0.0, 0.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
        if not trace.exists() or trace.stat().st_size == 0:
            # Killed before the first allocation opened the trace: nothing was owed to it.
            assert not account.exists() or _account(account) == (0, 0), attempt
            continue
        allocations, frees = _account(account)
        recorded_allocations, recorded_frees, summary = _counts(trace)
        assert not summary["ended_cleanly"]
        assert allocations <= recorded_allocations <= allocations + 1, (attempt, summary)
        assert frees <= recorded_frees <= frees + 1, (attempt, summary)
