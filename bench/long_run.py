"""The flight recorder's budget (issue 33): a 24-hour-equivalent run, 10^9 events through the
test CUDA runtime (bench/long_run.cpp: a training loop of about 3,000 events a step, its peak in
step 3), leaves a file under 50 MiB whose table at the peak is the full trace's.

    python3 bench/long_run.py BUILD [EVENTS] [--full] [--window N]

Runs the loop under MEMTRACE_MODE=flight (native stacks, 6 frames: the loop's functions name
its buffers), then reads the file: its size, the report's time, the table at the peak by
function against the program's own account of its peak, the steps. With --full it also runs
the loop traced in full, and compares the two reports' tables at the peak, by function and by
line, and at the end. Prints one JSON object."""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUILD = Path(sys.argv[1]).resolve()
EVENTS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 10**9
FULL = "--full" in sys.argv
WINDOW = int(sys.argv[sys.argv.index("--window") + 1]) if "--window" in sys.argv else None
REPORT = BUILD / "bin" / "memtrace-report"


def traced(trace, mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update(LD_PRELOAD=str(BUILD / "allocator" / "libmemtrace.so"), MEMTRACE_OUTPUT=str(trace),
               MEMTRACE_MODE=mode, MEMTRACE_STACKS="native", MEMTRACE_NATIVE_DEPTH="6",
               LD_LIBRARY_PATH=str(BUILD / "simulator" / "lib"),
               MEMTRACE_GPU_PROFILE=str(BUILD / "simulator" / "profiles" / "h200.json"))
    if WINDOW:
        env["MEMTRACE_FLIGHT_EVENTS"] = str(WINDOW)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    result = subprocess.run([BUILD / "bench" / "long_run", str(EVENTS)], env=env, check=True,
                            capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return json.loads(result.stdout), wall, after.ru_utime - before.ru_utime


def report(trace, *options):
    start = time.monotonic()
    result = subprocess.run([REPORT, trace, "--format", "json", "--top", "0", *options],
                            check=True, capture_output=True, text=True)
    return json.loads(result.stdout), time.monotonic() - start


def rows(document):
    return [(row["location"], row["bytes"], row["count"]) for row in document["live"]["rows"]]


def main():
    results = {"events": EVENTS, "window": WINDOW or 1000000}
    with tempfile.TemporaryDirectory(dir=os.environ.get("MEMTRACE_BENCH_DIR")) as work:
        flight = Path(work) / "flight.bin"
        account, wall, cpu = traced(flight, "flight")
        by_function, seconds = report(flight, "--group-by", "function")
        table = {row["location"]: row["bytes"] for row in by_function["live"]["rows"]}
        # Each site's bytes at the peak, as the program counted them, against the report's row
        # whose function is that site.
        matched = {site: next((bytes_ for name, bytes_ in table.items()
                               if f"::{site}(" in name), None)
                   for site in account["at_peak"]}
        results["flight"] = {
            "run_wall_s": round(wall, 1), "run_cpu_s": round(cpu, 1),
            "file_bytes": flight.stat().st_size,
            "file_mib": round(flight.stat().st_size / 2**20, 2),
            "report_s": round(seconds, 2),
            "peak_bytes": by_function["summary"]["peak_bytes"],
            "events_counted": by_function["summary"]["events"],
            "steps": len(by_function.get("training", {}).get("steps", [])),
            "kept_events": by_function["summary"]["flight"]["kept_events"],
            "peak_equals_account": by_function["summary"]["peak_bytes"] == account["peak_bytes"],
            "table_equals_account": all(matched[site] == bytes_
                                        for site, bytes_ in account["at_peak"].items()),
        }
        results["account"] = account
        if FULL:
            full = Path(work) / "full.bin"
            _, wall, cpu = traced(full, "full")
            compared = {}
            for options in (("--group-by", "function"), ("--group-by", "line"),
                            ("--at", "end", "--group-by", "function")):
                theirs, seconds = report(full, *options)
                mine, _ = report(flight, *options)
                compared[" ".join(options)] = rows(mine) == rows(theirs)
            results["full"] = {"run_wall_s": round(wall, 1), "run_cpu_s": round(cpu, 1),
                               "file_bytes": full.stat().st_size,
                               "file_mib": round(full.stat().st_size / 2**20, 1),
                               "report_s": round(seconds, 1), "tables_equal": compared}
    print(json.dumps(results, indent=2))


main()
