"""What memtrace costs a PyTorch program, counted in instructions around the measured work only,
with two repeats that agree (issue 52), beside PyTorch's own `_record_memory_history`; and the
same work's bytes per event and wall-clock time, as second figures.

    python3 bench/cost.py BUILD_DIR [--jobs N] [--json OUT] [--quick] [--modes M,...] [--docs]
    python3 bench/cost.py --from-json OUT [--modes M,...] [--docs]   an earlier run's tables
    python3 bench/cost.py --check-docs          docs/performance.md's tables are docs/cost.json's
    python3 bench/cost.py BUILD_DIR --bytes [--jobs N] [--json OUT]   bytes an event only

Everything runs on memtrace's simulated H200 (python/mem_tracer/simulated_gpu.py) under
BUILD_DIR/venv-torch-cuda, so the caching allocator's host code, the dispatcher and the
bridge are PyTorch's own. Each mode is one process per repeat (two repeats), counted by
`valgrind --tool=callgrind --instr-atstart=no`, the script switching the instrumentation on
and off around each measured part itself (bench/callgrind_toggle.c). Every part is run at two
lengths in the same process, after a warm-up, in several rounds, each part its own dump, and the
figure is the marginal count: (the median of the long parts - the median of the short ones) /
(the difference in tensors, forwards or steps). Then one process a mode without valgrind times
the same parts (wall-clock, median and range of ROUNDS rounds) and reads its trace's bytes.

Note [Instructions counted around the work]
Counting the whole process (bench/torch_allocator_instructions.py, before this) counted about
5.9e9 instructions of start-up and torch's import around a few million of measured work, and
the start-up varied by 5-8e6 between identical runs: ±3-4k instructions a tensor over 2,000
tensors, more than memtrace's whole cost without stacks. Here callgrind instruments nothing
until the measured script calls memtrace_bench_start() (CALLGRIND_ZERO_STATS, then
CALLGRIND_START_INSTRUMENTATION) and stops at memtrace_bench_stop() (which dumps what was
counted under the part's label), so a dump holds only the part. Python's hash seed is fixed
(PYTHONHASHSEED=0: a set's or dict's layout, hence its probing, must not vary). Every thread
is counted, together (--separate-threads=no: a client request's dump would hold only the
thread that asked, and a training step's backward runs on autograd's device thread); so is
memtrace's flusher, which wakes every 100 ms of wall time (tracer/recorder/flusher.cpp): the
few instructions it counts in a part vary with the machine's speed (the self-check, --check,
counts the recording thread alone: its repeats agree within 0.003 %). What else made two
processes differ, and what the bench does about it: Note [Repeats that agree]. The
figures print both repeats and their difference."""
import argparse
import concurrent.futures
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from trace_chunks import chunk_bytes  # bench/trace_chunks.py, beside this script

ROOT = Path(__file__).resolve().parent.parent

# The measured script. Module-level code on purpose: the tensor loop's stack is <module>, loop,
# step (3 frames) at the smallest depth, as in the figures, and `descend` adds one frame
# per level above `loop` for the depth table.
MEASURED = r'''
import ctypes, json, os, statistics, sys, time
config = json.loads(sys.argv[1])
mode = config["mode"]
toggle = ctypes.CDLL(config["toggle"])
toggle.memtrace_bench_stop.argtypes = (ctypes.c_char_p,)
counting = bool(toggle.memtrace_bench_on_valgrind())
if mode == "switch_allocator":
    import mem_tracer
    mem_tracer.switch_allocator()
import torch
x = torch.empty(256, device="cuda")  # CUDA, the allocator and its first segment
traced = mode not in ("untraced", "async-untraced") and not mode.startswith("history")
if mode == "switch_allocator":
    mem_tracer.start_tracing(config["trace"], stacks="python")
if mode.startswith("history"):
    torch.cuda.memory._record_memory_history(stacks=mode.split("-")[1])
memtrace = ctypes.CDLL(config["library"]) if traced else None
results = {}


def trace_bytes():
    """The bytes of the trace's whole chunks once flushed (as bench/record_bench.cpp reads them:
    a mapped trace's file is longer than its records)."""
    if memtrace is None:
        return 0
    memtrace.memtrace_flush()
    end = 16
    with open(config["trace"], "rb") as file:
        while True:
            file.seek(end)
            header = file.read(12)
            size = int.from_bytes(header[:4], "little") if len(header) == 12 else 0
            if size == 0:
                return end
            end += 12 + size


def events():
    """Allocations and frees PyTorch's allocator made so far (None where it keeps no count)."""
    if mode == "switch_allocator" or mode.startswith("async"):
        return None
    stats = torch.cuda.memory_stats()
    return stats["allocation.all.allocated"] + stats["allocation.all.freed"]


def begin():
    if counting:
        # Note [Repeats that agree]: what is still buffered goes to the file outside the part.
        if memtrace is not None:
            memtrace.memtrace_flush()
        toggle.memtrace_bench_start()
        return None
    torch.cuda.synchronize()
    return trace_bytes(), events(), time.perf_counter()


def end(label, n, state):
    if counting:
        # The part's own records reach the file inside it, checksum and all, however many of the
        # flusher's 100 ms fell into it (Note [Repeats that agree]).
        if memtrace is not None:
            memtrace.memtrace_flush()
        toggle.memtrace_bench_stop(label.encode())
        return
    torch.cuda.synchronize()
    seconds = time.perf_counter() - state[2]
    after = events()
    result = results.setdefault(label, {"n": n, "seconds": [], "bytes": [], "events": []})
    result["seconds"].append(seconds)
    result["bytes"].append(trace_bytes() - state[0])
    result["events"].append(None if after is None else after - state[1])


probe = False
depths = []


def step():
    if probe:
        frame, count = sys._getframe(), 0
        while frame is not None:
            frame, count = frame.f_back, count + 1
        depths.append(count)
    t = torch.empty(256, device="cuda")
    del t


def loop(n):
    for _ in range(n):
        step()


def descend(k, n):
    if k > 1:
        descend(k - 1, n)
    else:
        loop(n)


# Counting: config["tensor_parts"] (config["gpt2_parts"]) rounds, each running every length once in turn (interleaved, so that a
# heap that drifts from round to round weighs on both lengths alike), each part its own dump
# `label-n#round` (Note [Repeats that agree]). Timing: config["rounds"] rounds of the timed length.
# The loops are written out at module level, not in a helper: a helper's frame would deepen every
# Python stack the parts record (the tensor loop is 3 frames deep).
if counting:
    plan = [(round_, n) for round_ in range(config["tensor_parts"]) for n in config["tensors"]]
else:
    plan = [(None, config["timed_tensors"])] * config["rounds"]
for depth in config["depths"]:
    probe, depths[:] = True, []
    if depth == 3:
        loop(1)
    else:
        descend(depth - 3, 1)
    probe = False
    assert depths == [depth], (depth, depths)
    if depth == 3:
        loop(200)
    else:
        descend(depth - 3, 200)
    for round_, n in plan:
        state = begin()
        if depth == 3:
            loop(n)
        else:
            descend(depth - 3, n)
        end(f"tensor-{depth}-{n}" + ("" if round_ is None else f"#{round_}"), n, state)


def gpt2_plan(lengths):
    if counting:
        return [(round_, n) for round_ in range(config["gpt2_parts"]) for n in lengths]
    return [(None, lengths[-1])] * config["rounds"]


if config["gpt2"]:
    import transformers
    torch.manual_seed(0)
    with torch.device("cuda"):  # made on the device: no host initialisation to wait for
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    for batch in config["batches"]:
        ids = torch.randint(0, 50257, (batch, 128), device="cuda")
        def forward():
            with torch.no_grad():
                model(ids, use_cache=False)
            torch.cuda.synchronize()
        for _ in range(config["warm_forwards"]):
            forward()
        for round_, n in gpt2_plan(config["forwards"]):
            state = begin()
            for _ in range(n):
                forward()
            end(f"forward{batch}-{n}" + ("" if round_ is None else f"#{round_}"), n, state)
    if config["train"]:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, 50257, (8, 128), device="cuda")
        def train_step():
            loss = model(ids, labels=ids, use_cache=False).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        for _ in range(config["warm_steps"]):
            train_step()
        for round_, n in gpt2_plan(config["steps"]):
            state = begin()
            for _ in range(n):
                train_step()
            end(f"train8-{n}" + ("" if round_ is None else f"#{round_}"), n, state)

if mode == "switch_allocator":
    mem_tracer.stop_tracing()
if not counting:
    print(json.dumps(results))
'''

