"""Writes memtrace traces by hand, record by record, from docs/trace-format.md (as
tests/unit/trace_builder.h does in C++), so that the views' tests can check their output
against traces whose every byte count is known."""
import struct
import zlib

MAGIC = b"MEMTRACE"
VERSION = 4
STRING_FROM = 0x22  # version 12 (Note [Strings that begin as an earlier one])
COMPRESSED_CHUNK = 0x80000000  # a chunk size's top bit, version 9 (Note [Compressed chunks])

# Record types and marker kinds (tracer/format/records.h).
PROCESS_INFO, STRING, PYTHON_FRAME, PYTHON_STACK, NATIVE_STACK, LOADED_OBJECT, DEVICE, CONTEXT, \
    MARKER, FAILED_ALLOC, MODULE_SCOPE, CATEGORY, TRAINING_PHASE, STEP_END, MEMORY_MAP, \
    MEMORY_UNMAP, ADDRESS_RESERVE, ADDRESS_FREE, DISTRIBUTED, DEVICE_MEMORY, SIMULATED_DEVICE, \
    DEVICE_READ = range(1, 23)
GENERATED_CODE = 0x19  # version 3 (Note [Generated code]; 0x17 and 0x18 are not this branch's)
CU_MEM_CREATE, CU_MEM_ALLOC_MANAGED = 7, 8  # APIs of version 2
CUDA_MALLOC_ASYNC, DEVICE_READ_API = 2, 9  # a device read's context has API 9 (version 3)
# Categories and training phases (Note [Training records]).
UNKNOWN, PARAMETER, GRADIENT, OPTIMIZER_STATE, ACTIVATION, INPUT, TEMPORARY = range(7)
NO_PHASE, FORWARD, BACKWARD, OPTIMIZER = range(4)
TRACING_STARTED, TRACING_STOPPED, ANNOTATION, PHASE_BEGIN, PHASE_END, PROCESS_EXIT, TRACE_CLOSED = range(7)
EVENT, FREE, ADDRESS_IN_256 = 0x80, 0x40, 0x20
# Version 6's: a size the simulated GPU answered (Note [Sizes in the trace]), its context's API,
# its certainties.
SIMULATED_SIZE, SIMULATED_SIZE_API = 0x1c, 11
EXACT, BOUNDED, ESTIMATED = range(3)
# Version 4's: the flight recorder's records and flag, its section kinds.
SECTION, STEP_PEAK, FLIGHT = 0x17, 0x18, 1
FRAME, PEAK, OUT_OF_MEMORY, WINDOW = range(4)
# Version 6's: the module owning an allocation (Note [Weights and their modules]).
OWNER_MODULE = 0x1b
# Version 10's short forms (Note [Records beside the events, shorter] in records.h).
RECENT_CATEGORY, RECENT_OWNER_MODULE, STRING_AFTER, SEGMENT_NEAR = 0x1e, 0x1f, 0x20, 0x21


def varint_value(data):
    """The value of the varint `data` (one varint's bytes)."""
    return sum((byte & 0x7F) << (7 * i) for i, byte in enumerate(data))


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli), the chunks' checksum."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def zigzag(value):
    return (value << 1) ^ (value >> 63) if value < 0 else value << 1


