"""Runs every benchmark of bench/ and prints the figures as Markdown, the way
docs/performance.md records them.

    python3 bench/run.py [BUILD_DIR]        (make bench)

Recording costs are measured against the untraced call in the same run; the report's
throughput on a generated 10 M-event trace (and 1 M, to show memory does not grow with the
file)."""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
LIBRARY = BUILD / "allocator" / "libmemtrace.so"
WORKLOAD = BUILD / "bench" / "libmemtrace_bench_workload.so"


def environment(work):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update(LD_PRELOAD=str(LIBRARY), MEMTRACE_AUTOSTART="0", MEMTRACE_BENCH_DIR=str(work),
               LD_LIBRARY_PATH=str(BUILD / "simulator" / "lib"),
               MEMTRACE_GPU_PROFILE=str(BUILD / "simulator" / "profiles" / "h200.json"))
    return env


def record_benchmarks(work):
    output = subprocess.run([BUILD / "bench" / "record_bench", "--benchmark_format=json"],
                            env=environment(work), capture_output=True, text=True, check=True).stdout
    medians = {}
    for entry in json.loads(output)["benchmarks"]:
        if entry.get("aggregate_name") == "median":
            name = entry["run_name"].split("/")[0].removeprefix("BM_")
            entry["ns_per_pair"] *= 1e9  # an inverted rate: seconds per pair
            medians[name] = entry
    return medians


def python_benchmarks(work, walker):
    env = environment(work)
    env["MEMTRACE_PYTHON_WALKER"] = walker
    output = subprocess.run([sys.executable, ROOT / "bench" / "python_stacks.py", WORKLOAD],
                            env=env, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in output.splitlines()]


def report_run(trace, *args):
    """Wall time and peak RSS (KiB) of one memtrace-report run."""
    start = time.perf_counter()
    process = subprocess.Popen([BUILD / "bin" / "memtrace-report", trace, *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"memtrace-report failed on {trace}")
    return elapsed, usage.ru_maxrss


def main():
    print(f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}\n")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        r = record_benchmarks(work)
        direct = r["Direct"]["ns_per_pair"]
        # Frees carry no stack (MEMTRACE_FREE_STACKS=0), so in a pair with a stack the free
        # costs what a no-stack event costs; the rest is the allocation with its stack.
        no_stack_event = (r["TracedNoStack"]["ns_per_pair"] - direct) / 2
        print("| recording | pair: alloc + free (ns) | untraced pair (ns) | cost per event (ns) | bytes per event |")
        print("|---|---:|---:|---:|---:|")
        print(f"| loaded, not tracing (counted only) | {r['HookedNotTracing']['ns_per_pair']:.0f} | "
              f"{direct:.0f} | {(r['HookedNotTracing']['ns_per_pair'] - direct) / 2:.0f} | |")
        print(f"| traced, no stack | {r['TracedNoStack']['ns_per_pair']:.0f} | {direct:.0f} | "
              f"{no_stack_event:.0f} | {r['TracedNoStack']['bytes_per_event']:.2f} |")
        window = r["TracedNoStackFirstPeriod"]
        print(f"| traced, no stack, a file's first 100 ms (written through) | {window['ns_per_pair']:.0f} | "
              f"{direct:.0f} | {(window['ns_per_pair'] - direct) / 2:.0f} | {window['bytes_per_event']:.2f} |")
        native = r["TracedNative32"]
        print(f"| traced, native stack 32 deep (allocation) | {native['ns_per_pair']:.0f} | {direct:.0f} | "
              f"{native['ns_per_pair'] - direct - no_stack_event:.0f} | {native['bytes_per_event']:.2f} |")
        for walker, how in (("auto", "direct walk"), ("api", "public C API")):
            for result in python_benchmarks(work, walker):
                cost = result["traced_ns_per_pair"] - result["direct_ns_per_pair"] - no_stack_event
                print(f"| traced, Python stack {result['python_depth']} deep, {result['stack']}, {how}, "
                      f"GIL {result['gil']} "
                      f"(allocation) | {result['traced_ns_per_pair']:.0f} | {result['direct_ns_per_pair']:.0f} | "
                      f"{cost:.0f} | {result['bytes_per_event']:.2f} |")

        print("\n| report | events | trace size | wall time | events/s | peak RSS |")
        print("|---|---:|---:|---:|---:|---:|")
        for events in (1_000_000, 10_000_000):
            trace = work / f"synthetic-{events}.bin"
            subprocess.run([BUILD / "bench" / "make_trace", trace, str(events)], check=True)
            size = trace.stat().st_size
            for args, label in (((), "text, by line"), (("--group-by", "stack"), "text, by stack")):
                times = []
                for _ in range(3):
                    elapsed, rss = report_run(trace, *args)
                    times.append(elapsed)
                best = min(times)
                print(f"| memtrace-report {label} | {events:,} | {size / 2**20:.1f} MiB | {best:.2f} s | "
                      f"{events / best / 1e6:.1f} M | {rss / 1024:.0f} MiB |")
            trace.unlink()

    hooks = json.loads(subprocess.run([sys.executable, ROOT / "bench" / "training_hooks.py", BUILD],
                                      capture_output=True, text=True, check=True).stdout)
    print(f"\n| training step: {hooks['model']} | CPU time (ms) | over untraced |")
    print("|---|---:|---:|")
    print(f"| untraced | {hooks['untraced_ms']:.2f} | |")
    for kind, label in (("categories", "start_tracing(model=model, modules=False): categories, phases, steps"),
                        ("modules", "start_tracing(): module attribution, optimizer hooks"),
                        ("training", "start_tracing(model=model): all, with backward modules")):
        print(f"| {label} | {hooks[kind + '_ms']:.2f} | {hooks[kind + '_overhead_percent']:+.1f} % |")

    # The job's report: 8 ranks x 10 M events (bench/job_report.py prints its own table).
    print(subprocess.run([sys.executable, ROOT / "bench" / "job_report.py", BUILD], capture_output=True,
                         text=True, check=True).stdout.split("\n", 2)[2])


main()
