"""memtrace-report on crafted traces and mistyped commands (issue 12: row 5, row 6 and the
"also seen" list): every command refuses what the format does not allow in one line with
exit status 2, in time and memory proportional to the file, and reads the rest without
undefined behaviour (the sanitizer build runs this file too: make test-sanitize)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memtrace_testing import Build, run  # noqa: E402
from memtrace_testing import report_fails as fails  # noqa: E402
from trace_writer import PROCESS_EXIT, TraceWriter  # noqa: E402

COMMANDS = [[], ["parse"], ["html"], ["flamegraph"], ["export", "perfetto"],
            ["export", "pytorch"]]


def one_device_trace(path, device=0, context_device=None):
    w = TraceWriter()
    name = w.string("GPU")
    w.device(device, name, 1 << 30)
    w.context(1, device if context_device is None else context_device)
    for i in range(4):
        w.alloc(1000 * (i + 1), 0x7f0000000000 + (i << 20), 1 << 20)
    w.free(9000, 0x7f0000000000)
    w.marker(10000, PROCESS_EXIT)
    return w.write(path)


@pytest.mark.parametrize("device", [10**9, 64, -2, -(2**40)])
def test_a_device_past_the_format_bound_is_refused_by_every_command(build, tmp_path, device):
    # Row 5: a 1 KB file whose context names device 10^9 made `export pytorch` write 10^9
    # empty device lists (40 s, 791 MB of memory, 403 MB out). The reader refuses it, for
    # every command, before any of them sizes anything by it.
    trace = one_device_trace(tmp_path / "device.bin", context_device=device)
    assert trace.stat().st_size < 1024
    for command in COMMANDS:
        fails([*command, trace], str(trace), f"a context on device {device}", "-1 to 63",
              timeout=10)
    # The same bound on the device record itself.
    trace = one_device_trace(tmp_path / "record.bin", device=device, context_device=0)
    fails(["export", "pytorch", trace], f"a device record on device {device}", timeout=10)


def test_the_highest_device_the_format_allows_reads_in_proportion(build, tmp_path):
    trace = one_device_trace(tmp_path / "device63.bin", device=63)
    output = tmp_path / "snapshot.pickle"
    run([Build.report, "export", "pytorch", trace, "-o", output], timeout=10)
    # 64 device lists, 4 allocations and a free: a few KB, not one list per possible index.
    assert 0 < output.stat().st_size < 16 * 1024
    assert "4.000 MiB" in run([Build.report, trace, "--device", "63"]).stdout


def test_an_address_delta_that_overflows_int64_wraps_without_undefined_behaviour(build, tmp_path):
    # Row 6: an address delta stored divided by 256 (2^55) whose product overflows a signed
    # 64-bit integer (2^63). Addresses are unsigned and wrap; UBSan flagged the signed product.
    w = TraceWriter()
    w.device(0, w.string("GPU"), 0).context(1, 0)
    w.alloc(1, 1 << 63, 256)
    w.alloc(2, 0x100, 512)
    w.free(3, 1 << 63)
    trace = w.write(tmp_path / "wrap.bin")
    lines = run([Build.report, "parse", trace]).stdout.splitlines()
    assert [line.split()[3] for line in lines if line.startswith(("alloc", "free"))] == [
        "address=0x8000000000000000", "address=0x100", "address=0x8000000000000000"]
    assert "512 B" in run([Build.report, trace, "--at", "end"]).stdout


def test_a_device_not_in_the_trace_is_refused(build, tmp_path):
    # Also seen: `--device 99` on a one-device trace printed 0 B with exit status 0.
    trace = one_device_trace(tmp_path / "one.bin")
    for command in COMMANDS:
        if command != ["parse"]:  # parse prints every record, of every device
            fails([*command, trace, "--device", "1"], "device 1 is not in the trace", "devices: 0")
    fails([trace, "--device", "99"], "device 99 is not in the trace", "devices: 0")
    # 2^32 used to be cast to device 0.
    fails([trace, "--device", str(2**32)], f"--device takes a device index, not {2**32}")
    assert "3.000 MiB" in run([Build.report, trace, "--device", "0", "--at", "end"]).stdout


def test_an_unknown_command_is_named(build, tmp_path):
    # Also seen: `memtrace-report exprot pytorch trace.bin` said "more than one trace file".
    trace = one_device_trace(tmp_path / "one.bin")
    fails(["exprot", "pytorch", trace], "unknown command 'exprot'",
          "report, diff, parse, html, flamegraph, export")
    fails(["flamegrahp", trace], "unknown command 'flamegrahp'")
    # Two files that exist are two traces: a job's ranks, for the report; for a view of one trace
    # they are one too many. One file given twice is a mistake.
    fails(["flamegraph", trace, trace], "more than one trace file given")
    fails([trace, trace], f"{trace} is given twice")