# (mode, the table's name for it, environment, whether it runs GPT-2)
MODES = [
    ("untraced", "untraced (PyTorch's caching allocator)", {}, True),
    ("none", "memtrace's default (inside PyTorch's allocator), no stacks", {"stacks": "none"}, True),
    ("python", "memtrace's default, Python stacks", {"stacks": "python"}, True),
    ("native", "memtrace's default, native stacks", {"stacks": "native"}, False),
    ("all", "memtrace's default, Python and native stacks", {"stacks": "all"}, False),
    ("switch_allocator", "`switch_allocator()` + `start_tracing(stacks=\"python\")`", {}, False),
    ("async-untraced", "`backend:cudaMallocAsync`, untraced", {"async": True}, False),
    ("async-python", "the hook path: `backend:cudaMallocAsync` traced, Python stacks",
     {"async": True, "stacks": "python"}, False),
    ("history-python", "`_record_memory_history(stacks=\"python\")`", {}, True),
    ("history-all", "`_record_memory_history(stacks=\"all\")`", {}, False),
]
BASELINE = {"async-python": "async-untraced"}  # what a mode's "over untraced" is against
DEPTHS = (3, 10, 30, 50, 90)


def simulator_dir(build):
    """The simulated GPU's build folder: MEMTRACE_SIMULATOR_DIR's, as mem_tracer._native reads it
    (a tree that only rebuilt the recorder runs on another tree's simulator), else BUILD's."""
    return Path(os.environ.get("MEMTRACE_SIMULATOR_DIR") or build / "simulator")


def environment(build, mode, work, name):
    sys.path.insert(0, str(ROOT / "python"))
    from mem_tracer import simulated_gpu
    _, _, options, _ = next(m for m in MODES if m[0] == mode)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMTRACE_") and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    env["PYTHONPATH"] = str(ROOT / "python")
    env["PYTHONHASHSEED"] = "0"
    if options.get("async"):
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    if mode == "switch_allocator":  # the package loads the measured build's library, not its own
        env["MEMTRACE_LIBRARY"] = str(build / "allocator" / "libmemtrace.so")
    if "stacks" in options:
        env.update(LD_PRELOAD=str(build / "allocator" / "libmemtrace.so"),
                   MEMTRACE_STACKS=options["stacks"], MEMTRACE_OUTPUT=str(work / f"{name}.bin"))
    return simulated_gpu.environment("h200", base=env)


def gpt2(mode, sizes):
    return next(m for m in MODES if m[0] == mode)[3] and sizes["gpt2"]


def configuration(build, mode, work, name, sizes):
    return {"mode": mode, "toggle": str(build / "bench" / "libmemtrace_callgrind_toggle.so"),
            "library": str(build / "allocator" / "libmemtrace.so"),
            "trace": str(work / f"{name}.bin"), "depths": sizes["depths"],
            "tensors": sizes["tensors"], "timed_tensors": sizes["timed_tensors"],
            "gpt2": gpt2(mode, sizes), "forwards": [1, 2], "steps": [1, 3],
            "batches": sizes.get("batches", [1, 8]), "train": sizes.get("train", True),
            "rounds": sizes["rounds"], **{key: sizes.get(key, value) for key, value in WARM.items()}}


# How many rounds of each part a counting process runs (medians: Note [Repeats that agree]) and
# the warm-up before them.
WARM = {"tensor_parts": 3, "gpt2_parts": 5, "warm_forwards": 8, "warm_steps": 5}


