"""The `memtrace` front door (python -m mem_tracer, mem_tracer/cli.py): its own commands and
options, and the native tools' commands passed on untouched."""
import importlib.metadata
import json
import sys
from pathlib import Path

import pytest

from memtrace_testing import ROOT, Build, run

# What memtrace adds when a program made no CUDA allocation and the torch it imports is a CPU
# build (this interpreter's, pinned by scripts/setup.sh).
CPU_TORCH = (f" (this Python's torch {importlib.metadata.version('torch')} is a CPU build, "
             "which never allocates GPU memory)")

SCRIPTS = Path(__file__).parent / "scripts"
PACKAGE = ROOT / "python"
COMMANDS = ("run", "report", "diff", "html", "flamegraph", "export", "parse", "compact",
            "estimate", "plan", "live", "params")


def memtrace(*args, check=True, cwd=None, env=None):
    """`python -m mem_tracer ARGS` (what the `memtrace` console script runs)."""
    environment = {"PYTHONPATH": str(PACKAGE), **(env or {})}
    return run([sys.executable, "-m", "mem_tracer", *args], environment, check=check, cwd=cwd,
               timeout=120)


def refused(result, message):
    """Exit 2, the usage error alone on stderr, nothing on stdout."""
    assert result.returncode == 2, result
    assert result.stderr.splitlines() == [f"python -m mem_tracer: error: {message}"], result.stderr
    assert result.stdout == ""


@pytest.fixture(scope="module")
def a_trace(tmp_path_factory):
    """A trace of scripts/unmodified.py: 97 MiB live at the peak."""
    directory = tmp_path_factory.mktemp("trace")
    memtrace("run", "-q", "-o", directory / "t-%p.bin", SCRIPTS / "unmodified.py", Build.cuda)
    (trace,) = directory.glob("t-*.bin")
    return trace


def test_version():
    expected = (ROOT / "VERSION").read_text().strip()  # the one version source
    # Note [What an install can do]: the version, then what this build can trace, one line each.
    said = memtrace("--version").stdout
    assert said == memtrace("run", "--version").stdout
    lines = said.splitlines()
    assert lines[0] == f"memtrace {expected}"
    bridges = sorted(path.name[len("libmemtrace-torch-"):-len(".so")]
                     for path in Build.library.parent.glob("libmemtrace-torch-*.so"))
    assert bridges, "the build has no bridge to PyTorch's allocator"
    assert lines[1] == ("  traces tensors inside PyTorch's allocator for torch: "
                        + ", ".join(bridges)), said
    assert lines[2] == (f"  this Python's torch: {importlib.metadata.version('torch')} (a CPU "
                        "build: nothing on a GPU to trace)"), said
    profiles = sorted(path.stem for path in (ROOT / "simulator" / "profiles").glob("*.json"))
    assert lines[3] == f"  simulated GPUs (memtrace run --gpu): {', '.join(profiles)}", said
    assert lines[4] == (f"  memtrace-estimate: built against torch "
                        f"{importlib.metadata.version('torch')}"), said
    version = run([sys.executable, "-c", "import mem_tracer; print(mem_tracer.__version__)"],
                  {"PYTHONPATH": str(PACKAGE)}).stdout
    assert version == f"{expected}\n"


def test_the_console_script_is_the_front_door():
    code = "import mem_tracer.__main__ as m, mem_tracer.cli as c; print(m.main is c.main)"
    assert run([sys.executable, "-c", code], {"PYTHONPATH": str(PACKAGE)}).stdout == "True\n"


def test_help_lists_every_command_with_examples():
    text = memtrace("--help").stdout
    assert text.startswith("usage: python -m mem_tracer [-h] [--version] COMMAND ...")
    for command in COMMANDS:
        assert f"\n    {command} " in text or f"\n    {command}\n" in text, command
    assert "examples:\n  memtrace run train.py" in text
    run_help = memtrace("run", "--help").stdout
    assert run_help.startswith("usage: python -m mem_tracer run [options] (script.py | -m module)")
    assert "--group-by {line,function,file,stack,module,category}" in run_help
    assert "examples:\n  memtrace run train.py --epochs 1" in run_help


@pytest.mark.parametrize("command, tool_option", [
    ("report", "--group-by"), ("html", "--lanes"), ("flamegraph", "--format"),
    ("export", "perfetto"), ("parse", "parse"), ("compact", "--force"), ("estimate", "--semantics"),
    ("plan", "--budget")])
