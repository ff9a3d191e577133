"""Where a trace's bytes go, field by field (issue 52, item 4): each memory event's type byte,
time delta, address, size and stacks as the writer encodes them (Note [Event bit layout] in
tracer/format/records.h), the other records as the rest of the chunks; and what the events
would take in other encodings, so that a change of format is weighed before it is made.

    python3 bench/event_fields.py BUILD_DIR TRACE [--unit NS]

BUILD_DIR's memtrace-report parses TRACE; the events are then encoded again here, as version 8
writes them, with times at the start of their --unit (default: the trace's own; 1000 turns a
nanosecond trace into what the default writes now: a time is taken at the start of its unit,
exactly as the writer does). Every figure is bytes over the trace's memory events. The encoder
here is checked against the file: with the trace's own unit, the events' bytes must not exceed
the chunks' payloads (a mismatch means this script is wrong, and it says so). The other records
(tables, contexts, segments, markers, chunk headers) are the rest, their time deltas re-encoded in
each column's unit. The variants:
  - size / 512: the size field as size / 512 * 2 + 1 when 512 divides it (PyTorch's caching
    allocator rounds every block to 512 B), else size * 2;
  - per thread: the address base, the event tables and the previous stacks kept for each thread
    (the context's), as interleaved threads would need;
  - recent free: an allocation at the address of one of the last 8 frees writes k (1 to 8) in
    the address field instead of its delta, every other address field value moving up by 8
    (zigzag(delta) + 9): what naming a reused block would take with no bit of the type byte free;
  - both: recent free and size / 512 together;
  - version 10 / version 11: the events in the other layout than the file's (Note [Events in fewer
    bytes] in tracer/format/records.h: version 11's time delta of 0-2 units in the type byte, one
    bit for both stacks, a free naming any allocation of the ring of 4,096 by its place);
  - version 12: version 11's layout with an allocation naming a recent free (its address and size,
    or its address) or a recent allocation's end, sizes in 512-byte units, Python stacks as deltas
    (Note [Allocations named by the blocks before them]); a version 12 file's own column, and its
    "version 11" column the same events in version 11's layout. Every column but the file's own
    counts the other records as the file has them (a version 12 file's strings included).
"""
import argparse
import re
import subprocess
from pathlib import Path

from trace_chunks import chunk_bytes  # bench/trace_chunks.py, beside this script


def varint_size(value):
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def zigzag(value):
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def size_slot(size):
    return ((((size * 0x9E3779B97F4A7C15) % (1 << 64)) >> 32) * 7) >> 32


class Bases:
    """The decoding bases an event is encoded against (records.h's EventTables and the rest)."""

    def __init__(self):
        self.address = 0
        self.sizes = [0] * 7
        self.recent = []
        self.frees = []  # the last 8 frees' addresses (the "recent free" variants)
        self.python = [0, 0]
        self.native = [0, 0]