# Note [Repeats that agree]
# Two processes of the same mode counted the same work 0.001-0.383 % apart (GPT-2's forward with
# Python stacks the worst, 69 k instructions a forward). Two things the bench could fix, it does:
# - addresses: the kernel lays out the stacks, the heap and every mapping at random (ASLR), and
#   much of what runs hashes or compares addresses (memtrace's walk: the table of frames by
#   address, Note [Python stacks flat in depth]; PyTorch's map of blocks by pointer; CPython's
#   dicts and sets of objects hashed by id). Every count runs under `setarch -R` (the layout the
#   same each time, for valgrind and so for the program it runs), as PYTHONHASHSEED=0 fixes the
#   hash of strings;
# - the wall clock in memtrace's flushes: the flusher closes a chunk, and computes its checksum,
#   when its 100 ms come round, so how much of that fell into a part followed the machine's speed
#   (mode `none` differed by 19.8 instructions a tensor of CRC-32C). The measured script flushes
#   the trace before each part (outside it) and at its end (inside it): every part checksums
#   exactly its own records; a wake of the flusher inside a part finds little left to do.
# What was left (0.001-0.377 % apart, 2026-11-29) was mostly not between the processes but
# between the parts of one process, measured by counting each of six rounds of GPT-2's forward
# (batch 1) as its own dump and differencing the dumps by function (self costs):
# - warm-up: a forward still costs less the more forwards ran before it, well after the two warm
#   ones the bench ran: the 3rd forward of an untraced process 97.6 k instructions (0.6 %) more
#   than its 13th, nearly all of it CPython's (`unicodekeys_lookup_unicode` 20 k, `_Py_dict_lookup`
#   18 k, `_PyDict_LoadGlobal`, `_PyType_Lookup`, `find_name_in_mro`, `_Py_Specialize_*`,
#   `_PyCode_Quicken`: 3.11's specializing interpreter still quickening code and specializing
#   its global and attribute loads, each failed try backing off for longer). The marginal between
#   the 3rd and the 4th-5th forwards fell in the middle of that; the same holds for the training
#   step (AdamW's state, made at the first step, and the backward's code);
# - a part now and then that pays for glibc's malloc putting its heap in order:
#   `malloc_consolidate` and `unlink_chunk` 120 k instructions in one part of 12 (0.7 % of a
#   forward), in whichever part the heap's state calls for it.
# So each counting process now warms up for WARM's forwards and steps, runs WARM's rounds of
# each part, each round both lengths in turn (so that what still drifts weighs on both alike),
# each part its own dump, and the figure is the median of the long parts less the median of the
# short ones: a consolidation falls in one round and the median leaves it out. The figure is
# still everything the program runs in a steady state, every thread, nothing subtracted; what the
# median leaves out (the range of the rounds' own marginals) is printed beside it, and so is
# memtrace's own part (its objects' self costs, which two processes count alike within 0.012 % of
# a forward). After that, two processes still differed by an offset the same in every round
# (0.1-0.27 % on GPT-2's forward), mostly CPython's small-object allocator (`_PyObject_Free`,
# `_PyObject_Malloc`: 20 k of the 25-28 k a forward between two settled parts of untraced's two
# processes). Its cause, found by taking it away (the one change between the runs with and
# without the offset): the measured script sat in the folder every process wrote its dumps and
# traces to, several processes at once. Python puts a script's folder first on sys.path, and its
# import system (FileFinder) lists that folder and keeps every name in it as a string on the
# small-object heap: each process listed however many dumps the others had written by then, and
# so began its measured parts from a heap of its own. Each process's script now sits alone in a
# folder of its own (measured_script()), the dumps and traces elsewhere: untraced's two processes
# count each tensor-loop and forward part alike to within 3 instructions (its first one-forward
# part 16,665,484 in both, 2026-11-30), and the small-object allocator's share, still counted
# apart by function (self_costs()), is printed beside the figures. What still differs between
# two processes is the training step's: its backward runs on autograd's device thread, and how
# the main thread and that one interleave under valgrind (one thread at a time, switched when one
# blocks and by the wall clock) differs by process: parts 50-190 k instructions apart, the
# medians 0.004-0.127 % (Python stacks the worst, 2026-11-30). Tried before that: PYTHONMALLOC=malloc (the
# forward 5 % dearer, its parts spread 1 %, the repeats 0.344 % apart: worse, and not what the
# program costs). The training step's rounds still spread most inside one process (autograd's
# engine sharing the backward between its threads another way each time).
FIXED_ADDRESSES = ["setarch", os.uname().machine, "-R"]


def measured_script(work, name):
    """The measured script in a folder of its own, which holds nothing else, ever: Python puts a
    script's folder first on sys.path and its import system lists that folder once and keeps
    every name in it (a set of strings, on CPython's small-object heap). With the script beside
    the dumps and traces, each process listed however many files the other processes had
    written by then, and started its measured parts from a different heap (Note [Repeats that
    agree])."""
    folder = work / "scripts" / name
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "measured.py"
    script.write_text(MEASURED)
    return script


def count(build, mode, repeat, work, sizes):
    """One process of `mode` under callgrind: {label: {thread: instructions}} and the dumps."""
    name = f"{mode}-{repeat}"
    script = measured_script(work, name)
    out = work / f"callgrind-{name}.out"
    env = environment(build, mode, work, name)
    python = build / "venv-torch-cuda" / "bin" / "python"
    subprocess.run([*FIXED_ADDRESSES, "valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=no",
                    f"--callgrind-out-file={out}", str(python), str(script),
                    json.dumps(configuration(build, mode, work, name, sizes))],
                   env=env, check=True, capture_output=True, timeout=3600)
    counts, files = parse_dumps(work, name)
    # Nothing is counted outside the parts: the dump at exit holds nothing of the main thread.
    assert counts.get("Program termination", {}).get("1", 0) == 0, counts.get("Program termination")
    for label, dump in files.items():
        if label != "Program termination":
            counts[label].update(self_costs(dump))
    return counts, files


# memtrace's own objects: the recorder and its bridge into PyTorch's allocator.
MEMTRACE_OBJECTS = re.compile(r"/libmemtrace(-torch-[^/]*)?\.so$")
# CPython's small-object allocator (Objects/obmalloc.c; pymalloc's own helpers are inlined into
# these in 3.11's builds, named here in case a build keeps them apart).
PYMALLOC_FUNCTIONS = re.compile(
    r"^(_?PyObject_(Malloc|Calloc|Realloc|Free)|pymalloc_\w+|insert_to_(used|free)pool|"
    r"allocate_from_new_pool|new_arena|_PyObject_Arena\w+)$")


def self_costs(dump):
    """{"memtrace": the instructions a dump counts in memtrace's own objects, "pymalloc": in
    CPython's small-object allocator}, self costs (what their own code ran, not what it called),
    read from callgrind's format: each cost line counts to the function the last `fn=` named and
    the object the last `ob=` named (a name is given where first used, by `ob=`/`cob=` or
    `fn=`/`cfn=`, and by its number after that); the line after `calls=` is the callee's
    inclusive cost, not the caller's own."""
    objects, functions, in_memtrace, in_pymalloc, skip = {}, {}, False, False, False
    totals = {"memtrace": 0, "pymalloc": 0}
    with open(dump, errors="replace") as file:
        for line in file:
            if skip:
                skip = False
            elif line[:1].isdigit() or line[:1] in "+-*":
                if in_memtrace or in_pymalloc:
                    fields = line.split()
                    cost = int(fields[1]) if len(fields) > 1 else 0
                    totals["memtrace" if in_memtrace else "pymalloc"] += cost
            elif line.startswith(("ob=", "cob=")):
                match = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line.strip())
                if match.group(2) is not None:
                    objects[match.group(1)] = bool(MEMTRACE_OBJECTS.search(match.group(2)))
                if line.startswith("ob="):
                    in_memtrace = objects.get(match.group(1), False)
            elif line.startswith(("fn=", "cfn=")):
                match = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.strip())
                if match.group(2) is not None:
                    functions[match.group(1)] = bool(PYMALLOC_FUNCTIONS.match(match.group(2)))
                if line.startswith("fn="):
                    in_pymalloc = functions.get(match.group(1), False) and not in_memtrace
            elif line.startswith("calls="):
                skip = True
    return totals


