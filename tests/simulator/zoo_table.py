"""The zoo's table of docs/simulated-gpu.md ("The zoo"): each family of programs/families.py run
under `memtrace run --gpu h100`, one markdown row each: the traced peak beside PyTorch's own
requested peak of the same run, what of the peak is sized by answers nobody measured and by how
much it could be higher, the reads of device values that decided rows (a value decides them),
and the run's wall time on this machine.

    build/venv-torch-cuda/bin/python tests/simulator/zoo_table.py [FAMILY...]
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "simulator" / "programs" / "families.py"
BUILD = Path(os.environ.get("MEMTRACE_BUILD_DIR", ROOT / "build"))
FAMILIES = {
    "resnet": "ResNet-50, batch 8, 224 x 224, SGD",
    "efficientnet": "MBConv + squeeze-excitation, batch 16, 224 x 224, AdamW",
    "convnext": "ConvNeXt-T, batch 8, 224 x 224, AdamW",
    "unet": "U-Net, batch 4, 256 x 256, Adam",
    "rnn": "word_language_model LSTM (2 x 256, dropout), GRU (packed, fp16), LSTM with projections",
    "audio": "stft (n_fft 400) + mel + conformer-style block, AdamW; rfft, irfft, fft2",
    "diffusion": "diffusion U-Net denoising step, batch 4, bf16 autocast, AdamW",
    "linalg": "eigh, cholesky, svd inside a training step",
    "moe": "MoE layer, 8 experts, top-2, AdamW",
}
MIB = 2**20


def row(family):
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.bin"
        began = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "mem_tracer", "run", "--gpu", "h100", "-q", "-o", str(trace),
             str(PROGRAM), family],
            env={**os.environ, "PYTHONPATH": str(ROOT / "python")}, capture_output=True,
            text=True, check=False)
        seconds = time.monotonic() - began
        verdict = next((line.split(":")[1].split(" on ")[0].strip()
                        for line in result.stderr.splitlines()
                        if line.startswith(("== memtrace: FITS", "== memtrace: DID NOT FIT"))),
                       "none")
        said = json.loads(result.stdout.strip().splitlines()[-1])
        report = json.loads(subprocess.run(
            [str(BUILD / "bin" / "memtrace-report"), str(trace), "--format", "json", "--top", "0"],
            capture_output=True, text=True, check=True).stdout)
    peak = report["summary"]["peak_bytes"]
    equal = "equal" if peak == said["requested_peak"] else f"{said['requested_peak']:,}"
    sizes = report.get("simulated_sizes") or {"count": 0}
    at_peak = sizes.get("at_peak", {"bytes": 0, "extra_bytes": 0, "unbounded": 0})
    if not sizes["count"]:
        estimated = "none"
    else:
        parts = []
        if at_peak["bytes"]:
            bound = (f"{at_peak['unbounded']} unbounded" if at_peak["unbounded"] else
                     f"at most +{at_peak['extra_bytes'] / MIB:.2f} MiB")
            parts.append(f"{at_peak['bytes'] / MIB:.2f} MiB "
                         f"({100 * at_peak['bytes'] / peak:.1f} %), {bound}")
        zero = sum(r["count"] for r in sizes["rows"] if r["bytes"] == 0)
        if zero:
            unheld = sizes.get("unheld_at_most")
            parts.append(f"{zero} of 0 bytes, " +
                         ("no bound" if unheld is None else f"up to {unheld / MIB:.2f} MiB"))
        if not at_peak["bytes"]:
            parts.insert(0, "none held")
        estimated = "; ".join(parts)
    reads = report["device_reads"]
    decided = "no" if not reads["count"] else "yes: " + ", ".join(
        f"line {r.get('line', '?')} ({r['count']})" for r in reads["rows"])
    return (f"| {family} | {FAMILIES[family]} | {verdict} | {peak:,} | {equal} | "
            f"{sizes['count']} | {estimated} | {decided} | {seconds:.1f} s |")


def main():
    print("| family | model | verdict | traced peak (B) | PyTorch's requested peak | answers "
          "nobody measured | of the peak (bound) | a value decides | time |")
    print("|---|---|---|---:|---|---:|---|---|---:|")
    for family in sys.argv[1:] or FAMILIES:
        print(row(family), flush=True)


if __name__ == "__main__":
    main()
