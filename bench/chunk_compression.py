"""What a compressor on whole chunks would make of a trace (issue 52, item 4), beside the bytes
as written, and how much of an event its time delta takes: the figures docs/performance.md
("Trace size") weighed before choosing the event tables over a compressor.

    python3 bench/chunk_compression.py BUILD_DIR TRACE... [--gpt2 STACKS OUT [--forwards N]]

For each trace: its events (memtrace-report parse), bytes an event as written (whole chunks and
their headers), then each chunk's payload compressed alone plus its 12-byte header, by zlib
(levels 1 and 6), zstd (-1, -3) and lz4 (-1), their command lines (Debian's zstd and lz4
packages); zstd -3 over all the payloads at once; `memtrace-report compact`'s file (version 9: Note
[Compressed chunks]); and the events' time deltas as varints in the file's time unit, alone and
compressed by zstd -19. --gpt2 first traces GPT-2 small on the simulated H200 under BUILD_DIR's
libmemtrace.so (three forwards at batch 1, or --forwards N, then two AdamW steps at batch 8;
MEMTRACE_STACKS=STACKS)
into OUT, and reads it with the rest."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GPT2 = r'''
import torch, transformers
torch.manual_seed(0)
with torch.device("cuda"):
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
ids = torch.randint(0, 50257, (1, 128), device="cuda")
for _ in range(FORWARDS):
    with torch.no_grad():
        model(ids, use_cache=False)
    torch.cuda.synchronize()
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 50257, (8, 128), device="cuda")
for _ in range(2):
    model(ids, labels=ids, use_cache=False).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
'''


def chunks(path):
    data = Path(path).read_bytes()
    end = 16
    while end + 12 <= len(data):
        size = int.from_bytes(data[end:end + 4], "little")
        if size == 0:
            break
        yield data[end + 12:end + 12 + size]
        end += 12 + size


def command(tool, level, data):
    return len(subprocess.run([tool, level, "-c"] + (["--no-check"] if tool == "zstd" else []),
                              input=data, capture_output=True, check=True).stdout)


def varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def measure(report, path):
    parsed = subprocess.run([report, "parse", path], capture_output=True, text=True,
                            check=True).stdout
    events, times, last, unit = 0, bytearray(), 0, 1
    for line in parsed.splitlines():
        kind = line.split(" ", 1)[0]
        if kind == "process":  # version 8's time unit: the deltas as the file writes them
            found = re.search(r" time_unit_ns=(\d+)", line)
            unit = int(found.group(1)) if found else 1
        found = re.search(r" t=(\d+)", line)
        if found and kind in ("alloc", "free", "marker", "segment", "device-read",
                              "device-memory", "failed-alloc"):
            time = int(found.group(1))
            if kind in ("alloc", "free"):
                events += 1
                times += varint(max(0, time - last) // unit)
            last = max(last, time)
    if not events:
        raise SystemExit(f"{path}: no memory events")
    payloads = list(chunks(path))
    figures = {"chunks": len(payloads), "as written": sum(12 + len(p) for p in payloads)}
    for name, size in (("zlib -1", lambda p: len(zlib.compress(p, 1))),
                       ("zlib -6", lambda p: len(zlib.compress(p, 6))),
                       ("zstd -1", lambda p: command("zstd", "-1", p)),
                       ("zstd -3", lambda p: command("zstd", "-3", p)),
                       ("lz4 -1", lambda p: command("lz4", "-1", p))):
        figures[name] = sum(12 + size(p) for p in payloads)
    figures["zstd -3, whole payload"] = command("zstd", "-3", b"".join(payloads))
    with tempfile.TemporaryDirectory() as folder:  # what memtrace itself makes of it (version 9)
        compacted = Path(folder) / "compacted.bin"
        subprocess.run([report, "compact", path, "-o", compacted], capture_output=True, check=True)
        figures["memtrace-report compact"] = compacted.stat().st_size - 16  # as above: no file header
    figures["time deltas"] = len(times)
    figures["time deltas, zstd -19"] = command("zstd", "-19", bytes(times))
    print(f"{path}: {events:,} events, {figures.pop('chunks')} chunks; bytes an event:")
    for name, value in figures.items():
        print(f"  {name:24} {value / events:6.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("traces", nargs="*")
    parser.add_argument("--gpt2", nargs=2, metavar=("STACKS", "OUT"))
    parser.add_argument("--forwards", type=int, default=3,
                        help="--gpt2's forwards at batch 1 before its two steps (0: the steps alone)")
    arguments = parser.parse_intermixed_args()
    build = Path(arguments.build).resolve()
    for tool in ("zstd", "lz4"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (apt-get install {tool})")
    traces = list(arguments.traces)
    if arguments.gpt2:
        stacks, out = arguments.gpt2
        sys.path.insert(0, str(ROOT / "python"))
        from mem_tracer import simulated_gpu
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
        env.update(PYTHONPATH=str(ROOT / "python"), MEMTRACE_STACKS=stacks, MEMTRACE_OUTPUT=out,
                   LD_PRELOAD=str(build / "allocator" / "libmemtrace.so"))
        env = simulated_gpu.environment("h200", base=env)
        script = GPT2.replace("FORWARDS", str(arguments.forwards))
        subprocess.run([str(build / "venv-torch-cuda" / "bin" / "python"), "-c", script], env=env,
                       check=True, capture_output=True)
        traces.insert(0, out)
    if not traces:
        raise SystemExit("no trace given (TRACE... or --gpt2 STACKS OUT)")
    for path in traces:
        measure(str(build / "bin" / "memtrace-report"), path)


if __name__ == "__main__":
    main()