def byte_string(data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return varint(len(data)) + data


class TraceWriter:
    """Builds a trace in memory; ids are returned by the methods that define them.
    Times are absolute nanoseconds since the trace's start."""

    def __init__(self, pid=4242, command=("python", "model.py"), stacks=1, host="host",
                 start_unix_ns=1700000000000000000, start_monotonic_ns=1000, time_unit_ns=None):
        """`time_unit_ns`: version 8's time unit (Note [Times in microseconds] in
        tracer/format/records.h), written as the process record's last field; the times given
        are then still nanoseconds, multiples of it, and each delta is written in units. None:
        no such field, for a file of version 7 or older."""
        self.time_unit_ns = time_unit_ns
        self.chunk = bytearray()
        self.chunks = []
        self.strings = self.frames = self.python_stacks = self.native_stacks = 0
        self.last_time = 0
        self.last_address = 0
        self.chunk += bytes([PROCESS_INFO]) + varint(pid) + varint(1) + varint(start_unix_ns) \
            + varint(start_monotonic_ns) + byte_string("\0".join(command)) \
            + byte_string("/usr/bin/python3") + byte_string(host) + byte_string("memtrace test") \
            + bytes([stacks]) + varint(128) + varint(32) + bytes([0])
        if time_unit_ns is not None:
            self.chunk += varint(time_unit_ns)

    def distributed(self, rank, world_size, local_rank=-1, local_world_size=-1, group_rank=-1,
                    restart_count=0, job_id="job"):
        """The rank's description, right after the process record (as the recorder writes it)."""
        self.chunk += bytes([DISTRIBUTED]) + b"".join(
            varint(zigzag(value)) for value in (rank, world_size, local_rank, local_world_size,
                                                group_rank, restart_count)) + byte_string(job_id)
        return self

    def _delta(self, time):
        assert time >= self.last_time, "times must not go back"
        delta, self.last_time = time - self.last_time, time
        unit = self.time_unit_ns or 1
        assert delta % unit == 0, "times must be multiples of the time unit"
        return varint(delta // unit)

    def string(self, text):
        self.chunk += bytes([STRING]) + byte_string(text)
        self.strings += 1
        return self.strings

    def frame(self, file, function, line):
        self.chunk += bytes([PYTHON_FRAME]) + varint(file) + varint(function) + varint(line)
        self.frames += 1
        return self.frames

    def python_stack(self, parent, frame):
        self.chunk += bytes([PYTHON_STACK]) + varint(parent) + varint(frame)
        self.python_stacks += 1
        return self.python_stacks

    def device(self, index, name, total):
        self.chunk += bytes([DEVICE]) + varint(zigzag(index)) + varint(name) + varint(total)
        return self

    def context(self, thread, device, stream=0, api=0, level=0):
        self.chunk += bytes([CONTEXT]) + varint(thread) + varint(zigzag(device)) + varint(stream) \
            + bytes([api, level])
        return self

    def module_scope(self, path):
        """The nn.Module (a string id; 0: none) running on the current context's thread."""
        self.chunk += bytes([MODULE_SCOPE]) + varint(path)
        return self

    def category(self, address, category):
        """What the live allocation at `address` holds (no time: it holds for its whole life)."""
        self.chunk += bytes([CATEGORY]) + varint(address) + bytes([category])
        return self

    def owner_module(self, address, module):
        """The module (a string id) whose parameter or buffer the live allocation at `address`
        holds (version 6; no time: it holds for the allocation's whole life)."""
        self.chunk += bytes([OWNER_MODULE]) + varint(address) + varint(module)
        return self

    def recent_category(self, k, category):
        """Version 10: the category of the k-th most recent allocation (k = 1: the newest)."""
        self.chunk += bytes([RECENT_CATEGORY]) + varint(k << 3 | category)
        return self

    def recent_owner_module(self, k, module):
        """Version 10: the module (a string id) owning the k-th most recent allocation."""
        self.chunk += bytes([RECENT_OWNER_MODULE]) + varint(k) + varint(module)
        return self

    def segment_near(self, time, action, device, address, size):
        """Version 10: a segment whose address is a delta from the events' address base, which
        moves to it (the default pools)."""
        delta = address - self.last_address
        self.last_address = address
        field = zigzag(delta // 256) << 1 | 1 if delta % 256 == 0 else zigzag(delta) << 1
        self.chunk += bytes([SEGMENT_NEAR]) + self._delta(time) + bytes([action]) \
            + varint(zigzag(device)) + varint(field) + varint(size) + varint(0) + varint(0)
        return self

    def string_after(self, shared, rest):
        """Version 10: a string made of the first `shared` bytes of the string before it and
        `rest`."""
        self.chunk += bytes([STRING_AFTER]) + varint(shared) + byte_string(rest)
        self.strings += 1
        return self.strings

    def training_phase(self, time, phase):
        self.chunk += bytes([TRAINING_PHASE]) + self._delta(time) + bytes([phase])
        return self

    def step_end(self, time, step):
        self.chunk += bytes([STEP_END]) + self._delta(time) + varint(step)
        return self

    # Version 2 (Note [Virtual memory management], Note [Device memory readings]).
    def memory_map(self, time, address, size, offset, handle):
        self.chunk += bytes([MEMORY_MAP]) + self._delta(time) + varint(address) + varint(size) \
            + varint(offset) + varint(handle)
        return self

    def address_range(self, record, time, address, size):
        self.chunk += bytes([record]) + self._delta(time) + varint(address) + varint(size)
        return self

    def device_memory(self, time, device, free, total):
        self.chunk += bytes([DEVICE_MEMORY]) + self._delta(time) + varint(zigzag(device)) \
            + varint(free) + varint(total)
        return self

    # Version 3 (the simulated device, docs/trace-format.md).
    def simulated_device(self, profile="h200", file="/opt/memtrace/profiles/h200.json",
                         memory=150_754_820_096, memory_set_by_user=False, devices=1):
        """The run was on the simulated GPU: right after the process record (and the rank's)."""
        self.chunk += bytes([SIMULATED_DEVICE]) + byte_string(profile) + byte_string(file) \
            + varint(memory) + bytes([1 if memory_set_by_user else 0]) + varint(devices)
        return self

    def device_read(self, time, size, python=0, native=0):
        """A copy from device memory to the host (a read of device values)."""
        self.chunk += bytes([DEVICE_READ]) + self._delta(time) + varint(size) + varint(python) \
            + varint(native)
        return self

    def simulated_size(self, time, question, size, at_most=None, certainty=ESTIMATED, address=0,
                       python=0, native=0):
        """A size a simulated library answered without knowing it (version 6): `question` a
        string id, `at_most` None for no bound, `address` the buffer it was handed (0: none)."""
        self.chunk += bytes([SIMULATED_SIZE]) + self._delta(time) + varint(address) \
            + varint(size) + varint(0 if at_most is None else at_most + 1) + bytes([certainty]) \
            + varint(question) + varint(python) + varint(native)
        return self

    def section(self, time, kind, tracing=0, phase=0, window=1000, totals=(0, 0, 0, 0, 0, 0),
                devices=()):
        """A flight recorder's section (docs/trace-format.md): every decoding base starts
        afresh. `devices`: (device, allocated bytes, peak bytes, peak time) each."""
        self.chunk += bytes([SECTION]) + varint(time) + bytes([kind, tracing, phase]) \
            + varint(window) + b"".join(varint(value) for value in totals) + varint(len(devices)) \
            + b"".join(varint(zigzag(d)) + varint(a) + varint(p) + varint(t)
                       for d, a, p, t in devices)
        self.last_time, self.last_address = time, 0
        return self

    def step_peak(self, step, begin, end, peak_time, peak_bytes, phase=0, module=0):
        """A flight recorder's step: its fields relative to the previous step peak's."""
        previous_step, previous_end = getattr(self, "_step", (0, 0))
        self.chunk += bytes([STEP_PEAK]) + varint(zigzag(step - previous_step)) \
            + varint(begin - previous_end) + varint(end - begin) + varint(peak_time - begin) \
            + varint(peak_bytes) + bytes([phase]) + varint(module)
        self._step = (step, end)
        return self
    def generated_code(self, file, first_line, line_count, source_stack):
        """Lines [first_line, first_line + line_count) of the generated file (a string id)
        stand for the source stack (a Python stack node)."""
        self.chunk += bytes([GENERATED_CODE]) + varint(file) + varint(first_line) \
            + varint(line_count) + varint(source_stack)
        return self

    def marker(self, time, kind, name=0):
        self.chunk += bytes([MARKER]) + self._delta(time) + bytes([kind]) + varint(name)
        return self

    def _event(self, free, time, address, size, python, native):
        bits = EVENT | (FREE if free else 0)
        delta = address - self.last_address
        self.last_address = address
        if delta % 256 == 0:
            bits |= ADDRESS_IN_256
            delta //= 256
        body = self._delta(time) + varint(zigzag(delta))
        if not free:
            body += varint(size)
        self.chunk += bytes([bits]) + body + varint(python) + varint(native)
        return self

    @staticmethod
    def size_slot(size):
        """The sizes table's slot of `size` (EventTables::sizeSlot), from 0 to 6."""
        return ((((size * 0x9E3779B97F4A7C15) % (1 << 64)) >> 32) * 7) >> 32

    def alloc(self, time, address, size, python=0, native=0):
        return self._event(False, time, address, size, python, native)

    def free(self, time, address):
        return self._event(True, time, address, 0, 0, 0)

    def alloc_of_size_entry(self, time, address, entry, python=0, native=0):
        """Version 7 (Note [Event tables] in tracer/format/records.h): an allocation whose size
        is in slot `entry` - 1 of the sizes table (size_slot), so not written."""
        delta = address - self.last_address
        self.last_address = address
        self.chunk += bytes([EVENT | entry]) + self._delta(time) + varint(zigzag(delta)) \
            + varint(python) + varint(native)
        return self

    def free_of_recent_allocation(self, time, address, entry):
        """Version 7: a free of the `entry`-th most recent allocation (at `address`), its
        address not written."""
        self.last_address = address
        self.chunk += bytes([EVENT | FREE | entry]) + self._delta(time) + varint(0) + varint(0)
        return self

    def compact_event(self, free, time, address, size=0, place=0, entry=0, python=None,
                      native=None, blocks=False, freed=0, sized=False, end=0):
        """Version 11 (Note [Events in fewer bytes] in tracer/format/records.h): a time delta of 0-2
        units in the type byte, else a field of the delta - 3; an allocation's address as v - 1 =
        its zigzag delta / 256 (v = 0 and the delta, where not 256-aligned); a free by `entry`
        (1-7: bits 2-0), by its `place` in the ring (> 7), or by its address (that v, doubled);
        `entry` of an allocation: its size's slot + 1 (no size field); stacks None: the previous
        ones (bit 3), else the Python stack s >> 1 and, where s & 1, the native one after it.
        `blocks`: version 12's layout (Note [Allocations named by the blocks before them]): an
        allocation at the `freed`-th most recent free's address (with its size, no size field,
        where `sized`), at the `end`-th most recent allocation's end, or at its delta (v times 4);
        its size in 512-byte units where odd; the Python stack a zigzag delta from the previous
        one of its kind. The test says where `address` is; this writer keeps no tables."""
        bits = EVENT | (FREE if free else 0) | entry
        units = varint_value(self._delta(time))
        body = b""
        if units < 3:
            bits |= units << 4
        else:
            bits |= 0x30
            body += varint(units - 3)
        delta = address - self.last_address
        self.last_address = address
        if free and entry:
            pass
        elif place:
            body += varint((place - 8) << 1 | 1)
        elif freed:
            body += varint((freed - 1) << 2 | (1 if sized else 2))
        elif end:
            body += varint((end - 1) << 2 | 3)
        elif delta % 256 == 0:
            body += varint((zigzag(delta // 256) + 1) << (1 if free else 2 if blocks else 0))
        else:
            body += varint(0) + varint(zigzag(delta))
        if not free and not entry and not sized:
            if not blocks:
                body += varint(size)
            else:
                body += varint(size // 512 << 1 | 1 if size % 512 == 0 else size << 1)
        if python is None and native is None:
            bits |= 0x08
        else:
            kind = 1 if free else 0
            value = python or 0
            if blocks:
                last = getattr(self, "last_python", [0, 0])
                value, last[kind] = zigzag(value - last[kind]), value
                self.last_python = last
            body += varint(value << 1 | (native is not None)) \
                + (varint(native) if native is not None else b"")
        self.chunk += bytes([bits]) + body
        return self

    def string_from(self, back, shared, rest):
        """Version 12's kStringFrom (0x22; Note [Strings that begin as an earlier one]): a string
        that begins as the string `back` ids before it, its first `shared` bytes."""
        self.chunk += bytes([STRING_FROM]) + varint(back) + varint(shared) + byte_string(rest)
        self.strings += 1
        return self.strings

    def failed_alloc(self, time, size, python=0):
        self.chunk += bytes([FAILED_ALLOC]) + self._delta(time) + varint(size) + varint(python) + varint(0)
        return self

    def flush(self, compressed=False):
        """Closes the chunk being built. `compressed`: as a version-9 compressed chunk (Note
        [Compressed chunks] in tracer/format/records.h): the records' size, then the records as a
        zlib stream, the size field's top bit set."""
        if self.chunk:
            payload = bytes(self.chunk)
            size = len(payload)
            if compressed:
                payload = struct.pack("<I", len(payload)) + zlib.compress(payload)
                size = len(payload) | COMPRESSED_CHUNK
            header = struct.pack("<II", size, crc32c(payload))
            self.chunks.append(header + struct.pack("<I", crc32c(header)) + payload)
            self.chunk = bytearray()
        return self

    def write(self, path, version=VERSION, flags=0, open_tail=0):
        """With `open_tail`, the records not yet in a chunk are written as an open chunk (its
        size 0) followed by that many zero bytes, as a mapped trace's writer leaves them."""
        assert (version >= 8) == (self.time_unit_ns is not None), \
            "a version-8 file names its time unit (time_unit_ns=), an older one does not"
        if not open_tail:
            self.flush()
        tail = b""
        if open_tail:
            tail = bytes(12) + bytes(self.chunk) + bytes(open_tail)
            self.chunk = bytearray()
        with open(path, "wb") as file:
            file.write(MAGIC + struct.pack("<II", version, flags) + b"".join(self.chunks) + tail)
        return path