def parse_dumps(work, name):
    """{label: {thread: instructions}} of one process's dumps, and the main thread's dump files."""
    counts, files = {}, {}
    for dump in work.glob(f"callgrind-{name}.out*"):
        text = dump.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: (?:Client Request: )?(.*)$", text, re.MULTILINE)
        if trigger is None:  # the empty file callgrind leaves under the plain name
            continue
        label = trigger.group(1)
        thread = re.search(r"^thread: (\d+)$", text, re.MULTILINE)
        thread = thread.group(1) if thread else "1"  # all threads together
        total = re.search(r"^totals: (\d+)$", text, re.MULTILINE)
        if total is None:  # a dump still being written (a process read while it runs)
            continue
        total = int(total.group(1))
        counts.setdefault(label, {})[thread] = total
        if thread == "1":
            files[label] = dump
    return counts, files


def record_trace_split(files, short, long, tensors):
    """Per tensor, inclusive: PyTorch's `record_trace` and memtrace's tracker under it
    (callgrind_annotate over the two lengths' dumps, differenced)."""
    def inclusive(dump):
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                              capture_output=True, text=True, check=True).stdout
        found = {}
        for line in text.splitlines():
            match = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:(.*?) \[", line)
            if not match:
                continue
            value, function = int(match.group(1).replace(",", "")), match.group(2)
            for key, pattern in (("record_trace", "DeviceCachingAllocator::record_trace("),
                                 ("tracker", "onTraceEntry(")):
                if pattern in function:
                    found[key] = found.get(key, 0) + value
        return found
    a, b = inclusive(files[short]), inclusive(files[long])
    return {key: (b.get(key, 0) - a.get(key, 0)) / tensors for key in set(a) | set(b)}


def timed(build, mode, work, sizes):
    """One process of `mode` without valgrind: wall-clock seconds, trace bytes, events."""
    name = f"{mode}-timed"
    env = environment(build, mode, work, name)
    python = build / "venv-torch-cuda" / "bin" / "python"
    output = subprocess.run([str(python), str(measured_script(work, name)),
                             json.dumps(configuration(build, mode, work, name, sizes))],
                            env=env, check=True, capture_output=True, text=True, timeout=3600).stdout
    for path in work.glob(f"{name}.bin*"):
        path.unlink()
    return json.loads(output.strip().splitlines()[-1])


# The self-check (--check): the same toggling around memtrace's record path without torch, so
# that it runs in seconds: bench/workload.cpp's allocation loop on the simulated card's CUDA runtime,
# traced with Python stacks, from Python with the GIL released (as PyTorch's ops are).
CHECK = r'''
import ctypes, sys
toggle = ctypes.CDLL(sys.argv[1])
toggle.memtrace_bench_stop.argtypes = (ctypes.c_char_p,)
assert toggle.memtrace_bench_on_valgrind() == 1, "not under valgrind"
workload = ctypes.CDLL(sys.argv[2])
workload.bench_hooked.restype = ctypes.c_uint64
workload.bench_hooked.argtypes = (ctypes.c_long, ctypes.c_long)
memtrace = ctypes.CDLL(None)
memtrace.memtrace_start.argtypes = (ctypes.c_char_p,)
assert memtrace.memtrace_start(sys.argv[3].encode()) == 0
workload.bench_hooked(200, 4096)
for n in (100, 2100):
    toggle.memtrace_bench_start()
    workload.bench_hooked(n, 4096)
    toggle.memtrace_bench_stop(f"pairs-{n}".encode())
memtrace.memtrace_close()
'''


def check(build, work):
    """Two processes of CHECK: each part counted, nothing outside them, the repeats within
    0.1 % of each other. Returns the instructions per allocation+free pair of each repeat.
    Counts the recording thread alone (--separate-threads=yes): memtrace's flusher wakes by
    wall time, and a loaded machine (ctest -j) would add its wakes to one repeat's count."""
    (work / "check.py").write_text(CHECK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update(LD_PRELOAD=str(build / "allocator" / "libmemtrace.so"), MEMTRACE_AUTOSTART="0",
               MEMTRACE_STACKS="python", PYTHONHASHSEED="0",
               LD_LIBRARY_PATH=str(simulator_dir(build) / "lib"),
               MEMTRACE_GPU_PROFILE=str(simulator_dir(build) / "profiles" / "h200.json"))
    per_pair = []
    for repeat in (1, 2):
        out = work / f"callgrind-check-{repeat}.out"
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                        f"--callgrind-out-file={out}", sys.executable, str(work / "check.py"),
                        str(build / "bench" / "libmemtrace_callgrind_toggle.so"),
                        str(build / "bench" / "libmemtrace_bench_workload.so"),
                        str(work / f"check-{repeat}.bin")],
                       env=env, check=True, capture_output=True, timeout=600)
        counts = parse_dumps(work, f"check-{repeat}")[0]
        assert counts.get("Program termination", {}).get("1", 0) == 0, counts
        short, long = counts["pairs-100"]["1"], counts["pairs-2100"]["1"]
        assert 0 < short < long, (short, long)
        per_pair.append((long - short) / 2000)
    assert agreement(*per_pair) <= 0.1, per_pair
    return per_pair




