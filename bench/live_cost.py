"""What the live view costs the traced process (issue 33): nothing is in its record path for the
view (Note [Following a running trace], tracer/report/live.h: the view reads the trace file
from another process), so with no viewer the cost is zero by construction; this measures the
process with a viewer following it too. bench/long_run (a training loop through the test CUDA
runtime) runs alone and with `memtrace-report live PID` refreshing every INTERVAL seconds in a
pseudo-terminal, alternately, ROUNDS times each; the process's own CPU time (user + system,
getrusage of the child) is compared, medians.

    python3 bench/live_cost.py BUILD [EVENTS] [ROUNDS] [INTERVAL]

Prints one JSON object."""
import json
import os
import pty
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

BUILD = Path(sys.argv[1]).resolve()
EVENTS = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
INTERVAL = sys.argv[4] if len(sys.argv) > 4 else "0.2"


def one(trace, watched):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update(LD_PRELOAD=str(BUILD / "allocator" / "libmemtrace.so"), MEMTRACE_OUTPUT=str(trace),
               MEMTRACE_STACKS="native", MEMTRACE_NATIVE_DEPTH="6",
               LD_LIBRARY_PATH=str(BUILD / "simulator" / "lib"),
               MEMTRACE_GPU_PROFILE=str(BUILD / "simulator" / "profiles" / "h200.json"))
    start = time.monotonic()
    process = subprocess.Popen([BUILD / "bench" / "long_run", str(EVENTS)], env=env,
                               stdout=subprocess.DEVNULL)
    viewer, drawn = None, [0]
    if watched:
        while not trace.exists() or trace.stat().st_size == 0:
            time.sleep(0.01)
        controller, terminal = pty.openpty()
        viewer = subprocess.Popen([BUILD / "bin" / "memtrace-report", "live", str(process.pid),
                                   "--interval", INTERVAL], stdin=terminal, stdout=terminal,
                                  stderr=subprocess.DEVNULL)
        os.close(terminal)

        def drain():  # what the view draws, read as a terminal would (one screen a refresh)
            while True:
                try:
                    chunk = os.read(controller, 1 << 16)
                except OSError:
                    return
                if not chunk:
                    return
                drawn[0] += chunk.count(b"\x1b[H")

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
    _, _status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    if viewer:
        os.write(controller, b"q")
        viewer.wait(timeout=10)
        reader.join(timeout=5)
        os.close(controller)
    trace.unlink()
    return usage.ru_utime + usage.ru_stime, wall, drawn[0]


def main():
    alone, watched, refreshes = [], [], []
    work = Path(os.environ.get("MEMTRACE_BENCH_DIR", "/tmp"))
    for _ in range(ROUNDS):
        cpu, _, _ = one(work / f"live-cost-{os.getpid()}.bin", False)
        alone.append(cpu)
        cpu, _, drawn = one(work / f"live-cost-{os.getpid()}.bin", True)
        watched.append(cpu)
        refreshes.append(drawn)
    print(json.dumps({"events": EVENTS, "rounds": ROUNDS, "interval_s": float(INTERVAL),
                      "alone_cpu_s": sorted(round(x, 2) for x in alone),
                      "watched_cpu_s": sorted(round(x, 2) for x in watched),
                      "median_alone_cpu_s": round(statistics.median(alone), 2),
                      "median_watched_cpu_s": round(statistics.median(watched), 2),
                      "view_refreshes": refreshes}, indent=2))


main()