def test_help_of_a_native_command(command, tool_option):
    result = memtrace(command, "--help")
    text = result.stdout
    assert text.startswith(f"usage: python -m mem_tracer {command} "), text
    assert "\nexamples:\n  memtrace " + command in text
    # Then the tool's own options, which are the command's.
    tool = "memtrace-estimate" if command in ("estimate", "plan") else "memtrace-report"
    assert f"The options are {tool}'s, passed on as given:" in text
    assert tool_option in text.split("passed on as given:")[1]


def test_unknown_command():
    result = memtrace("reprot", "x.bin", check=False)
    assert result.returncode == 2
    assert "argument COMMAND: invalid choice: 'reprot'" in result.stderr.splitlines()[-1]


def test_report_and_parse_are_memtrace_reports(a_trace):
    for args in ((a_trace, "--top", "1", "--format", "json"),  # the trace first
                 ("--format", "json", "--frame", "user", a_trace)):  # an option first
        ours = memtrace("report", *args)
        native = run([Build.report, *args])
        assert ours.stdout == native.stdout and ours.stdout
        assert json.loads(ours.stdout)["summary"]["peak_bytes"] == 97 << 20
    assert memtrace("parse", a_trace).stdout == run([Build.report, "parse", a_trace]).stdout


def test_compact_is_memtrace_reports(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "report"))
    from trace_writer import TraceWriter  # a trace of 400 events in 4 chunks, by hand
    writer = TraceWriter(time_unit_ns=1000)
    writer.device(0, writer.string("GPU"), 1 << 34).context(1, 0)
    for i in range(200):
        writer.alloc(1000 * (2 * i + 1), 0x7F0000000000 + (i % 7) * 4096, 4096)
        writer.free(1000 * (2 * i + 2), 0x7F0000000000 + (i % 7) * 4096)
        if i % 50 == 49:
            writer.flush()
    trace = writer.write(tmp_path / "trace.bin", version=8)
    small = tmp_path / "small.bin"
    result = memtrace("compact", trace, "-o", small)
    assert result.stderr == run([Build.report, "compact", trace, "-o", tmp_path / "native.bin"]).stderr \
        .replace(str(tmp_path / "native.bin"), str(small))
    assert small.read_bytes() == (tmp_path / "native.bin").read_bytes()
    assert small.stat().st_size < trace.stat().st_size / 2
    assert memtrace("parse", small).stdout == memtrace("parse", trace).stdout


def test_html_flamegraph_export_write_their_files(a_trace, tmp_path):
    memtrace("html", a_trace, "-o", tmp_path / "page.html")
    assert "<html" in (tmp_path / "page.html").read_text()[:200].lower()
    memtrace("flamegraph", a_trace, "--format", "folded", "-o", tmp_path / "peak.folded")
    assert "unmodified.py" in (tmp_path / "peak.folded").read_text()
    memtrace("export", "perfetto", a_trace, "-o", tmp_path / "perfetto.json")
    assert "traceEvents" in json.loads((tmp_path / "perfetto.json").read_text())


def test_a_native_tool_refusal_and_its_status_come_through(tmp_path):
    result = memtrace("report", tmp_path / "absent.bin", check=False)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("memtrace-report: error: ") and "absent.bin" in line


def test_run_a_missing_script_says_only_that(tmp_path):
    refused(memtrace("run", "missing.py", check=False, cwd=tmp_path),
            "run: missing.py does not exist")
    # The same without the subcommand.
    refused(memtrace("missing.py", check=False, cwd=tmp_path), "run: missing.py does not exist")


def test_a_script_without_a_command_is_run(tmp_path):
    result = memtrace(SCRIPTS / "unmodified.py", Build.cuda, "4", check=False, cwd=tmp_path)
    assert result.returncode == 4, result.stderr  # the script's own status
    assert "script done" in result.stdout
    (trace,) = tmp_path.glob("memtrace-*.bin")
    assert f"== memtrace: {trace}" in result.stdout
    assert "Peak memory: 97.00 MiB" in result.stdout