def existing_workloads(build, work):
    """Bytes per event on the workloads the other benchmarks and tests use, on the simulated
    card's CUDA runtime: bench/record_bench's loops (median of its repetitions), bench/python_stacks.py's
    (10 and 30 frames), and tests/preload/programs/threads (8 threads at once)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update(LD_PRELOAD=str(build / "allocator" / "libmemtrace.so"), MEMTRACE_AUTOSTART="0",
               MEMTRACE_BENCH_DIR=str(work), LD_LIBRARY_PATH=str(simulator_dir(build) / "lib"),
               MEMTRACE_GPU_PROFILE=str(simulator_dir(build) / "profiles" / "h200.json"))
    rows = []
    output = subprocess.run([build / "bench" / "record_bench", "--benchmark_format=json",
                             "--benchmark_filter=Traced"], env=env, capture_output=True, text=True,
                            check=True).stdout
    for entry in json.loads(output)["benchmarks"]:
        if entry.get("aggregate_name") == "median":
            rows.append((f"bench/record_bench {entry['run_name'].split('/')[0]}",
                         entry["bytes_per_event"]))
    output = subprocess.run([sys.executable, ROOT / "bench" / "python_stacks.py",
                             build / "bench" / "libmemtrace_bench_workload.so"], env=env,
                            capture_output=True, text=True, check=True).stdout
    for line in output.splitlines():
        result = json.loads(line)
        if result["stack"] == "same":  # the file holds both shapes: one figure per depth and GIL
            name = (f"bench/python_stacks.py, {result['python_depth']} frames, GIL "
                    f"{result['gil']}, same and varying")
            rows.append((name, result["bytes_per_event"]))
    trace = work / "threads.bin"
    env.pop("MEMTRACE_AUTOSTART")
    env["MEMTRACE_OUTPUT"] = str(trace)
    output = subprocess.run([build / "tests" / "preload" / "bin" / "threads"], env=env,
                            capture_output=True, text=True, check=True).stdout
    made = dict(line.split() for line in output.splitlines())
    events = int(made["allocations"]) + int(made["frees"])
    rows.append((f"tests/preload/programs/threads: 8 threads at once ({events:,} events)",
                 chunk_bytes(trace) / events))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", nargs="?", default=str(ROOT / "build"))
    parser.add_argument("--jobs", type=int, default=3, help="processes at once (counts do not change)")
    parser.add_argument("--json", default=None, help="also write every count here")
    parser.add_argument("--quick", action="store_true",
                        help="two modes, depth 3, short loops, no GPT-2 (minutes)")
    parser.add_argument("--check", action="store_true",
                        help="the self-check, without torch (seconds): the toggling counts the "
                             "parts and nothing else, and two repeats agree")
    parser.add_argument("--bytes", action="store_true",
                        help="bytes per event only, no valgrind: every traced mode's tensor loop, "
                             "GPT-2 (no stacks, Python stacks) and the other benchmarks' workloads")
    parser.add_argument("--from-json", default=None, help="print the tables of an earlier run's --json")
    parser.add_argument("--modes", default=None,
                        help="only these modes, comma-separated (a partial re-take; the other "
                             "benchmarks' bytes are left out)")
    parser.add_argument("--keep", default=None,
                        help="count in this folder and keep callgrind's dumps there (for callgrind_annotate)")
    parser.add_argument("--docs", action="store_true",
                        help="merge the run's (or --from-json's) modes into docs/cost.json and "
                             "rewrite docs/performance.md's tables (Note [The cost tables regenerated])")
    parser.add_argument("--check-docs", action="store_true",
                        help="docs/performance.md's tables are docs/cost.json's (no valgrind; the "
                             "docs test runs it)")
    parser.add_argument("--code", default=None,
                        help="what the counted build is, for docs/cost.json (default: this "
                             "checkout's commit)")
    parser.add_argument("--when", default=None,
                        help="when an earlier run's --json was counted, for --from-json --docs")
    arguments = parser.parse_args()
    if arguments.check_docs:
        problems = check_docs()
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            raise SystemExit(1)
        print(f"{PERFORMANCE.name}'s cost tables are {COST_DATA.name}'s")
        return
    if arguments.from_json:
        data = json.loads(Path(arguments.from_json).read_text())
        if arguments.modes:  # some of the run's modes only (those it finished, say)
            unknown = set(arguments.modes.split(",")) - set(data["modes"])
            if unknown:
                raise SystemExit(f"{arguments.from_json} has no mode(s) {', '.join(sorted(unknown))}")
            data["modes"] = [m for m in data["modes"] if m in arguments.modes.split(",")]
        if arguments.docs:
            if "runs" in data:  # docs/cost.json itself: the blocks rendered again
                origin = None
            else:
                origin = data.get("origin") or {}
                origin = {"code": arguments.code or origin.get("code"),
                          "when": arguments.when or origin.get("when"),
                          "command": origin.get("command") or command_line(data["modes"])}
                if not origin["code"] or not origin["when"]:
                    raise SystemExit(f"{arguments.from_json} does not say what was counted when: "
                                     "give --code and --when")
            write_docs(data, origin)
        report(data)
        return
    build = Path(arguments.build).resolve()
    if not (build / "bench" / "libmemtrace_callgrind_toggle.so").is_file():
        raise SystemExit(f"{build}/bench/libmemtrace_callgrind_toggle.so is not built "
                         "(valgrind's headers missing?)")
    if arguments.check:
        with tempfile.TemporaryDirectory(prefix="memtrace-cost-check-") as work:
            first, second = check(build, Path(work))
        print(f"instructions per traced allocation+free pair (Python stacks, simulated card): "
              f"{first:,.1f} / {second:,.1f}")
        return
    if arguments.bytes:
        bytes_per_event(build, arguments.jobs, arguments.json)
        return
    if arguments.quick and arguments.docs:
        raise SystemExit("--quick's short loops do not go into docs/performance.md: leave out --docs")
    if arguments.quick:
        sizes = {"tensors": [20, 120], "depths": [3], "gpt2": False, "timed_tensors": 2000,
                 "rounds": 3}
        modes = ["untraced", "none"]
    else:
        sizes = {"tensors": [200, 1200], "depths": list(DEPTHS), "gpt2": True,
                 "timed_tensors": 20000, "rounds": 7}
        modes = [m[0] for m in MODES]
    sizes.update(WARM)
    if arguments.modes:
        unknown = set(arguments.modes.split(",")) - {m[0] for m in MODES}
        if unknown:
            raise SystemExit(f"unknown mode(s) {', '.join(sorted(unknown))}: the modes are "
                             f"{', '.join(m[0] for m in MODES)}")
        modes = [m for m in modes if m in arguments.modes.split(",")]
    short, long = sizes["tensors"]
    # Every result is written as it comes (--json, or BUILD_DIR/bench-cost.json), so that a run
    # that fails late keeps what it counted, and --from-json prints the tables again.
    saved = Path(arguments.json) if arguments.json else build / "bench-cost.json"
    began = datetime.datetime.now(datetime.timezone.utc)
    data = {"sizes": sizes, "modes": modes, "counts": {}, "record_trace_split": {}, "existing": [],
            "origin": {"code": arguments.code or checkout_commit(),
                       "command": command_line(modes if arguments.modes else None, arguments.jobs)}}
    with tempfile.TemporaryDirectory(prefix="memtrace-cost-") as temporary:
        work = Path(arguments.keep or temporary)
        work.mkdir(parents=True, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(arguments.jobs) as pool:
            jobs = {pool.submit(timed, build, mode, work, sizes): (mode, "timed") for mode in modes}
            jobs.update({pool.submit(count, build, mode, repeat, work, sizes): (mode, repeat)
                         for mode in sorted(modes, key=lambda m: not gpt2(m, sizes))
                         for repeat in ("1", "2")})
            failed = []
            for job in concurrent.futures.as_completed(jobs):
                mode, repeat = jobs[job]
                if job.exception() is not None:
                    # Said at once, and the other processes go on: a run of an hour keeps what
                    # it counted.
                    failed.append(f"{mode} {repeat}: {failure(job.exception())}")
                    print(f"{mode} {repeat} FAILED: {failure(job.exception())}", file=sys.stderr,
                          flush=True)
                    continue
                if repeat == "timed":
                    data["counts"].setdefault(mode, {})["timed"] = job.result()
                else:
                    data["counts"].setdefault(mode, {})[repeat], files = job.result()
                    if repeat == "1" and mode in ("none", "python"):
                        last = f"#{sizes['tensor_parts'] - 1}"  # the last round: warmed up most
                        data["record_trace_split"][mode] = record_trace_split(
                            files, f"tensor-3-{short}{last}", f"tensor-3-{long}{last}", long - short)
                saved.write_text(json.dumps(data, indent=1))
                print(f"{mode} {repeat} done", file=sys.stderr, flush=True)
        if failed:
            raise SystemExit(f"{len(failed)} process(es) failed ({'; '.join(failed)}); what the "
                             f"others counted is in {saved}")
        if not arguments.quick and not arguments.modes:
            data["existing"] = existing_workloads(build, work)
    finished = datetime.datetime.now(datetime.timezone.utc)
    data["origin"]["when"] = f"{began:%Y-%m-%d %H:%M}-{finished:%H:%M}"
    saved.write_text(json.dumps(data, indent=1))
    if arguments.docs:
        write_docs(data, data["origin"])
    report(data)


def failure(error):
    """One line of what a measuring process's failure was (its stderr's last line, where it is
    a subprocess's)."""
    if isinstance(error, subprocess.CalledProcessError):
        output = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr
        last = (output or "").strip().splitlines()[-1:] or ["no output"]
        return f"exit status {error.returncode}: {last[0]}"
    return f"{type(error).__name__}: {error}"


