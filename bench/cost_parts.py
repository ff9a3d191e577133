"""A partial count of bench/cost.py's work for one mode and one build, in one process: the tensor
loop at the given Python depths, GPT-2's forward at the given batches, optionally the AdamW step,
counted as cost.py counts them (callgrind around each part, its warm-up, rounds and medians: Note
[Repeats that agree] in bench/cost.py), and the same parts' inclusive cost of memtrace's tracker
(`onTraceEntry`, callgrind_annotate over the last round's dumps). For comparing two builds of
the recorder quickly (a change to the Python stacks' path: issue 52), not for the tables of
docs/performance.md, which take cost.py's two repeats.

    python3 bench/cost_parts.py BUILD OUT [--mode python] [--depths 3,10,90] [--batches 1]
                                [--train] [--rounds 3]

BUILD's venv-torch-cuda runs it; the simulated GPU is MEMTRACE_SIMULATOR_DIR's, else BUILD's.
Prints one line a part: instructions a tensor (forward, step), memtrace's own self costs beside,
and the tracker's inclusive cost; OUT keeps the dumps and a JSON of the counts."""
import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import cost  # bench/cost.py, beside this script


def marginal(counts, prefix, short, long, n, key="1"):
    """(median of the long parts - median of the short ones) / n, for the counts under `key`."""
    def values(length):
        return [counts[label][key] for label in counts if label.startswith(f"{prefix}-{length}#")]
    return (statistics.median(values(long)) - statistics.median(values(short))) / n


def tracker_inclusive(dump):
    """memtrace's tracker's inclusive instructions in one dump (PyTorch's bridge calls it for every
    allocation and free)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                          capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:\(anonymous namespace\)::onTraceEntry\(", line)
        if match:
            return int(match.group(1).replace(",", ""))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--mode", default="python", choices=[m[0] for m in cost.MODES])
    parser.add_argument("--depths", default="3")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    build, work = Path(arguments.build).resolve(), Path(arguments.out)
    if not (build / "bench" / "libmemtrace_callgrind_toggle.so").is_file():
        raise SystemExit(f"{build}/bench/libmemtrace_callgrind_toggle.so is not built")
    work.mkdir(parents=True, exist_ok=True)
    (work / "measured.py").write_text(cost.MEASURED)
    sizes = {"tensors": [200, 1200], "depths": [int(d) for d in arguments.depths.split(",")],
             "gpt2": True, "timed_tensors": 2000, "rounds": 1,
             "batches": [int(b) for b in arguments.batches.split(",")], "train": arguments.train,
             **cost.WARM, "tensor_parts": arguments.rounds, "gpt2_parts": arguments.rounds}
    counts, files = cost.count(build, arguments.mode, "parts", work, sizes)
    last = f"#{arguments.rounds - 1}"
    parts = [(f"tensor-{d}", 200, 1200, 1000, "a tensor") for d in sizes["depths"]]
    parts += [(f"forward{b}", 1, 2, 1, "a forward") for b in sizes["batches"]]
    parts += [("train8", 1, 3, 2, "a step")] if arguments.train else []
    results = {}
    for prefix, short, long, n, unit in parts:
        total = marginal(counts, prefix, short, long, n)
        own = marginal(counts, prefix, short, long, n, "memtrace")
        tracker = (tracker_inclusive(files[f"{prefix}-{long}{last}"]) -
                   tracker_inclusive(files[f"{prefix}-{short}{last}"])) / n
        results[prefix] = {"instructions": total, "memtrace_self": own, "tracker_inclusive": tracker}
        print(f"{prefix}: {total:,.1f} instructions {unit}; memtrace's own {own:,.1f}; "
              f"its tracker inclusive {tracker:,.1f} (last round)")
    (work / "parts.json").write_text(json.dumps({"results": results, "counts": counts}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
