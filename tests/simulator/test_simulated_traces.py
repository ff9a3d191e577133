"""Traces made on the simulated GPU with PyTorch's CUDA build (issue 31): the trace says which
card it was simulated on (record 0x15, however libmemtrace.so and the simulated libraries came
into the process), names every read of device values by its Python line (record 0x16), and an
out-of-memory on a 1 GiB card is reported at its line, with how far over the card it went.

Each program runs in its own process on the card the test names (not the suite's
MEMTRACE_TEST_GPU), traced under LD_PRELOAD unless said otherwise. The programs are in
programs/; the lines the tests expect are found by their marker comments."""
import json
import os
import subprocess
import sys
from pathlib import Path

from memtrace_testing import BUILD, ROOT, Build, parse_records, report_json, simulated_environment

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
PROFILES = BUILD / "simulator" / "profiles"
GIB = 1 << 30


def line_of(program, marker):
    """The line of `program` whose comment is `# marker`."""
    lines = (PROGRAMS / program).read_text().splitlines()
    found = [number for number, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(found) == 1, (program, marker, found)
    return found[0]


def shown(path):
    """`path` as the report names it: relative to the working directory when under it."""
    cwd = os.getcwd() + "/"
    return str(path)[len(cwd):] if str(path).startswith(cwd) else str(path)


def on_card(command, profile, trace=None, timeout=300, flight_events=None, **options):
    """Runs `command` on the simulated `profile` (simulated_gpu.environment's options: memory,
    devices), traced into `trace` under LD_PRELOAD when given (by the flight recorder, keeping
    `flight_events`, when given). Returns the completed process."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMTRACE_") and k not in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF")}
    env["MEMTRACE_BUILD_DIR"] = str(BUILD)
    env["PYTHONPATH"] = str(ROOT / "python")
    if trace is not None:
        env.update({"LD_PRELOAD": str(Build.library), "MEMTRACE_OUTPUT": str(trace)})
    if flight_events is not None:
        env.update({"MEMTRACE_MODE": "flight", "MEMTRACE_FLIGHT_EVENTS": str(flight_events)})
    env = simulated_environment(env, profile, **options)
    result = subprocess.run([str(c) for c in command], env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{command}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def simulated_record(trace):
    """The trace's simulated-device record, checked to be its second record (after the process)."""
    records = parse_records(trace)
    found = [r for r in records if r["record"] == "simulated-device"]
    assert len(found) == 1, found
    assert records.index(found[0]) == 1, records[:3]
    return found[0]


def test_reads_of_device_values_are_named_by_their_lines(tmp_path):
    trace = tmp_path / "reads.bin"
    result = on_card([sys.executable, PROGRAMS / "reads.py"], "h200", trace)
    # What the program read back is zeros: no logit is above 0, none is kept.
    assert result.stdout.split() == ["read", "0.0", "10", "(0,", "2)", "(0,)"]
    card = json.loads((PROFILES / "h200.json").read_text())
    assert simulated_record(trace) == {
        "record": "simulated-device", "words": [], "profile": "h200", "file": str(PROFILES / "h200.json"),
        "memory_bytes": str(card["memory_bytes"]), "memory_set_by_user": "0", "devices": "1"}
    reads = report_json(trace)["device_reads"]
    path = str(PROGRAMS / "reads.py")
    by_line = {row["line"]: (row["count"], row["bytes"]) for row in reads["rows"] if row.get("file") == path}
    # .item() of a float32 sum, .tolist() of 10 float32s, nonzero's and a mask's count (int32).
    assert by_line == {line_of("reads.py", "read: item"): (1, 4), line_of("reads.py", "read: tolist"): (1, 40),
                       line_of("reads.py", "read: nonzero"): (1, 4), line_of("reads.py", "read: mask"): (1, 4)}
    assert (reads["count"], reads["bytes"]) == (4, 52), "no read but the program's four"
    text = subprocess.run([Build.report, trace], capture_output=True, text=True, check=True).stdout
    assert "NVIDIA H200" in text and "(SIMULATED: profile h200 — memtrace's simulated GPU" in text


def test_a_decoding_loop_reads_each_token_back(tmp_path):
    # A GPT-2-style model from a transformers config, decoding greedily to an end token: on the
    # card the loop may stop early; here every token reads back as 0, so it runs all 8 steps.
    trace = tmp_path / "generate.bin"
    result = on_card([sys.executable, PROGRAMS / "generate.py"], "h100-80gb", trace,
                     memory=24 * GIB, devices=2)
    assert result.stdout.split()[-2:] == ["steps", "8"]
    record = simulated_record(trace)
    assert (record["profile"], record["memory_bytes"], record["memory_set_by_user"], record["devices"]) == (
        "h100-80gb", str(24 * GIB), "1", "2")
    rows = report_json(trace, "--frame", "user")["device_reads"]["rows"]
    path = str(PROGRAMS / "generate.py")
    by_line = {row["line"]: row["count"] for row in rows if row.get("file") == path}
    # The token's read, and (in user code) the forward whose mask transformers reads back.
    assert by_line[line_of("generate.py", "read: end token")] == 8
    assert by_line[line_of("generate.py", "forward: here")] == 8
    device = report_json(trace)["devices"][0]
    assert device["total_bytes"] == 24 * GIB and device["name"] == "NVIDIA H100 80GB HBM3"


def test_an_out_of_memory_on_a_1_gib_card_is_named_by_its_line(tmp_path):
    trace = tmp_path / "oom.bin"
    result = on_card([sys.executable, PROGRAMS / "oom.py"], "l4", trace, memory=GIB)
    blocks = int(result.stdout.split()[-1])
    assert blocks == 16, result.stdout  # 16 x 64 MiB fill the card: nothing else is on it
    text = subprocess.run([Build.report, trace], capture_output=True, text=True, check=True).stdout
    line = f"{shown(PROGRAMS / 'oom.py')}:{line_of('oom.py', 'oom: here')} (<module>)"
    assert "a request of 64.00 MiB (67108864 bytes) failed" in text
    assert f"  requested at  {line}\n" in text
    # What the request met is what PyTorch's caching allocator had reserved (its segments: Note
    # [PyTorch's own allocator]): here the 16 blocks, each its own segment.
    assert ("(the simulated l4's, set by the user): reserved + request over by 64.00 MiB "
            "(67108864 bytes)") in text
    oom = report_json(trace)["oom"]
    assert oom["request"]["line"] == line_of("oom.py", "oom: here")
    assert (oom["memory_bytes"], oom["memory_source"]) == (GIB, "simulated")
    assert oom["live_bytes"] == blocks * (64 << 20)
    assert oom["torch_allocator"]["reserved_bytes"] == oom["live_bytes"]
    assert oom["over_bytes"] == oom["live_bytes"] + oom["request"]["bytes"] - GIB
    assert [(row["location"], row["count"]) for row in oom["by_line"]["rows"]] == [(line, blocks)]


def test_the_pluggable_allocator_loaded_late_finds_the_simulated_card(tmp_path):
    # libmemtrace.so dlopened by switch_allocator(), after torch and the simulated libraries.
    trace = tmp_path / "pluggable.bin"
    on_card([sys.executable, PROGRAMS / "pluggable.py", trace], "a100-40gb")
    assert simulated_record(trace)["profile"] == "a100-40gb"
    rows = report_json(trace)["device_reads"]["rows"]
    assert [(row["line"], row["count"], row["bytes"]) for row in rows] == [
        (line_of("pluggable.py", "read: item"), 1, 4)]


def test_simulated_libraries_loaded_after_memtrace_are_found_before_the_first_event(tmp_path):
    # A program that dlopens a library linked to libcudart.so.13 (RTLD_LOCAL) which
    # LD_LIBRARY_PATH makes the simulated one: not there at memtrace's init, found when the
    # first device is described, and written before the first event.
    trace = tmp_path / "late.bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTRACE_")}
    env.update({"LD_PRELOAD": str(Build.library), "MEMTRACE_OUTPUT": str(trace),
                "LD_LIBRARY_PATH": f"{BUILD / 'simulator' / 'lib'}:{Build.workload.parent}",
                "MEMTRACE_GPU_PROFILE": str(PROFILES / "l4.json")})
    result = subprocess.run([Build.program("dlopen_local"), Build.workload.name], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "workload 0", result.stderr
    assert simulated_record(trace)["profile"] == "l4"
    events = [r for r in parse_records(trace) if r["record"] in ("alloc", "free")]
    assert [r.get("size") for r in events] == ["1048576", "5000", "1048576"]


def test_a_flight_recorders_file_keeps_the_card_and_the_kept_reads(tmp_path):
    # Issue 33's flight recorder on the simulated card (issue 31): compactions write the
    # tables again, the simulated-device record among them, once; the reads of device values
    # are events of the stream, kept with the last N events and dropped with the others.
    # Steps enough for the file to grow past the compaction's minimum (256 KiB, flight.cpp's
    # kMinimumGrowth) at today's encoding (about 3 bytes an event here with format version 7's
    # event tables, 2.5 with version 8's microseconds; 6,000 steps no longer did).
    trace = tmp_path / "flight.bin"
    steps = 30000
    result = on_card([sys.executable, PROGRAMS / "flight_loop.py", steps], "h100-80gb", trace,
                     flight_events=2000)
    assert result.stdout.split()[:2] == ["steps", str(steps)]
    assert simulated_record(trace)["profile"] == "h100-80gb"
    summary = report_json(trace)
    assert summary["summary"]["flight"]["dropped"], "the file was never compacted"
    reads = summary["device_reads"]
    assert 0 < reads["count"] < steps
    (row,) = [row for row in reads["rows"] if row.get("file") == str(PROGRAMS / "flight_loop.py")]
    assert row["line"] == line_of("flight_loop.py", "read: each step")