class Encoder:
    def __init__(self, unit, start, variant, layout=10):
        self.unit, self.start, self.variant, self.layout = unit, start, variant, layout
        self.last_time = 0  # ns since the start, at the start of its unit
        self.bases = {}
        self.fields = dict.fromkeys(("type", "time", "address", "size", "python stack",
                                     "native stack"), 0)
        self.events = 0

    def time(self, time_ns):
        """A timed record's delta, in bytes (every timed record moves the base, events or not)."""
        delta = max(0, time_ns - self.last_time)
        units = delta // self.unit
        self.last_time += units * self.unit
        return varint_size(units)

    def event(self, free, time_ns, address, size, python, native, thread):
        if self.layout >= 12:
            return self.block_event(free, time_ns, address, size, python, native)
        if self.layout >= 11:
            return self.compact_event(free, time_ns, address, size, python, native)
        bases = self.bases.setdefault(thread if self.variant == "per thread" else 0, Bases())
        self.events += 1
        self.fields["type"] += 1
        self.fields["time"] += self.time(time_ns)
        recent = 0
        if free:
            for k, candidate in enumerate(reversed(bases.recent[-7:]), 1):
                if candidate == address:
                    recent = k
                    break
        reuse = self.variant in ("recent free", "both")
        if not recent:
            delta = address - bases.address
            if delta & 0xFF == 0:
                delta >>= 8
            if reuse and not free and address in bases.frees:
                self.fields["address"] += 1  # k, 1 to 8
            elif reuse and not free:
                self.fields["address"] += varint_size(zigzag(delta) + 9)
            else:
                self.fields["address"] += varint_size(zigzag(delta))
        bases.address = address
        if free:
            bases.frees = bases.frees[-7:] + [address]
        if not free:
            slot = size_slot(size)
            if bases.sizes[slot] != size:
                if self.variant in ("size / 512", "both"):
                    value = (size // 512) * 2 + 1 if size % 512 == 0 else size * 2
                else:
                    value = size
                self.fields["size"] += varint_size(value)
                bases.sizes[slot] = size
            bases.recent = bases.recent[-7:] + [address]
        kind = 1 if free else 0
        if python != bases.python[kind]:
            self.fields["python stack"] += varint_size(python)
            bases.python[kind] = python
        if native != bases.native[kind]:
            self.fields["native stack"] += varint_size(native)
            bases.native[kind] = native


    def compact_event(self, free, time_ns, address, size, python, native):
        """Version 11's layout, as RecordWriter::writeEvent writes it: the recorder's live table
        numbers each allocation, so a free names any of the last 4,096 by its place."""
        bases = self.bases.setdefault(0, Bases())
        if not hasattr(bases, "numbers"):
            bases.numbers, bases.count = {}, 0
        self.events += 1
        self.fields["type"] += 1
        delta = max(0, time_ns - self.last_time)
        units = delta // self.unit
        self.last_time += units * self.unit
        self.fields["time"] += varint_size(units - 3) if units >= 3 else 0
        place = 0
        if free:
            number = bases.numbers.pop(address, None)
            if number is not None and bases.count - number <= 4096:
                place = bases.count - number
        if place > 7:
            self.fields["address"] += varint_size((place - 8) << 1 | 1)
        elif not place:
            delta = address - bases.address
            if delta & 0xFF == 0:
                self.fields["address"] += varint_size((zigzag(delta >> 8) + 1) << (1 if free else 0))
            else:
                self.fields["address"] += 1 + varint_size(zigzag(delta))
        bases.address = address
        if not free:
            slot = size_slot(size)
            if bases.sizes[slot] != size:
                self.fields["size"] += varint_size(size)
                bases.sizes[slot] = size
            bases.numbers[address] = bases.count
            bases.count += 1
        kind = 1 if free else 0
        if python != bases.python[kind] or native != bases.native[kind]:
            self.fields["python stack"] += varint_size(python << 1 | (native != bases.native[kind]))
            if native != bases.native[kind]:
                self.fields["native stack"] += varint_size(native)
            bases.python[kind], bases.native[kind] = python, native


    def block_event(self, free, time_ns, address, size, python, native):
        """Version 12's layout, as RecordWriter::writeEvent writes it: an allocation names the
        newest free at its address (with its size where the free named its place and the sizes
        match), else a recent allocation's end, else its delta; the rings hold 4,096 each."""
        bases = self.bases.setdefault(0, Bases())
        if not hasattr(bases, "numbers"):
            bases.numbers, bases.count = {}, 0
            bases.sizes_of, bases.freed, bases.frees, bases.ends = {}, {}, 0, {}
        self.events += 1
        self.fields["type"] += 1
        delta = max(0, time_ns - self.last_time)
        units = delta // self.unit
        self.last_time += units * self.unit
        self.fields["time"] += varint_size(units - 3) if units >= 3 else 0
        kind = 1 if free else 0
        if free:
            number = bases.numbers.pop(address, None)
            size = bases.sizes_of.pop(address, None)
            place = bases.count - number if number is not None and bases.count - number <= 4096 else 0
            if place > 7:
                self.fields["address"] += varint_size((place - 8) << 1 | 1)
            elif not place:
                delta = address - bases.address
                if delta & 0xFF == 0:
                    self.fields["address"] += varint_size((zigzag(delta >> 8) + 1) << 1)
                else:
                    self.fields["address"] += 1 + varint_size(zigzag(delta))
            bases.freed[address] = (bases.frees, size if place else None)
            bases.frees += 1
        else:
            sized = False
            hit = bases.freed.get(address)
            end = bases.ends.get(address)
            delta = address - bases.address
            if hit and bases.frees - hit[0] <= 4096:
                sized = hit[1] == size
                self.fields["address"] += varint_size((bases.frees - hit[0] - 1) << 2 | 1)
            elif end is not None and bases.count - end <= 4096:
                self.fields["address"] += varint_size((bases.count - end - 1) << 2 | 3)
            elif delta & 0xFF == 0:
                self.fields["address"] += varint_size((zigzag(delta >> 8) + 1) << 2)
            else:
                self.fields["address"] += 1 + varint_size(zigzag(delta))
            if not sized:
                slot = size_slot(size)
                if bases.sizes[slot] != size:
                    value = size // 512 << 1 | 1 if size % 512 == 0 else size << 1
                    self.fields["size"] += varint_size(value)
                    bases.sizes[slot] = size
            bases.numbers[address] = bases.count
            bases.sizes_of[address] = size
            bases.ends[address + (size + 511) // 512 * 512] = bases.count
            bases.count += 1
        bases.address = address
        if python != bases.python[kind] or native != bases.native[kind]:
            value = zigzag(python - bases.python[kind])
            self.fields["python stack"] += varint_size(value << 1 | (native != bases.native[kind]))
            if native != bases.native[kind]:
                self.fields["native stack"] += varint_size(native)
            bases.python[kind], bases.native[kind] = python, native


def read(report, path):
    return subprocess.run([report, "parse", path], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def encode(lines, unit, variant, version=10):
    process = next(line for line in lines if line.startswith("process "))
    start = int(re.search(r"start_monotonic_ns=(\d+)", process).group(1))
    found = re.search(r" time_unit_ns=(\d+)", process)
    own_unit = int(found.group(1)) if found else 1
    # The other variants are version 10's layout changed (compare them with its column).
    layout = (12 if variant == "version 12" or (not variant and version >= 12)
              else 11 if variant == "version 11" or (not variant and version >= 11) else 10)
    encoder = Encoder(unit or own_unit, start, variant, layout)
    other_time = 0
    thread = 0
    for line in lines:
        kind = line.split(" ", 1)[0]
        if kind == "context":
            thread = int(re.search(r"thread=(\d+)", line).group(1))
            continue
        if kind == "section":
            raise SystemExit("a flight recorder's file: its sections are not modelled here")
        found = re.search(r" t=(\d+)", line)
        if kind == "segment" and version >= 10:
            # Version 10's kSegmentNear moves the events' address base to the segment (Note
            # [Records beside the events, shorter]); its own bytes stay among the other records.
            bases = encoder.bases.setdefault(thread if variant == "per thread" else 0, Bases())
            bases.address = int(re.search(r"address=0x([0-9a-f]+)", line).group(1), 16)
        if kind in ("alloc", "free"):
            fields = dict(re.findall(r"(\w+)=(\S+)", line))
            encoder.event(kind == "free", int(found.group(1)), int(fields["address"], 16),
                          int(fields["size"]), int(fields["pystack"]), int(fields["native"]),
                          thread)
        elif found:
            other_time += encoder.time(int(found.group(1)))
    return encoder, own_unit, other_time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("trace")
    parser.add_argument("--unit", type=int, default=0, help="time unit in ns (default: the trace's)")
    arguments = parser.parse_args()
    report = str(Path(arguments.build) / "bin" / "memtrace-report")
    lines = read(report, arguments.trace)
    total = chunk_bytes(arguments.trace) - 16
    version = int.from_bytes(Path(arguments.trace).read_bytes()[8:12], "little")
    own, own_unit, own_other_time = encode(lines, 0, "", version)
    if not own.events:
        raise SystemExit(f"{arguments.trace}: no memory events")
    other = total - sum(own.fields.values())
    if other < 0:
        raise SystemExit(f"{arguments.trace}: the events as encoded here take {-other} bytes more "
                         "than the file's chunks: this script's encoder is wrong")
    events = own.events
    print(f"{arguments.trace}: {events:,} memory events, {total:,} bytes of chunks "
          f"({total / events:.2f} an event), time unit {own_unit} ns")
    columns = [(f"as written ({own_unit} ns)", own, other)]
    unit = arguments.unit or own_unit
    other_layouts = (("version 11",) if version >= 12 else ("version 10", "version 12")
                     if version >= 11 else ("version 11", "version 12"))
    for variant in ("", "size / 512", "per thread", "recent free", "both") + other_layouts:
        encoder, _, other_time = encode(lines, unit, variant, version)
        # The other records' time deltas in this unit instead of the file's.
        columns.append((f"{unit} ns" + (f", {variant}" if variant else ""), encoder,
                        other - own_other_time + other_time))
    print("| field | " + " | ".join(name for name, _, _ in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for field in own.fields:
        print(f"| {field} | " + " | ".join(f"{e.fields[field] / events:.2f}" for _, e, _ in columns)
              + " |")
    print("| the other records (chunk headers included) | "
          + " | ".join(f"{rest / events:.2f}" for _, _, rest in columns) + " |")
    print("| **an event** | " + " | ".join(f"**{(sum(e.fields.values()) + rest) / events:.2f}**"
                                          for _, e, rest in columns) + " |")


if __name__ == "__main__":
    main()
