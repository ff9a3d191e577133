"""Issue 33, part 3: memtrace-report live (memtrace live) follows a running process's trace
from another terminal, without restarting it (Note [Following a running trace],
tracer/report/live.h): the bytes live now and at the peak so far, by line and by nn.Module,
for one process or every rank of a local job. Driven in tmux, as a user would."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

from memtrace_testing import Build, preloaded, run

SCRIPT = Build.root / "tests" / "preload" / "scripts" / "training_loop.py"
LINES = SCRIPT.read_text().splitlines()


def _line(tag):
    return next(i for i, line in enumerate(LINES, 1) if tag in line)


def _start(trace, steps=100000, churn=2000, **env):
    """The training loop, long enough to be watched, traced into `trace`."""
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("MEMTRACE_") and k != "LD_PRELOAD"}
    environment.update(preloaded(trace), **{k: str(v) for k, v in env.items()})
    return subprocess.Popen([sys.executable, str(SCRIPT), str(Build.cuda), str(steps),
                             str(churn), "2"], env=environment, stdout=subprocess.DEVNULL,
                            start_new_session=True)


def _wait_for(predicate, what, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {seconds} s")


def _stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _once(*targets):
    result = run([Build.report, "live", *map(str, targets), "--once", "--format", "json"],
                 timeout=60)
    return json.loads(result.stdout)["traces"]


def test_once_reads_a_running_process_by_its_pid(build, tmp_path):
    trace = tmp_path / "running.bin"
    process = _start(trace)
    try:
        _wait_for(lambda: trace.exists() and trace.stat().st_size > 0, "trace")
        time.sleep(1.0)  # past step 2, the peak
        first = _once(process.pid)
        assert len(first) == 1 and first[0]["path"] == str(trace)
        assert first[0]["pid"] == process.pid and not first[0]["ended"]
        # Parameters (3 MiB) and optimizer state (6 MiB) stay live; the peak held step 2's
        # extra 24 MiB and four activations.
        assert first[0]["current_bytes"] >= 9 << 20
        assert first[0]["peak_bytes"] >= first[0]["current_bytes"] + (24 << 20)
        rows = {row["location"]: row for row in first[0]["by_location"]}
        parameter = next(row for name, row in rows.items()
                         if name.endswith(f"training_loop.py:{_line('ALLOC:parameter')} (main)"))
        assert parameter["bytes"] == 3 << 20 and parameter["count"] == 3
        peak = next(row for name, row in rows.items() if f":{_line('ALLOC:peak')} " in name)
        assert peak["bytes"] == 0 and peak["peak_bytes"] == 24 << 20
        modules = {row["location"]: row for row in first[0]["by_module"]}
        assert modules["model.block3"]["peak_bytes"] == 2 * (1 << 20) + 3 * (256 << 10)
        time.sleep(0.5)
        later = _once(trace)  # the file itself, read again: the run went on
        assert later[0]["events"] > first[0]["events"]
    finally:
        _stop(process)


def test_every_rank_of_a_local_job(build, tmp_path):
    # Two ranks started by one parent (as torchrun starts them): the parent's PID, or the
    # folder, finds both.
    folder = tmp_path / "job"
    folder.mkdir()
    command = (f"for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r {sys.executable} {SCRIPT} "
               f"{Build.cuda} 100000 2000 2 & done; wait")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    environment.update(preloaded(folder / "rank%r.bin"))
    # The shell itself is preloaded too but makes no CUDA call: it writes no trace.
    parent = subprocess.Popen(["sh", "-c", command], env=environment, start_new_session=True,
                              stdout=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(list(folder.glob("rank*.bin"))) == 2, "two traces")
        time.sleep(1.0)
        by_pid = _once(parent.pid)
        assert [trace["rank"] for trace in by_pid] == [0, 1]
        assert all(trace["peak_bytes"] > trace["current_bytes"] > 0 for trace in by_pid)
        assert [trace["rank"] for trace in _once(folder)] == [0, 1]
    finally:
        _stop(parent)


def test_a_flight_recorder_followed_across_its_compactions(build, tmp_path):
    trace = tmp_path / "flight.bin"
    process = _start(trace, MEMTRACE_MODE="flight", MEMTRACE_FLIGHT_EVENTS=2000)
    try:
        _wait_for(lambda: trace.exists() and trace.stat().st_size > 0, "trace")
        inode = trace.stat().st_ino
        _wait_for(lambda: trace.stat().st_ino != inode, "compaction")
        (state,) = _once(process.pid)
        assert state["flight"]
        assert state["peak_bytes"] >= (24 << 20) + (9 << 20)  # the peak's section
    finally:
        _stop(process)


def test_the_view_in_a_terminal(build, tmp_path):
    tmux = shutil.which("tmux")
    assert tmux is not None, "tmux is not installed (scripts/setup.sh installs it)"
    trace = tmp_path / "watched.bin"
    process = _start(trace)
    session = f"memtrace-live-{uuid.uuid4().hex[:8]}"

    def screen():
        return subprocess.run([tmux, "capture-pane", "-p", "-t", session], capture_output=True,
                              text=True).stdout

    try:
        _wait_for(lambda: trace.exists() and trace.stat().st_size > 0, "trace")
        report = Build.root / "python"
        subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "40",
                        f"PYTHONPATH={report} MEMTRACE_BUILD_DIR={Build.dir} {sys.executable} "
                        f"-m mem_tracer live {process.pid} --interval 0.2"], check=True)
        text = _wait_for(lambda: (lambda s: s if "training_loop.py" in s else None)(screen()),
                         "view")
        assert f"memtrace live  pid {process.pid}" in text
        assert "Now " in text and "Peak " in text and "Location (by line in user code)" in text
        assert "q quit   l by line   m by module" in text
        events = lambda s: int(s.split(" events")[0].split()[-1])  # noqa: E731
        before = events(text)
        _wait_for(lambda: events(screen()) > before, "a refresh with more events")
        subprocess.run([tmux, "send-keys", "-t", session, "m"], check=True)
        text = _wait_for(lambda: (lambda s: s if "(by nn.Module)" in s else None)(screen()),
                         "the module view")
        assert "model.block3" in text
        subprocess.run([tmux, "send-keys", "-t", session, "q"], check=True)
        _wait_for(lambda: subprocess.run([tmux, "has-session", "-t", session],
                                         capture_output=True).returncode != 0,
                  "the view to quit", seconds=10)
        assert process.poll() is None  # the watched process never noticed
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)
        _stop(process)