def checkout_commit():
    """This checkout's commit, `+` when files differ from it (what a run's rows were counted on,
    when the build is this checkout's)."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          check=False, capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           check=False, capture_output=True, text=True).stdout.strip()
    return head + ("+" if dirty else "")


def command_line(modes=None, jobs=3):
    """The command that re-takes a run's rows, as docs/performance.md shows it."""
    return ("python3 bench/cost.py build" + (f" --modes {','.join(modes)}" if modes else "")
            + f" --jobs {jobs} --docs")


# The traced modes whose bytes --bytes measures (GPT-2 only where MODES runs it).
BYTES_MODES = ["none", "python", "native", "all", "switch_allocator", "async-python"]


def bytes_per_event(build, jobs, saved):
    """--bytes: one process a traced mode without valgrind (one round: bytes do not vary with
    the machine's load as times do), then the other benchmarks' workloads. Prints the table
    docs/performance.md has (Trace size)."""
    sizes = {"tensors": [200, 1200], "depths": [3], "gpt2": True, "timed_tensors": 20000,
             "rounds": 1}
    rows = []
    with tempfile.TemporaryDirectory(prefix="memtrace-bytes-") as temporary:
        work = Path(temporary)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            results = dict(zip(BYTES_MODES, pool.map(lambda m: timed(build, m, work, sizes),
                                                     BYTES_MODES)))
        for mode in BYTES_MODES:
            name = next(m[1] for m in MODES if m[0] == mode)
            loop = results[mode][f"tensor-3-{sizes['timed_tensors']}"]
            rows.append((f"the per-tensor loop (20,000 tensors), {name}",
                         loop["bytes"][0] / (2 * loop["n"])))
            for label, part in (("forward1-2", "GPT-2 forward, batch 1"),
                                ("forward8-2", "GPT-2 forward, batch 8"),
                                ("train8-3", "GPT-2 AdamW training step, batch 8")):
                entry = results[mode].get(label)
                if entry and entry["events"][0]:
                    rows.append((f"{part}, {name}", entry["bytes"][0] / entry["events"][0]))
        rows += existing_workloads(build, work)
    if saved:
        Path(saved).write_text(json.dumps(rows, indent=1))
    print("| workload | bytes per event |")
    print("|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value:.2f} |")
    over = [name for name, value in rows if value > 4]
    print(f"\n{len(rows) - len(over)} of {len(rows)} workloads at most 4 bytes an event")


def part_counts(counts, mode, repeat, part, n, key="1"):
    """Every thread's instructions (key "1"; "memtrace": memtrace's objects' own) in each round of
    `part` at length n (one round in an earlier run's --json, whose labels have no `#round`)."""
    return [value[key] for label, value in counts[mode][repeat].items()
            if label.split("#")[0] == f"{part}-{n}" and key in value]


def marginal(counts, mode, repeat, part, lengths, key="1"):
    """Instructions per unit of `part`: the median of the long part's rounds less the median of
    the short part's, over the difference in units (Note [Repeats that agree])."""
    short, long = (statistics.median(part_counts(counts, mode, repeat, part, n, key))
                   for n in lengths)
    return (long - short) / (lengths[1] - lengths[0])


def round_spread(counts, mode, repeat, part, lengths):
    """The range of the rounds' own marginals (round r's long part less its short one), in % of
    the median's: what the median leaves out."""
    rounds = {}
    for label, value in counts[mode][repeat].items():
        name, _, round_ = label.partition("#")
        for n in lengths:
            if name == f"{part}-{n}":
                rounds.setdefault(round_, {})[n] = value["1"]
    each = [(r[lengths[1]] - r[lengths[0]]) / (lengths[1] - lengths[0]) for r in rounds.values()
            if len(r) == 2]
    middle = marginal(counts, mode, repeat, part, lengths)
    return (max(each) - min(each)) / abs(middle) * 100 if len(each) > 1 and middle else 0.0


def agreement(first, second):
    return abs(first - second) / max(abs(first), 1e-9) * 100


