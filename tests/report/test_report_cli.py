"""memtrace-report from the command line: options, formats, and bad input (one line on
stderr naming the file, exit status 2, never a crash or a hang)."""
import csv
import io
import json

import pytest


from memtrace_testing import (Build, preloaded, progress_on_a_terminal, report_fails as fails,
                              report_json, run)


@pytest.fixture(scope="module")
def sequence_trace(tmp_path_factory):
    trace = tmp_path_factory.mktemp("report") / "sequence.bin"
    run([Build.program("sequence")], preloaded(trace, MEMTRACE_GPU_MEMORY=10**9))
    return trace


def test_bad_files_are_refused_in_one_line(build, tmp_path, sequence_trace):
    good = sequence_trace.read_bytes()
    cases = {
        "missing.bin": None,
        "empty.bin": b"",
        "image.bin": b"GIF89a" + b"\0" * 40,
        "version.bin": b"MEMTRACE" + (13).to_bytes(4, "little") + good[12:],
        "short.bin": good[:11],
        "flipped.bin": good[:len(good) // 2] + bytes([good[len(good) // 2] ^ 0x10]) + good[len(good) // 2 + 1:],
    }
    messages = {
        "missing.bin": "cannot open",
        "empty.bin": "the file is empty",
        "image.bin": "not a memtrace trace",
        "version.bin": "trace format version 13, but this memtrace reads versions 1 to 12",
        "short.bin": "the file header is cut short",
        "flipped.bin": "checksum mismatch",
    }
    for name, data in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        for command in ([path], ["parse", path], [path, "--format", "json"]):
            fails(command, str(path), messages[name])
    # A folder is a job's traces (test_job_report.py); for one trace's views it is no file.
    fails(["parse", tmp_path], "is a folder: parse reads one trace")
    (tmp_path / "empty").mkdir()
    fails([tmp_path / "empty"], "a folder without a memtrace trace")


def test_a_cut_trace_is_read_with_a_warning(build, tmp_path):
    # `killed` runs until it is stopped; through the buffer (a mapped trace ends in an open
    # chunk: test_dying.py), the flusher writes a chunk every 100 ms.
    trace = tmp_path / "slow.bin"
    result = run([Build.program("killed")], preloaded(trace, MEMTRACE_MAP_FILE=0), check=False,
                 timeout=30, preexec_fn=lambda: __import__("signal").alarm(1))
    assert result.returncode == -14  # SIGALRM after a second
    data = trace.read_bytes()
    chunks, offset = 0, 16
    while offset < len(data):
        chunks += 1
        offset += 12 + int.from_bytes(data[offset:offset + 4], "little")
    assert chunks >= 2 and offset == len(data)
    cut = tmp_path / "slow-cut.bin"
    cut.write_bytes(data[:-100])  # inside the last chunk
    result = run([Build.report, cut])
    assert "partial chunk" in result.stdout
    assert result.stderr.startswith("memtrace-report: warning:") and "partial chunk" in result.stderr
    # Cut inside the first chunk: nothing whole remains, which is an error. (The opening
    # chunk is written on its own when the file opens, so it can be small.)
    first_chunk_end = 16 + 12 + int.from_bytes(data[16:20], "little")
    (tmp_path / "head.bin").write_bytes(data[:first_chunk_end - 1])
    fails([tmp_path / "head.bin"], "ends before its first whole chunk")


def test_usage_errors(build, sequence_trace):
    fails([], "no trace file given")
    fails([sequence_trace, "--frobnicate"], "unknown option '--frobnicate'")
    fails([sequence_trace, "--group-by", "colour"], "--group-by takes line, function, file, stack, module or category")
    fails([sequence_trace, "--top", "-3"], "--top must be a non-negative integer")
    fails([sequence_trace, "--at", "yesterday"], "--at takes peak, end, oom or a number of seconds")
    fails([sequence_trace, "--format", "xml"], "--format takes text, json or csv")
    fails([sequence_trace, sequence_trace], "is given twice")
    fails([sequence_trace, "--top"], "--top needs a value")


def test_with_several_mistakes_the_first_is_said_and_the_last_value_decides(build, sequence_trace):
    # The values are checked as CLI11 reads them; what is said is the first of the tool's
    # order: the traces, then each option's value in turn.
    fails([sequence_trace, "--group-by", "colour", "--frame", "outer"], "--group-by takes")
    fails([sequence_trace, "--frame", "outer", "--top", "x"], "--frame takes innermost or user")
    fails(["diff", sequence_trace, "--format", "csv"], "diff compares two traces, A and B, not 1")
    fails([sequence_trace, "--group-by", "0"], "--group-by takes", "not '0'")  # names only
    fails([sequence_trace, "--top", "3", "--top", "x"], "--top must be a non-negative integer")
    run([Build.report, sequence_trace, "--top", "x", "--top", "3"])  # an option's last value


def test_help(build):
    result = run([Build.report, "--help"])
    assert "memtrace-report [report] TRACE" in result.stdout


def test_text_report_columns(build, sequence_trace):
    text = run([Build.report, sequence_trace]).stdout
    assert "Peak memory: 3.007 MiB (3153161 bytes)" in text
    header = [line for line in text.splitlines() if line.startswith("Mem ")][0]
    assert header.split() == ["Mem", "Cumulative", "Mem", "Median", "Count", "Location"]
    assert "device 1   NVIDIA H200" in text


def test_csv_and_json_agree(build, sequence_trace):
    rows = list(csv.DictReader(io.StringIO(run([Build.report, sequence_trace, "--format", "csv"]).stdout)))
    document = report_json(sequence_trace)
    assert [int(r["mem_bytes"]) for r in rows] == [r["bytes"] for r in document["live"]["rows"]]
    assert sum(int(r["mem_bytes"]) for r in rows) == document["live"]["bytes"] == document["summary"]["peak_bytes"]


def test_points_and_devices(build, sequence_trace):
    end = report_json(sequence_trace, "--at", "end")
    assert end["live"]["bytes"] == 512 + 2048
    device_1 = report_json(sequence_trace, "--device", "1", "--at", "end")
    assert device_1["live"]["bytes"] == 2048
    assert device_1["summary"]["peak_bytes"] == 777 + 2048
    start = report_json(sequence_trace, "--at", "0")
    assert start["live"]["bytes"] <= 1000
    # The OOM was on device 0: device 1 alone has its live set at that moment too.
    assert report_json(sequence_trace, "--at", "oom", "--device", "1")["live"]["bytes"] == 2048
    output = run([Build.report, sequence_trace, "-o", sequence_trace.parent / "out.json",
                  "--format", "json"])
    assert output.stdout == ""
    assert json.loads((sequence_trace.parent / "out.json").read_text())["summary"]["events"] == 11


def test_parse_prints_every_record(build, sequence_trace):
    lines = run([Build.report, "parse", sequence_trace]).stdout.splitlines()
    kinds = [line.split(" ")[0] for line in lines]
    assert kinds[0] == "process"
    assert kinds.count("alloc") == 6 and kinds.count("free") == 4 and kinds.count("failed-alloc") == 1
    assert kinds[-1] == "marker" and lines[-1].split()[2] == "kind=process-exit"


def test_names_that_are_not_utf8_are_replaced_not_fatal(build, tmp_path):
    from trace_writer import TRACING_STARTED, TraceWriter

    writer = TraceWriter()
    frame = writer.frame(writer.string("/tmp/model.py"), writer.string(b"bad\xffname"), 7)
    stack = writer.python_stack(0, frame)
    writer.context(1, 0)
    writer.marker(0, TRACING_STARTED)
    writer.alloc(10, 0x10000, 4096, python=stack)
    trace = writer.write(tmp_path / "utf8.bin")
    for format_ in ("csv", "text"):  # the bytes as the program named them
        result = run([build.report, trace, "--format", format_], errors="surrogateescape")
        assert "bad\udcffname" in result.stdout
    row = report_json(trace)["live"]["rows"][0]  # JSON must be UTF-8: replaced
    assert row["function"] == "bad\ufffdname"


# ---- the command line (CLI11): help, --version, commands, -f -------------------------------

def test_version(build):
    version = (Build.root / "VERSION").read_text().strip()
    result = run([Build.report, "--version"])
    assert result.stdout == f"memtrace-report {version}\n" and result.stderr == ""


@pytest.mark.parametrize("command", [["report"], ["parse"], ["html"], ["flamegraph"], ["export"],
                                     ["export", "perfetto"], ["export", "pytorch"], ["live"]])
def test_every_command_has_help_with_an_example(build, command):
    text = run([Build.report, *command, "--help"]).stdout
    assert f"memtrace-report {' '.join(command)}" in text
    assert "example" in text
    assert all(len(line) <= 100 for line in text.splitlines()), text


def test_top_level_help_lists_the_commands_and_examples(build):
    text = run([Build.report, "-h"]).stdout
    for command in ("report", "parse", "html", "flamegraph", "export", "live"):
        assert f"\n  {command} " in text
    assert "examples:" in text and "memtrace-report html trace.bin -o report.html" in text


def test_an_option_of_another_command_is_named(build, sequence_trace):
    fails(["parse", sequence_trace, "--top", "3"],
          "--top is for the report, diff, html and live, not parse")
    fails(["export", "perfetto", sequence_trace, "--at", "end"],
          "--at is for the report, html, flamegraph and export pytorch, not export perfetto")
    fails(["html", sequence_trace, "--frobnicate=2"], "unknown option '--frobnicate'")
    fails(["html", sequence_trace, "--lanes"], "--lanes needs a value")


def test_live_refuses_in_one_line(build, sequence_trace):
    # Its own rules between options, after every value is read (tests/preload/test_live.py
    # runs the view itself).
    fails(["live", sequence_trace, "--format", "json"],
          "live --format json prints one frame: give --once too")
    fails(["live", sequence_trace, "--once", "--format", "csv"],
          "--format takes text or json for live, not 'csv'")
    fails(["live", sequence_trace, "--once", "--group-by", "module"],
          "live groups by line, function or file (and by nn.Module, key m)")
    fails(["live", sequence_trace, "--once", "--interval", "0.01"],
          "--interval takes seconds from 0.05 to 3600, not '0.01'")
    fails(["live", sequence_trace, "--group-by", "colour", "--interval", "x"], "--group-by takes")
    fails(["live", sequence_trace, "--at", "end"],
          "--at is for the report, html, flamegraph and export pytorch, not live")
    fails(["live"], "no trace file given")


def test_unknown_commands_and_export_kinds(build, sequence_trace):
    # Used to read as two trace files.
    fails(["exprot", sequence_trace], "unknown command 'exprot'")
    fails(["export", "perfeto", sequence_trace], "export takes perfetto or pytorch", "'perfeto'")
    fails(["export"], "export takes perfetto or pytorch")


OUTPUT_COMMANDS = [[], ["report"], ["parse"], ["html"], ["flamegraph"], ["export", "perfetto"],
                   ["export", "pytorch"]]


@pytest.mark.parametrize("command", OUTPUT_COMMANDS, ids=lambda c: " ".join(c) or "default")
def test_an_output_is_never_overwritten_without_force(build, tmp_path, sequence_trace, command):
    output = tmp_path / "out"
    output.write_bytes(b"mine\n")
    line = fails([*command, sequence_trace, "-o", output], f"{output} already exists", "-f/--force")
    assert "--help" not in line  # not a usage mistake: the file is named, and the flag
    assert output.read_bytes() == b"mine\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary file left either
    for flag in ("-f", "--force"):
        result = run([Build.report, *command, sequence_trace, flag, "-o", output])
        assert result.stdout == "" and output.read_bytes() != b"mine\n"
        output.write_bytes(b"mine\n")
    # A new file needs no flag, and nothing is left beside it.
    run([Build.report, *command, sequence_trace, "-o", tmp_path / "new"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "out"]
    # Nor does a device, which is written to, not replaced.
    run([Build.report, *command, sequence_trace, "-o", "/dev/null"])


def test_an_output_that_cannot_be_written_is_one_line(build, tmp_path, sequence_trace):
    fails([sequence_trace, "-o", tmp_path / "missing" / "out.txt"],
          str(tmp_path / "missing" / "out.txt"), "cannot write")


def test_a_prediction_against_nothing_measured_gives_no_percentage(build, tmp_path):
    from trace_writer import TRACING_STARTED, TraceWriter

    writer = TraceWriter()
    writer.device(0, writer.string("GPU"), 1 << 30)
    writer.context(1, 0)
    writer.marker(0, TRACING_STARTED)
    trace = writer.write(tmp_path / "nothing.bin")
    estimate = tmp_path / "est.json"
    estimate.write_text(json.dumps({
        "format": "memtrace-estimate", "version": 1, "model": "m", "semantics": "eager",
        "lower_bound": False,
        "summary": {"peak_requested_bytes": 6000, "peak_allocated_bytes": 6144,
                    "activation_peak_requested_bytes": 2000, "weight_bytes": 4000, "input_bytes": 0},
        "peak": {"by_frame": [], "by_user_frame": [], "by_module": []}}))
    text = run([Build.report, trace, "--estimate", estimate]).stdout
    assert "Peak memory: 0 B" in text
    line = [line for line in text.splitlines() if line.startswith("Predicted peak:")][0]
    assert line.endswith(": nothing measured to compare with"), line
    assert "%" not in line


@pytest.mark.parametrize("command, passes", [
    (["parse"], ["reading the records"]),
    ([], ["finding the peak", "replaying to the peak"]),
    (["flamegraph"], ["finding the peak", "replaying to the peak"]),
    (["export", "perfetto"], ["finding the peak", "writing the counters"]),
    (["export", "pytorch"], ["finding the peak", "writing the snapshot"]),
], ids=["parse", "report", "flamegraph", "perfetto", "pytorch"])
def test_every_command_shows_its_passes_on_a_terminal(build, sequence_trace, command, passes):
    import re

    text = progress_on_a_terminal([Build.report, *command, sequence_trace])
    shown = re.findall(r"\r\x1b\[Kmemtrace-report: \S*sequence\.bin: ([a-z ]+?) +\d+%", text)
    # A pass is shown when it begins, and again every 200 ms while it lasts.
    assert [name for i, name in enumerate(shown) if i == 0 or shown[i - 1] != name] == passes, text
    assert text.endswith("\r\x1b[K")
