"""The job report's benchmark (docs/performance.md): memtrace-report reading a folder of 8
ranks' traces of 10 M events each (bench/make_trace, a pattern of its own per rank), as text,
JSON and the HTML page, against one rank's trace read alone. Prints a Markdown table.

    python3 bench/job_report.py [BUILD_DIR] [RANKS] [EVENTS]"""
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
RANKS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
EVENTS = int(sys.argv[3]) if len(sys.argv) > 3 else 10_000_000


def report_run(*args):
    """Wall time and peak RSS (KiB) of one memtrace-report run."""
    start = time.perf_counter()
    process = subprocess.Popen([BUILD / "bin" / "memtrace-report", *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"memtrace-report {' '.join(map(str, args))} failed")
    return elapsed, usage.ru_maxrss


def main():
    print(f"Machine: {platform.node()}, {os.cpu_count()} cores, Linux {platform.release()}\n")
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "job"
        folder.mkdir()
        for rank in range(RANKS):
            subprocess.run([BUILD / "bench" / "make_trace", folder / f"rank{rank}.bin", str(EVENTS),
                            str(rank), str(RANKS)], check=True)
        size = sum(path.stat().st_size for path in folder.iterdir())
        total = RANKS * EVENTS
        print("| job report | traces x events | size | wall time | events/s | peak RSS |")
        print("|---|---:|---:|---:|---:|---:|")
        for args, label in (((folder / "rank0.bin",), "one rank alone, text"),
                            ((folder,), "the job, text"),
                            ((folder, "--format", "json"), "the job, JSON"),
                            (("html", folder, "-o", Path(work) / "job.html"), "the job, HTML page")):
            runs = [report_run(*args, *(("-f",) if label.endswith("page") else ())) for _ in range(2)]
            best = min(runs)
            events = EVENTS if label.startswith("one") else total
            traces = 1 if label.startswith("one") else RANKS
            bytes_read = folder.joinpath("rank0.bin").stat().st_size if traces == 1 else size
            print(f"| memtrace-report: {label} | {traces} x {EVENTS:,} | {bytes_read / 2**20:.0f} MiB | "
                  f"{best[0]:.1f} s | {events / best[0] / 1e6:.1f} M | {best[1] / 1024:.0f} MiB |")


main()