def render(data):
    """The tables of a run's data (main's, --from-json's, or docs/cost.json's): {block: its
    markdown lines} (the blocks docs/performance.md holds between markers), and the figures
    ({mode: {part: {"repeat1", "repeat2", "agreement_percent", "round_spread_percent"}}})."""
    counts, split, sizes = data["counts"], data["record_trace_split"], data["sizes"]
    modes = [m[0] for m in MODES if m[0] in data["modes"]]
    tensors = sizes["tensors"]
    figures, blocks = {}, {}
    labels = {m[0]: m[1] for m in MODES}

    def row(mode, part, lengths):
        first = marginal(counts, mode, "1", part, lengths)
        second = marginal(counts, mode, "2", part, lengths)
        figures.setdefault(mode, {})[part] = {
            "repeat1": first, "repeat2": second, "agreement_percent": agreement(first, second),
            "round_spread_percent": max(round_spread(counts, mode, r, part, lengths) for r in "12")}
        return first, second

    lines = blocks["per-tensor"] = [
        ("| mode | repeat 1 | repeat 2 | apart | over untraced | wall-clock ns a tensor, median "
         "(range) | bytes an event |"), "|---|---:|---:|---:|---:|---:|---:|"]
    base = {}
    for mode in modes:
        first, second = row(mode, "tensor-3", tensors)
        base[mode] = first
        reference = BASELINE.get(mode, "untraced")
        over = f"{first - base[reference]:+,.0f}" if mode != reference and reference in base else ""
        timed = counts[mode]["timed"][f"tensor-3-{sizes['timed_tensors']}"]
        ns = [s / timed["n"] * 1e9 for s in timed["seconds"]]
        per_event = ""
        if mode not in ("untraced", "async-untraced") and not mode.startswith("history"):
            per_event = f"{statistics.median(timed['bytes']) / (2 * timed['n']):.2f}"
        lines.append(f"| {labels[mode]} | {first:,.0f} | {second:,.0f} | "
                     f"{agreement(first, second):.3f} % | {over} | {statistics.median(ns):,.0f} "
                     f"({min(ns):,.0f}-{max(ns):,.0f}) | {per_event} |")
    if split:
        lines.append("")
    for mode in (m for m in modes if m in split):
        parts = split[mode]
        own = parts.get("record_trace", 0) - parts.get("tracker", 0)
        lines.append(f"{labels[mode]}: per tensor, PyTorch's `record_trace` inclusive "
                     f"{parts.get('record_trace', 0):,.0f}, of it memtrace's tracker (onTraceEntry, "
                     f"inclusive) {parts.get('tracker', 0):,.0f}, PyTorch's own {own:,.0f}.")

    if len(sizes["depths"]) > 1:
        lines = blocks["depth"] = [
            "| mode | " + " | ".join(f"{d} frames" for d in sizes["depths"])
            + " | a frame beyond 10 |", "|---|" + "---:|" * (len(sizes["depths"]) + 1)]
        for mode in modes:
            cells, values = [], {}
            for depth in sizes["depths"]:
                first, second = row(mode, f"tensor-{depth}", tensors)
                values[depth] = (first, second)
                cells.append(f"{first:,.0f} / {second:,.0f}")
            slopes = [(values[90][i] - values[10][i]) / 80 for i in (0, 1)]
            figures[mode]["slope_beyond_10"] = slopes[0]
            lines.append(f"| {labels[mode]} | " + " | ".join(cells)
                         + f" | {slopes[0]:,.1f} / {slopes[1]:,.1f} |")

    gpt2_modes = [m for m in modes if part_counts(counts, m, "1", "forward1", 1)]
    if sizes["gpt2"] and gpt2_modes:
        # An earlier run's --json counted 1 and 2 steps: the lengths are the labels'.
        parts = [(part, sorted({int(label.split("#")[0].rsplit("-", 1)[1])
                                for label in counts[gpt2_modes[0]]["1"]
                                if label.split("#")[0].rsplit("-", 1)[0] == part}))
                 for part in ("forward1", "forward8", "train8")]
        lines = blocks["forward"] = [
            "| mode | forward, batch 1 | forward, batch 8 | AdamW training step, batch 8 |",
            "|---|---:|---:|---:|"]
        untraced = {}
        def counted(mode, part, lengths, key="1"):
            """Both repeats have every round of both lengths (a process stopped early has not)."""
            rounds = sizes.get("gpt2_parts", 1) if any("#" in label for label in counts[mode]["1"]) else 1
            return all(len(part_counts(counts, mode, r, part, n, key)) == rounds
                       for r in "12" for n in lengths)

        for mode in gpt2_modes:
            cells = []
            for part, lengths in parts:
                if not counted(mode, part, lengths):
                    cells.append("not counted")
                    continue
                first, second = row(mode, part, lengths)
                untraced.setdefault(part, first)
                cells.append(f"{first / 1e6:,.3f} M / {second / 1e6:,.3f} M "
                             f"({agreement(first, second):.3f} %; {first / untraced[part]:.3f}x)")
            lines.append(f"| {labels[mode]} | " + " | ".join(cells) + " |")
        lines = blocks["own"] = [
            "| mode | forward, batch 1 | forward, batch 8 | AdamW training step, batch 8 |",
            "|---|---:|---:|---:|"]
        for mode in gpt2_modes:
            if (not part_counts(counts, mode, "1", "forward1", 1, "memtrace")
                    or mode in ("untraced", "async-untraced") or mode.startswith("history")):
                continue
            cells = []
            for part, lengths in parts:
                if not counted(mode, part, lengths) or not counted(mode, "forward1", [1], "1"):
                    cells.append("not counted")
                    continue
                own = [marginal(counts, mode, r, part, lengths, "memtrace") for r in "12"]
                if "untraced" not in data["modes"] or not counted("untraced", part, lengths):
                    cells.append(f"{own[0]:,.0f} / {own[1]:,.0f}")  # a partial run's: no untraced
                    continue
                rest = [marginal(counts, mode, r, part, lengths) - own[i]
                        - marginal(counts, "untraced", r, part, lengths) for i, r in enumerate("12")]
                cells.append(f"{own[0]:,.0f} / {own[1]:,.0f}; rest {rest[0]:+,.0f} / {rest[1]:+,.0f}")
            lines.append(f"| {labels[mode]} | " + " | ".join(cells) + " |")
        if all(part_counts(counts, m, "1", "forward1", 1, "pymalloc") for m in gpt2_modes):
            lines = blocks["pymalloc"] = [
                "| mode | forward, batch 1 | forward, batch 8 | AdamW training step, batch 8 |",
                "|---|---:|---:|---:|"]
            for mode in gpt2_modes:
                cells = []
                for part, lengths in parts:
                    if not counted(mode, part, lengths, "pymalloc"):
                        cells.append("not counted")
                        continue
                    small = [marginal(counts, mode, r, part, lengths, "pymalloc") for r in "12"]
                    rest = [marginal(counts, mode, r, part, lengths) - small[i]
                            for i, r in enumerate("12")]
                    cells.append(f"{small[0]:,.0f} / {small[1]:,.0f}; the rest "
                                 f"{rest[0] / 1e6:,.3f} M / {rest[1] / 1e6:,.3f} M "
                                 f"({agreement(*rest):.3f} %)")
                lines.append(f"| {labels[mode]} | " + " | ".join(cells) + " |")
        lines = blocks["forward-wall-clock"] = [
            ("| mode | forward, batch 1 (ms) | forward, batch 8 (ms) | training step (ms) | "
             "bytes an event (forward 1 / 8 / step) |"), "|---|---:|---:|---:|---:|"]
        for mode in gpt2_modes:
            timed = counts[mode]["timed"]
            if "forward1-2" not in timed:
                continue
            cells, per_event = [], []
            for part, lengths in parts:
                entry = timed.get(f"{part}-{lengths[-1]}")
                if entry is None:
                    cells.append("not timed")
                    continue
                ms = [s / entry["n"] * 1e3 for s in entry["seconds"]]
                cells.append(f"{statistics.median(ms):.2f} ({min(ms):.2f}-{max(ms):.2f})")
                if entry["bytes"][0] and entry["events"][0]:
                    per_event.append(f"{statistics.median(b / e for b, e in zip(entry['bytes'], entry['events'])):.2f}")
            lines.append(f"| {labels[mode]} | " + " | ".join(cells) + f" | {' / '.join(per_event)} |")

    every = [f for parts in figures.values() for f in parts.values() if isinstance(f, dict)]
    agreeing = sum(f["agreement_percent"] <= 0.1 for f in every)
    worst = max(f["agreement_percent"] for f in every)
    blocks["agreement"] = [
        (f"The two repeats agree within 0.1 % on {agreeing} of {len(every)} figures; worst "
         f"{worst:.3f} %. The rounds' own marginals inside one process (what the medians leave "
         f"out) span up to {max(f['round_spread_percent'] for f in every):.3f} % of the median.")]
    if data.get("runs"):
        lines = blocks["runs"] = ["| mode | counted on | when (UTC) | command |", "|---|---|---|---|"]
        for mode in modes:
            run = data["runs"][mode]
            lines.append(f"| {labels[mode]} | {run['code']} | {run['when']} | `{run['command']}` |")
    return blocks, figures


