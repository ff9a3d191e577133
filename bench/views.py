"""Measures the views of memtrace-report on a generated trace (bench/make_trace): the time,
peak memory and output size of `html`, `flamegraph`, `export perfetto` and `export
pytorch`, and how long the HTML report takes to open in headless Chromium (the budget: a
10 M-event trace gives an HTML file of a few MB that opens in under 2 s). Prints Markdown,
the way docs/performance.md records it.

    python3 bench/views.py [BUILD_DIR] [EVENTS]        (defaults: build, 10000000)

make_trace's trace is untraced at its peak (its first 100 000 events are written with
tracing stopped), so the HTML report is measured twice: at the peak (one location,
"untraced", at the peak) and with --at end, whose table, lanes and flame graph hold the
trace's 40 lines and 200 stacks."""
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
EVENTS = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
REPORT = BUILD / "bin" / "memtrace-report"
sys.path.insert(0, str(ROOT / "tests" / "report"))
import chromium


def timed(command):
    """Wall seconds and peak RSS (MiB) of a command."""
    import subprocess
    start = time.perf_counter()
    process = subprocess.Popen([str(c) for c in command], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"failed: {command}")
    return elapsed, usage.ru_maxrss / 1024


def open_time(html, runs=3):
    """Median over `runs` fresh browsers of: seconds from navigation to the report drawn,
    and the page's own time to that point (performance.now(), ms)."""
    walls, drawn = [], []
    for _ in range(runs):
        with chromium.Browser() as browser:
            start = time.perf_counter()
            browser.open(html)
            browser.wait_until("document.body.getAttribute('data-ready') === '1'", timeout=60)
            walls.append(time.perf_counter() - start)
            drawn.append(float(browser.evaluate("document.body.getAttribute('data-drawn-ms')")))
            problems = browser.problems()
            if problems:
                raise SystemExit(f"{html}: {problems}")
    return statistics.median(walls), statistics.median(drawn)


def mib(path):
    return Path(path).stat().st_size / (1 << 20)


def main():
    import platform
    print(f"Machine: {platform.node()}, {os.cpu_count()} cores, Linux {platform.release()}, "
          f"Chromium: {chromium.executable()}\n")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        trace = work / "trace.bin"
        timed([BUILD / "bench" / "make_trace", trace, EVENTS])
        print(f"Trace: {EVENTS:,} events (bench/make_trace), {mib(trace):.1f} MiB\n")
        print("| command | wall (s) | peak RSS (MiB) | output (MiB) | opens in Chromium: wall / drawn (s) |")
        print("|---|---:|---:|---:|---:|")
        runs = [
            ("html", ["html", trace], "report.html"),
            ("html --at end", ["html", trace, "--at", "end"], "report-end.html"),
            ("flamegraph --at end (svg)", ["flamegraph", trace, "--at", "end"], "flame.svg"),
            ("flamegraph --at end --format folded", ["flamegraph", trace, "--at", "end", "--format", "folded"],
             "flame.txt"),
            ("export perfetto", ["export", "perfetto", trace], "trace.json"),
        ]
        for name, args, output in runs:
            wall, rss = timed([REPORT, *args, "-o", work / output])
            opened = ""
            if output.endswith(".html"):
                open_wall, drawn_ms = open_time(work / output)
                opened = f"{open_wall:.2f} / {drawn_ms / 1000:.2f}"
            print(f"| `{name}` | {wall:.2f} | {rss:.0f} | {mib(work / output):.2f} | {opened} |")
        # The snapshot holds every event (PyTorch keeps the last 100 000 by default): 1 M.
        small = work / "small.bin"
        timed([BUILD / "bench" / "make_trace", small, 1_000_000])
        wall, rss = timed([REPORT, "export", "pytorch", small, "-o", work / "snapshot.pickle"])
        print(f"| `export pytorch` (1 M events) | {wall:.2f} | {rss:.0f} | {mib(work / 'snapshot.pickle'):.1f} | |")


if __name__ == "__main__":
    main()
