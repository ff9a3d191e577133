"""`memtrace-report compact` and compressed chunks (format version 9, Note [Compressed chunks] in
tracer/format/records.h): a compacted trace reads record for record as the trace it came from, in
fewer bytes; a compressed chunk the writer here makes by hand reads as its plain twin; a damaged
one, an older file and a missing -o are refused in one line."""
import struct
import sys
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memtrace_testing import Build, run  # noqa: E402
from memtrace_testing import report_fails as fails  # noqa: E402
from trace_writer import (COMPRESSED_CHUNK, PROCESS_EXIT, TraceWriter,  # noqa: E402
                          crc32c)

VERSION = 10  # the version compact writes for a file of version 8 to 10 (their events' layout)


def busy_trace(flushes=(), chunks=4, events_per_chunk=600):
    """A trace with Python stacks, event-table entries and repeated sizes in several chunks, as
    the recorder writes them (times in microseconds). `flushes`: the indices of the chunks to
    close compressed."""
    w = TraceWriter(time_unit_ns=1000)
    w.device(0, w.string("NVIDIA H200"), 150 << 30).context(7, 0)
    stacks = []
    for depth in range(4):
        frame = w.frame(w.string(f"model{depth}.py"), w.string(f"layer{depth}"), 10 + depth)
        stacks.append(w.python_stack(stacks[-1] if stacks else 0, frame))
    time, live = 0, []
    for chunk in range(chunks):
        for i in range(events_per_chunk // 2):
            time += 1000 * (1 + i % 3)
            address = 0x7F0000000000 + ((chunk * 997 + i * 131) % 4096) * 512
            size = (1 + i % 5) * 4096
            w.alloc(time, address, size, python=stacks[i % 4])
            live.append(address)
            time += 1000
            w.free(time, live.pop(0))
        w.flush(compressed=chunk in flushes)
    w.marker(time + 1000, PROCESS_EXIT)
    return w


def parse(trace):
    return run([Build.report, "parse", trace]).stdout


def chunk_headers(data):
    """(size field, offset) of each chunk of a whole file."""
    headers, offset = [], 16
    while offset < len(data):
        size = struct.unpack_from("<I", data, offset)[0]
        headers.append((size, offset))
        offset += 12 + (size & ~COMPRESSED_CHUNK)
    assert offset == len(data)
    return headers


def test_compact_reads_as_the_trace_in_fewer_bytes(build, tmp_path):
    trace = busy_trace().write(tmp_path / "trace.bin", version=8)
    small = tmp_path / "small.bin"
    result = run([Build.report, "compact", trace, "-o", small])
    data = small.read_bytes()
    assert data[:8] == b"MEMTRACE" and struct.unpack_from("<I", data, 8)[0] == VERSION
    headers = chunk_headers(data)
    # The 5 chunks become one (records put together up to 1 MiB), compressed.
    assert len(chunk_headers(trace.read_bytes())) == 5 and len(headers) == 1
    assert headers[0][0] & COMPRESSED_CHUNK
    assert len(data) < trace.stat().st_size / 2, (len(data), trace.stat().st_size)
    assert parse(small) == parse(trace)
    assert run([Build.report, small, "--format", "json"]).stdout == \
        run([Build.report, trace, "--format", "json"]).stdout.replace(str(trace), str(small))
    events = parse(trace).count("\nalloc ") + parse(trace).count("\nfree ")
    assert result.stderr.startswith(f"{small}: {events} events; {trace.stat().st_size} bytes in 5 "
                                    f"chunks -> {len(data)} bytes in 1 chunks"), result.stderr
    # Compacting a compacted trace changes nothing.
    again = tmp_path / "again.bin"
    run([Build.report, "compact", small, "-o", again])
    assert again.read_bytes() == data


def test_compressed_chunks_written_by_hand_read_as_plain_ones(build, tmp_path):
    plain = busy_trace().write(tmp_path / "plain.bin", version=VERSION)
    mixed = busy_trace(flushes=(0, 2)).write(tmp_path / "mixed.bin", version=VERSION)
    flags = [size & COMPRESSED_CHUNK != 0 for size, _ in chunk_headers(mixed.read_bytes())]
    assert flags == [True, False, True, False, False]
    assert parse(mixed) == parse(plain)
    assert run([Build.report, mixed]).stdout == run([Build.report, plain]).stdout.replace(
        str(plain), str(mixed))


def test_an_open_chunk_and_a_cut_one_are_taken_as_the_reader_takes_them(build, tmp_path):
    # A stopped writer's file ends in an open chunk: its records up to the last whole one.
    w = busy_trace(chunks=2)
    w.alloc(10**9, 0x7F1000000000, 1 << 20)
    w.alloc(10**9 + 1000, 0x7F1000100000, 1 << 20)
    stopped = w.write(tmp_path / "stopped.bin", version=8, open_tail=64)
    run([Build.report, "compact", stopped, "-o", tmp_path / "stopped.small.bin"])
    records, last = parse(stopped).rsplit("\n", 2)[:2]
    assert last.startswith("open chunk at byte ") and "0x7f1000100000" in records
    assert parse(tmp_path / "stopped.small.bin") == records + "\n"  # whole: no open chunk
    # A file cut inside its last chunk: that chunk is left out, as every command leaves it.
    data = busy_trace().write(tmp_path / "whole.bin", version=8).read_bytes()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(data[:-5])
    run([Build.report, "compact", cut, "-o", tmp_path / "cut.small.bin"])
    records, last = parse(cut).rsplit("\n", 2)[:2]
    assert last.startswith("cut at byte ") and last.endswith(f" of {len(data) - 5}"), last
    assert parse(tmp_path / "cut.small.bin") == records + "\n"
    assert "partial chunk" not in run([Build.report, tmp_path / "cut.small.bin"]).stderr


def damaged(tmp_path, name, records_size=None, stream=None):
    """A version-9 file whose one compressed chunk holds `stream` said to inflate to
    `records_size` bytes, its checksums right: what only the inflation can tell."""
    w = busy_trace(chunks=1)
    w.flush()
    plain = w.chunks[0][12:]
    payload = struct.pack("<I", len(plain) if records_size is None else records_size) + (
        zlib.compress(plain) if stream is None else stream)
    header = struct.pack("<II", len(payload) | COMPRESSED_CHUNK, crc32c(payload))
    path = tmp_path / name
    path.write_bytes(b"MEMTRACE" + struct.pack("<II", VERSION, 0) + header +
                     struct.pack("<I", crc32c(header)) + payload)
    return path


def test_damaged_compressed_chunks_are_refused_in_one_line(build, tmp_path):
    good = damaged(tmp_path, "good.bin")
    assert "alloc " in parse(good)
    stream = zlib.compress(busy_trace(chunks=1).flush().chunks[0][12:])
    cases = {
        "garbage.bin": (damaged(tmp_path, "garbage.bin", stream=b"\x78\x9c" + bytes(range(40))),
                        "does not inflate to the"),
        "short.bin": (damaged(tmp_path, "short.bin", stream=stream[:len(stream) // 2]),
                      "does not inflate to the"),
        "longer.bin": (damaged(tmp_path, "longer.bin", records_size=100), "does not inflate to the"),
        "shorter.bin": (damaged(tmp_path, "shorter.bin", records_size=10**6),
                        "does not inflate to the 1000000 bytes it says (zlib: fewer bytes)"),
        "zero.bin": (damaged(tmp_path, "zero.bin", records_size=0), "says its records take 0 bytes"),
        "huge.bin": (damaged(tmp_path, "huge.bin", records_size=1 << 30),
                     f"says its records take {1 << 30} bytes"),
    }
    for path, message in cases.values():
        for command in (["parse", path], [path], ["compact", path, "-o", tmp_path / "out.bin"]):
            fails(command, str(path), "a compressed chunk at byte 16", message)
    assert not (tmp_path / "out.bin").exists()
    # Before version 9 the top bit is part of the size: far past a chunk's bound.
    data = bytearray(good.read_bytes())
    data[8:12] = struct.pack("<I", 8)
    (tmp_path / "eight.bin").write_bytes(bytes(data))
    fails(["parse", tmp_path / "eight.bin"], "a chunk of", "bytes at byte 16 (corrupted?)")


@pytest.mark.parametrize("version", [11, 12])
def test_compact_keeps_version_11s_events(build, tmp_path, version):
    # Note [Events in fewer bytes] in records.h: compact copies the records as they are, so a
    # version 11 file (its events in version 11's layout) stays version 11 and reads the same;
    # so does a version 12 file (Note [Allocations named by the blocks before them]), whose last
    # allocation names the newest free's block.
    w = TraceWriter(time_unit_ns=1000)
    w.device(0, w.string("GPU 0"), 1 << 34).context(7, 0)
    blocks = version >= 12
    for i in range(20):
        w.compact_event(False, 1000 * i, 0x7f0000000000 + i * (1 << 20), 512 * (i + 1),
                        blocks=blocks)
    w.flush()
    for i in range(20):
        place = 20 - i  # the oldest first: past the last 7 by its place, then by a table entry
        w.compact_event(True, 30000 + 1000 * i, 0x7f0000000000 + i * (1 << 20),
                        **({"place": place} if place > 7 else {"entry": place}))
    if blocks:
        w.compact_event(False, 60000, 0x7f0000000000 + 19 * (1 << 20), blocks=True, freed=1,
                        sized=True)
    trace = w.write(tmp_path / "eleven.bin", version=version)
    small = tmp_path / "small.bin"
    run([Build.report, "compact", trace, "-o", small])
    assert struct.unpack_from("<I", small.read_bytes(), 8)[0] == version
    if blocks:
        assert parse(trace).rstrip().endswith(f"address=0x{0x7f0000000000 + 19 * (1 << 20):x} "
                                              f"size={512 * 20} pystack=0 native=0 untraced")
    assert parse(small) == parse(trace)
    assert parse(trace).count("\nfree ") == 20 and "address=0x7f0000000000 size=512" in parse(trace)


def test_compact_refuses_what_it_cannot_write(build, tmp_path):
    trace = busy_trace().write(tmp_path / "trace.bin", version=8)
    fails(["compact", trace], "compact writes a file: give it with -o FILE")
    old = TraceWriter().write(tmp_path / "old.bin", version=7)
    fails(["compact", old, "-o", tmp_path / "x.bin"], "trace format version 7; compact takes "
          "versions 8 to 12")
    (tmp_path / "taken.bin").write_bytes(b"mine")
    fails(["compact", trace, "-o", tmp_path / "taken.bin"], "already exists; -f/--force")
    assert (tmp_path / "taken.bin").read_bytes() == b"mine"
    run([Build.report, "compact", trace, "-o", tmp_path / "taken.bin", "-f"])
    assert parse(tmp_path / "taken.bin") == parse(trace)