def report(data):
    """Prints the tables of a run's data; exits non-zero when two repeats are more than 0.1 %
    apart (the figures that gate: the whole program's instructions, nothing subtracted)."""
    blocks, figures = render(data)
    titles = {
        "per-tensor": "Instructions per tensor (`torch.empty(256, device=\"cuda\")` freed at once, "
                      "3 Python frames deep), marginal between the loop's two lengths, two processes:",
        "depth": "Instructions per tensor by Python depth, repeat 1 / repeat 2:",
        "forward": "Instructions per launch-bound forward (step) of GPT-2 small, repeat 1 / repeat 2 "
                   "(apart; ratio to untraced):",
        "own": "Of it, memtrace's own instructions and the rest the mode adds over untraced:",
        "pymalloc": "Of it, CPython's small-object allocator, and the rest:",
        "forward-wall-clock": "Wall-clock and bytes of the same steps without valgrind:",
        "agreement": "", "runs": "Where each mode's rows come from:"}
    for name, lines in blocks.items():
        print(f"\n{titles[name]}\n" if titles[name] else "")
        print("\n".join(lines))
    if data.get("existing"):
        print("\nBytes per event on the other benchmarks' workloads (the simulated card's runtime):\n")
        print("| workload | bytes per event |")
        print("|---|---:|")
        for name, value in data["existing"]:
            print(f"| {name} | {value:.2f} |")
    worst = max(f["agreement_percent"] for parts in figures.values() for f in parts.values()
                if isinstance(f, dict))
    if worst > 0.1:
        raise SystemExit(f"the repeats disagree by {worst:.4f} % (goal: 0.1 %)")


# Note [The cost tables regenerated]
# docs/performance.md's tables of this bench are generated, not typed: each sits between
# `<!-- bench/cost.py: BLOCK -->` and `<!-- bench/cost.py: end -->`, and is render()'s block of
# that name over docs/cost.json, which holds every mode's counts (both repeats, every round's
# part, the wall-clock rounds) and where and when they were counted. `--docs` merges a run's
# modes into docs/cost.json (a partial re-take, `--modes`, replaces those modes' rows and keeps
# the others with their own dates) and rewrites the blocks; `--check-docs` (the docs test, no
# valgrind, under a second) renders docs/cost.json again and fails when a block differs from
# it, or when a mode lacks either repeat, so that the page cannot drift from its data.
COST_DATA = ROOT / "docs" / "cost.json"
PERFORMANCE = ROOT / "docs" / "performance.md"
MARKER = re.compile(r"^<!-- bench/cost\.py: ([\w-]+) -->\n(.*?)^<!-- bench/cost\.py: end -->\n",
                    re.MULTILINE | re.DOTALL)


def merge(stored, run, origin):
    """docs/cost.json's data with `run`'s modes put in place of theirs (origin: {"code", "when",
    "command"} of the run)."""
    if stored is None or set(stored["modes"]) <= set(run["modes"]):
        stored = {"sizes": run["sizes"], "modes": [], "counts": {}, "record_trace_split": {},
                  "existing": [], "runs": {}}
    if stored["sizes"] != run["sizes"]:
        raise SystemExit(f"this run's sizes ({run['sizes']}) are not those of docs/cost.json's "
                         f"other modes ({stored['sizes']}): re-take every mode, or the same sizes")
    for mode in run["modes"]:
        if not all(key in run["counts"].get(mode, {}) for key in ("1", "2", "timed")):
            raise SystemExit(f"the run has no complete counts of mode {mode} (both repeats and the "
                             "timed process)")
        stored["counts"][mode] = run["counts"][mode]
        stored["runs"][mode] = origin if origin is not None else run["runs"][mode]
        if mode in run["record_trace_split"]:
            stored["record_trace_split"][mode] = run["record_trace_split"][mode]
    stored["modes"] = [m[0] for m in MODES if m[0] in set(stored["modes"]) | set(run["modes"])]
    if run.get("existing"):
        stored["existing"] = run["existing"]
    return stored


def write_docs(run, origin):
    """--docs: merges the run into docs/cost.json and rewrites docs/performance.md's blocks."""
    stored = json.loads(COST_DATA.read_text()) if COST_DATA.is_file() else None
    merged = merge(stored, run, origin)
    blocks, _ = render(merged)
    text = PERFORMANCE.read_text()
    found = {match.group(1) for match in MARKER.finditer(text)}
    missing = set(blocks) - found
    if missing:
        raise SystemExit(f"{PERFORMANCE} has no markers for the block(s) {', '.join(sorted(missing))}"
                         " (`<!-- bench/cost.py: NAME -->` ... `<!-- bench/cost.py: end -->`)")
    text = MARKER.sub(lambda m: f"<!-- bench/cost.py: {m.group(1)} -->\n"
                      + "\n".join(blocks.get(m.group(1), [])) + "\n<!-- bench/cost.py: end -->\n", text)
    COST_DATA.write_text(json.dumps(merged, indent=None, separators=(",", ":")) + "\n")
    PERFORMANCE.write_text(text)
    print(f"{COST_DATA} and {PERFORMANCE}'s {len(found)} blocks written", file=sys.stderr)


def check_docs(data_path=COST_DATA, page=PERFORMANCE):
    """--check-docs: the page's blocks are the data's tables, and every mode of the data has both
    repeats, its timed process and where and when it was counted. Returns the problems found, one
    line each (none when they agree)."""
    if not data_path.is_file():
        return [f"{data_path} is missing"]
    data = json.loads(data_path.read_text())
    problems = [f"mode {mode} has no {key} in {data_path.name}" for mode in data["modes"]
                for key in ("1", "2", "timed") if key not in data["counts"].get(mode, {})]
    problems += [f"mode {mode} has no run (where and when it was counted) in {data_path.name}"
                 for mode in data["modes"] if mode not in data.get("runs", {})]
    if problems:
        return problems
    blocks, _ = render(data)
    found = {match.group(1): match.group(2) for match in MARKER.finditer(page.read_text())}
    for name, lines in blocks.items():
        if name not in found:
            problems.append(f"{page.name} has no block `{name}`")
        elif found[name] != "\n".join(lines) + "\n":
            problems.append(f"{page.name}'s block `{name}` is not what {data_path.name} renders "
                            "(python3 bench/cost.py --from-json docs/cost.json --docs rewrites it)")
    problems += [f"{page.name} has a block `{name}` that bench/cost.py does not make"
                 for name in found if name not in blocks]
    return problems


if __name__ == "__main__":
    main()