def test_the_programs_arguments_pass_through_untouched(tmp_path):
    script = tmp_path / "argv.py"
    script.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    theirs = ["--top", "3", "-o", "x.bin", "--", "-m", "json.tool", "--help", "--version", "-q"]
    result = memtrace("run", "--top", "2", "-o", tmp_path / "a-%p.bin", script, *theirs,
                      cwd=tmp_path)
    assert json.loads(result.stdout.splitlines()[0]) == theirs
    # `--` before the script ends memtrace's options; after it, the program's own.
    result = memtrace("run", "--", script, "--", "-x", cwd=tmp_path)
    assert json.loads(result.stdout.splitlines()[0]) == ["--", "-x"]
    # -m MODULE: every argument after it is the module's.
    (tmp_path / "argvmod.py").write_text(script.read_text())
    result = memtrace("run", "-m", "argvmod", "--output", "o", "-m", "x", cwd=tmp_path,
                      env={"PYTHONPATH": f"{PACKAGE}:{tmp_path}"})
    assert json.loads(result.stdout.splitlines()[0]) == ["--output", "o", "-m", "x"]
    assert result.stderr.splitlines() == [
        "memtrace: argvmod ended without a CUDA allocation: no trace was written" + CPU_TORCH]
    # The same without the subcommand.
    result = memtrace("-m", "argvmod", "--top", "-h", cwd=tmp_path,
                      env={"PYTHONPATH": f"{PACKAGE}:{tmp_path}"})
    assert json.loads(result.stdout.splitlines()[0]) == ["--top", "-h"]


