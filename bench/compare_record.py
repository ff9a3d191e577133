"""The recording benchmark (bench/record_bench) of two builds, run alternately, so that a
change is compared with its base on the same machine at the same time (docs/performance.md,
"Every CUDA entry point"). Prints each run and the medians, with the cost per event:

    python3 bench/compare_record.py BASE_BUILD NEW_BUILD [RUNS]"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

BENCHMARKS = ["Direct", "HookedNotTracing", "TracedNoStack", "TracedNoStackFirstPeriod",
              "TracedNative32"]


def run(build):
    """ns per allocation+free pair, by benchmark (the medians of record_bench's repetitions)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update(LD_PRELOAD=f"{build}/allocator/libmemtrace.so", MEMTRACE_AUTOSTART="0",
               MEMTRACE_BENCH_DIR=tempfile.mkdtemp(prefix="memtrace-bench-"),
               LD_LIBRARY_PATH=f"{build}/simulator/lib",
               MEMTRACE_GPU_PROFILE=f"{build}/simulator/profiles/h200.json")
    output = subprocess.run([f"{build}/bench/record_bench", "--benchmark_format=json"], env=env,
                            capture_output=True, text=True, check=True).stdout
    return {entry["run_name"].split("/")[0].removeprefix("BM_"): entry["ns_per_pair"] * 1e9
            for entry in json.loads(output)["benchmarks"] if entry.get("aggregate_name") == "median"}


def main():
    builds = {"base": sys.argv[1], "new": sys.argv[2]}
    results = {name: [] for name in builds}
    for i in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
        for name, build in builds.items():
            results[name].append(run(build))
            print(name, i, json.dumps(results[name][-1]), flush=True)
    print("| benchmark | base: pair | new: pair | base: cost per event | new: cost per event |")
    print("|---|---:|---:|---:|---:|")
    for benchmark in BENCHMARKS:
        cells = []
        for name in builds:
            pairs = [r[benchmark] for r in results[name]]
            cells.append(f"{statistics.median(pairs):.0f} [{min(pairs):.0f}-{max(pairs):.0f}]")
        for name in builds:
            costs = [(r[benchmark] - r["Direct"]) / 2 for r in results[name]]
            cells.append("" if benchmark == "Direct" else
                         f"{statistics.median(costs):.0f} [{min(costs):.0f}-{max(costs):.0f}]")
        print(f"| {benchmark} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