def test_run_a_failing_program_without_allocations(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("raise SystemExit(7)\n")
    result = memtrace("run", script, check=False, cwd=tmp_path)
    assert result.returncode == 7
    assert result.stderr.splitlines() == [
        f"memtrace: {script} exited with status 7 without a CUDA allocation: no trace was written" + CPU_TORCH]


@pytest.fixture(scope="module")
def scripted_model(tmp_path_factory):
    """A TorchScript model: Linear(8, 16) then relu, saved."""
    path = tmp_path_factory.mktemp("model") / "mlp.pt"
    code = (f"import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())\n"
            f"torch.jit.script(model).save({str(path)!r})\n")
    run([sys.executable, "-c", code])
    return path


def test_estimate_is_memtrace_estimate(scripted_model):
    result = memtrace("estimate", scripted_model, "--input", "4x8", "--format", "json")
    document = json.loads(result.stdout)
    assert document["summary"]["weight_bytes"] == (8 * 16 + 16) * 4
    assert document["summary"]["input_bytes"] == 4 * 8 * 4


def test_plan_finds_the_largest_batch_within_a_budget(scripted_model):
    result = memtrace("plan", "--budget", "1GiB", scripted_model, "--input", "1x8", "--format",
                      "json")
    budget = json.loads(result.stdout)["budget"]
    assert budget["budget_bytes"] == 1 << 30
    assert budget["largest_batch"] > 1
    refused(memtrace("plan", scripted_model, "--input", "1x8", check=False),
            "plan needs --budget SIZE (the largest batch that fits) or --batch N,N,... "
            "(see python -m mem_tracer plan --help)")


def test_run_flight_writes_a_flight_recorders_file_that_live_reads(tmp_path):
    # Issue 33: `memtrace run --flight N` (MEMTRACE_MODE=flight) and `memtrace live`.
    loop = ROOT / "tests" / "preload" / "scripts" / "training_loop.py"
    trace = tmp_path / "flight.bin"
    # 800 pairs a step: enough for the file to outgrow the compaction's 256 KiB in version 11's
    # smaller events (tests/preload/test_flight.py's runs).
    memtrace("run", "-q", "--flight", "2000", "-o", trace, loop, Build.cuda, "120", "800", "3")
    summary = json.loads(memtrace("report", trace, "--format", "json").stdout)["summary"]
    assert summary["flight"]["window_events"] == 2000 and summary["flight"]["dropped"]
    (state,) = json.loads(memtrace("live", trace, "--once", "--format", "json").stdout)["traces"]
    assert state["flight"] and state["ended"] and state["peak_bytes"] == summary["peak_bytes"]
    refused(memtrace("run", "--flight", "0", loop, check=False),
            "run --flight: the events to keep, at least 1")



def chunk_sizes(trace):
    """The size field of each chunk of a trace (bit 31: compressed, version 9), and the file's
    format version."""
    sys.path.insert(0, str(ROOT / "tests" / "report"))
    from trace_writer import COMPRESSED_CHUNK
    data = trace.read_bytes()
    assert data[:8] == b"MEMTRACE", trace
    sizes, offset = [], 16  # the file header; then each chunk: size, CRC-32C, sequence
    while offset + 12 <= len(data):
        size = int.from_bytes(data[offset:offset + 4], "little")
        sizes.append(size)
        offset += 12 + (size & ~COMPRESSED_CHUNK)
    assert offset == len(data), (trace, offset, len(data))
    return [bool(size & COMPRESSED_CHUNK) for size in sizes], int.from_bytes(data[8:12], "little")


def test_run_compacts_the_trace_it_leaves_and_it_reads_as_written(tmp_path):
    # Issue 52 (Note [memtrace run compacts the trace] in cli.py): the trace memtrace run leaves
    # has compressed chunks, and every reader reads it as the file the recorder wrote.
    loop = ROOT / "tests" / "preload" / "scripts" / "training_loop.py"
    trace = tmp_path / "compacted.bin"
    result = memtrace("run", "--top", "5", "-o", trace, loop, Build.cuda, "60", "200", "3")
    compressed, version = chunk_sizes(trace)
    assert version == 12 and any(compressed), compressed  # the recorder's version, kept
    assert not list(tmp_path.glob("*.compacting*"))  # the copy was renamed over the trace
    # The report run printed was read from the file as written, before the rename.
    printed = result.stdout.split(f"== memtrace: {trace}\n", 1)[1]
    assert printed == memtrace("report", trace, "--top", "5").stdout
    line = result.stderr.splitlines()[-1]
    before = int(line.split("trace compacted: ")[1].split(" -> ")[0].replace(",", ""))
    events = json.loads(memtrace("report", trace, "--format", "json").stdout)["summary"]
    assert line == (f"== memtrace: trace compacted: {before:,} -> {trace.stat().st_size:,} bytes "
                    f"({before / events['events']:.2f} -> "
                    f"{trace.stat().st_size / events['events']:.2f} bytes an event; "
                    "--no-compact keeps it as written)"), result.stderr
    assert trace.stat().st_size < before / 4  # the loop's regular churn compresses well
    # The same run with --no-compact: the file as the recorder wrote it, the same report.
    plain = tmp_path / "plain.bin"
    result = memtrace("run", "-q", "--no-compact", "-o", plain, loop, Build.cuda, "60", "200", "3")
    assert result.stderr == "" and not any(chunk_sizes(plain)[0])
    assert plain.stat().st_size > trace.stat().st_size
    assert what_the_run_did(plain) == what_the_run_did(trace)
    # `memtrace live` on the finished run reads the compacted file.
    (state,) = json.loads(memtrace("live", trace, "--once", "--format", "json").stdout)["traces"]
    assert state["ended"] and state["peak_bytes"] == events["peak_bytes"]


def what_the_run_did(trace):
    """The JSON report of a trace less what differs between two runs of one program (times,
    pid, path): its counts and peaks, and the table of what was live at the peak."""
    report = json.loads(memtrace("report", trace, "--format", "json").stdout)
    summary = {key: report["summary"][key] for key in
               ("events", "allocations", "frees", "peak_bytes", "end_bytes", "level")}
    return summary, report["live"]["rows"]


def test_a_trace_that_cannot_be_compacted_is_left_as_written(tmp_path):
    # A directory where the compacted copy would go: compact cannot write it; the run says so in
    # one line, leaves the trace as the recorder wrote it, and exits with the program's status.
    trace = tmp_path / "t.bin"
    (tmp_path / "t.bin.compacting").mkdir()
    result = memtrace("run", "-q", "-o", trace, SCRIPTS / "unmodified.py", Build.cuda, "5",
                      check=False)
    assert result.returncode == 5, result.stderr
    assert result.stderr.splitlines() == [
        f"== memtrace: {trace} left as written, not compacted: memtrace-report: error: "
        f"{trace}.compacting: cannot write: Is a directory"], result.stderr
    assert not any(chunk_sizes(trace)[0]) and (tmp_path / "t.bin.compacting").is_dir()
    summary = json.loads(memtrace("report", trace, "--format", "json").stdout)["summary"]
    assert summary["peak_bytes"] == 97 << 20

def in_process(module):
    """A module of the package, imported here (what it reads of torch is stood in for)."""
    import importlib
    if str(PACKAGE) not in sys.path:
        sys.path.insert(0, str(PACKAGE))
    return importlib.import_module(f"mem_tracer.{module}")


def trace_summary(level="tensor", devices=((0, 124445432, 155189248),)):
    """memtrace-report's JSON as far as the comparison reads it: (device, peak, reserved)."""
    return {"summary": {"level": level},
            "devices": [{"device": device, "peak_bytes": peak, "torch_reserved_peak_bytes": reserved}
                        for device, peak, reserved in devices]}


def test_pytorchs_peaks_equal_to_the_traces_say_nothing():
    # Note [PyTorch's counters beside the trace] in cli.py.
    differences = in_process("cli").torch_counter_differences
    assert differences(trace_summary(), {"0": {"requested": 124445432,
                                               "reserved": 155189248}}) is None


def test_pytorchs_peaks_that_differ_are_said_in_one_line_with_by_how_much():
    differences = in_process("cli").torch_counter_differences
    torch = {"0": {"requested": 124445432, "reserved": 155189248},
             "1": {"requested": 1 << 20, "reserved": 2 << 20}}
    line = differences(trace_summary(devices=((0, 129390584, 155189248), (1, 1 << 20, 4 << 20))),
                       torch)
    assert line == (
        "== memtrace: PyTorch's own counters differ from the trace: device 0's "
        "requested_bytes.all.peak is 124,445,432 B, the trace's 129,390,584 B (4,945,152 B more); "
        "device 1's reserved_bytes.all.peak is 2,097,152 B, the trace's 4,194,304 B "
        "(2,097,152 B more) (a program that calls torch.cuda.reset_peak_memory_stats() lowers "
        "PyTorch's peaks, not the trace's)")
    # A trace lower than PyTorch's count missed something: no excuse is offered.
    line = differences(trace_summary(), {"0": {"requested": 124445433, "reserved": 155189248}})
    assert line == ("== memtrace: PyTorch's own counters differ from the trace: device 0's "
                    "requested_bytes.all.peak is 124,445,433 B, the trace's 124,445,432 B (1 B less)")


def test_only_what_the_trace_counts_as_pytorch_does_is_compared():
    differences = in_process("cli").torch_counter_differences
    torch = {"0": {"requested": 1, "reserved": 155189248}}
    # A trace of segments (no bridge for this torch), or segments beside tensors (a library's own
    # cudaMalloc): its peak is not PyTorch's requested one.
    assert differences(trace_summary("segment"), torch) is None
    assert differences(trace_summary("mixed"), torch) is None
    # No record of PyTorch's segments: its reserved peak is not compared.
    assert differences(trace_summary(devices=((0, 1, None),)),
                       {"0": {"requested": 1, "reserved": 7}}) is None
    # A device PyTorch used that the trace never saw.
    assert "device 1's requested_bytes.all.peak is 5 B, the trace's 0 B (5 B less)" in differences(
        trace_summary(), {**torch, "0": {"requested": 124445432, "reserved": 155189248},
                          "1": {"requested": 5, "reserved": 0}})


def test_allocated_is_compared_where_the_trace_knows_it():
    # Note [Allocated bytes, replayed] in tracer/report/block_replay.h: null where not every
    # block could be placed.
    differences = in_process("cli").torch_counter_differences
    summary = trace_summary()
    summary["devices"][0]["torch_allocated_peak_bytes"] = 124453376
    torch = {"0": {"requested": 124445432, "allocated": 124453376, "reserved": 155189248}}
    assert differences(summary, torch) is None
    torch["0"]["allocated"] = 124453888
    assert differences(summary, torch) == (
        "== memtrace: PyTorch's own counters differ from the trace: device 0's "
        "allocated_bytes.all.peak is 124,453,888 B, the trace's 124,453,376 B (512 B less)")
    summary["devices"][0]["torch_allocated_peak_bytes"] = None
    assert differences(summary, torch) is None


def test_pytorchs_peaks_are_read_only_where_the_program_initialized_cuda(monkeypatch):
    import types
    run_module = in_process("_run")
    stats = {0: {"requested_bytes.all.peak": 10, "allocated_bytes.all.peak": 512,
                 "reserved_bytes.all.peak": 20},
             1: {"requested_bytes.all.peak": 0, "allocated_bytes.all.peak": 0,
                 "reserved_bytes.all.peak": 0}}  # never used
    initialized = []
    cuda = types.SimpleNamespace(is_initialized=lambda: bool(initialized),
                                 device_count=lambda: 2, memory_stats=stats.__getitem__)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert run_module._torch_peaks() == {}  # torch never imported: not imported to read it
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert run_module._torch_peaks() == {}  # CUDA never initialized: not initialized to read it
    initialized.append(True)
    assert run_module._torch_peaks() == {"0": {"requested": 10, "allocated": 512, "reserved": 20}}
    # A pluggable allocator keeps no counters: nothing to compare, and no error.
    cuda.memory_stats = lambda device: {}
    assert run_module._torch_peaks() == {}
    cuda.memory_stats = lambda device: (_ for _ in ()).throw(RuntimeError("no stats"))
    assert run_module._torch_peaks() == {}
