"""Writes the fuzz harness's seed corpus (tests/fuzz/corpus/): small traces that between
them use every record type, marker kind, API and level of docs/trace-format.md, so that
the fuzzer starts from inputs that reach deep into every command. Run it again after a
format change:  python3 tests/fuzz/make_corpus.py"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "report"))
from trace_writer import (ACTIVATION, ADDRESS_FREE, ADDRESS_RESERVE, ANNOTATION,  # noqa: E402
                          BACKWARD, CU_MEM_CREATE, CUDA_MALLOC_ASYNC, DEVICE_READ_API, FLIGHT,
                          FORWARD, FRAME, GRADIENT, MEMORY_UNMAP, OUT_OF_MEMORY, PEAK, WINDOW,
                          LOADED_OBJECT, NATIVE_STACK, NO_PHASE, OPTIMIZER, OPTIMIZER_STATE, PARAMETER,
                          PHASE_BEGIN, PHASE_END, PROCESS_EXIT, TRACE_CLOSED, TRACING_STARTED,
                          TRACING_STOPPED, TraceWriter, byte_string, varint, zigzag)


def native_stack(w, parent, ip_delta):
    w.chunk += bytes([NATIVE_STACK]) + varint(parent) + varint(zigzag(ip_delta))
    w.native_stacks += 1
    return w.native_stacks


def module(w, path, bias, segments):
    w.chunk += bytes([LOADED_OBJECT]) + varint(path) + varint(bias) + byte_string(b"\x12\x34") \
        + varint(len(segments)) + b"".join(varint(s) + varint(n) for s, n in segments)


def python_only():
    w = TraceWriter()
    f = w.string("model.py")
    g = w.string("forward")
    s = w.python_stack(0, w.frame(f, g, 10))
    s2 = w.python_stack(s, w.frame(f, w.string("layer"), 20))
    w.device(0, w.string("GPU 0"), 1 << 34).context(7, 0)
    w.marker(1, TRACING_STARTED)
    w.alloc(10, 0x7f0000000000, 4096, s)
    w.alloc(20, 0x7f0000100000, 1 << 20, s2)
    w.free(30, 0x7f0000000000)
    w.marker(40, ANNOTATION, w.string("step"))
    w.marker(50, TRACE_CLOSED)
    return w


def everything():
    w = TraceWriter(stacks=3).distributed(1, 4, 1, 2, 0, 0, "job-1")  # a rank of a job
    path = w.string("/usr/lib/libtorch_cuda.so")
    module(w, path, 0x7f1000000000, [(0x1000, 0x20000), (0x40000, 0x1000)])
    root = native_stack(w, 0, 0x7f1000001234)
    leaf = native_stack(w, root, -0x200)
    f = w.string("train.py")
    s = w.python_stack(0, w.frame(f, w.string("main"), 3))
    s = w.python_stack(s, w.frame(w.string("torch/nn/modules/linear.py"), w.string("forward"), 125))
    for device in (0, 1):
        w.device(device, w.string(f"GPU {device}"), 1 << 33)
    w.marker(1, TRACING_STARTED)
    w.marker(2, PHASE_BEGIN, w.string("forward"))
    time = 10
    for api in range(10):
        for level in range(2):
            w.context(100 + api, api % 2, stream=0x1000 * api, api=api, level=level)
            w.module_scope(w.string(f"model.layers.{api}"))
            w.alloc(time, 0x7f2000000000 + (api * 2 + level) * 0x100000, 512 * (api + 1), s, leaf)
            time += 10
    w.alloc(time, 0x7f2000000000, 64, s, root)  # over a live allocation: an implied free
    w.free(time + 1, 0x7f2000100000)
    w.free(time + 2, 0x7f2fff000000)  # not live
    w.failed_alloc(time + 3, 1 << 40, s)
    w.marker(time + 4, PHASE_END)
    w.flush()
    w.marker(time + 5, TRACING_STOPPED)
    w.alloc(time + 6, 0x7f3000000000, 1 << 21)
    w.marker(time + 7, TRACING_STARTED)
    w.alloc(time + 8, 0x7f3000200000, 1 << 21, s, leaf)
    w.marker(time + 9, PROCESS_EXIT)
    w.free(time + 10, 0x7f3000000000)
    return w


def training():
    # The training records (Note [Training records]): categories told before and after the
    # peak, at a live address and at one that is not, phases, two steps and an unfinished one.
    w = TraceWriter(stacks=1)
    s = w.python_stack(0, w.frame(w.string("train.py"), w.string("main"), 7))
    w.device(0, w.string("GPU 0"), 1 << 33).context(1, 0)
    w.marker(1, TRACING_STARTED)
    w.alloc(2, 0x7f0000000000, 4096)
    w.category(0x7f0000000000, PARAMETER)
    time = 10
    for step in (1, 2):
        w.training_phase(time, FORWARD)
        w.alloc(time + 1, 0x7f0000100000, 1024, s)
        w.category(0x7f0000100000, ACTIVATION)
        w.training_phase(time + 2, BACKWARD)
        w.alloc(time + 3, 0x7f0000200000, 4096, s)
        w.free(time + 4, 0x7f0000100000)
        w.training_phase(time + 5, OPTIMIZER)
        w.category(0x7f0000200000, GRADIENT)
        w.category(0x7f0000300000, OPTIMIZER_STATE)  # not live: ignored
        w.step_end(time + 6, step)
        w.training_phase(time + 6, NO_PHASE)
        w.free(time + 7, 0x7f0000200000)
        time += 10
    w.alloc(time, 0x7f0000400000, 100, s)
    w.marker(time + 1, TRACE_CLOSED)
    return w


def virtual_memory():
    # Physical memory by handle, its mappings into a reservation, device memory readings.
    w = TraceWriter(stacks=1)
    w.device(0, w.string("GPU 0"), 1 << 34).context(1, 0, api=CU_MEM_CREATE, level=1)
    w.marker(1, TRACING_STARTED)
    w.address_range(ADDRESS_RESERVE, 2, 0x7f0000000000, 8 << 21)
    w.alloc(3, 0x10000, 1 << 21)
    w.memory_map(4, 0x7f0000000000, 1 << 21, 0, 0x10000)
    w.alloc(5, 0x10010, 1 << 21)
    w.memory_map(6, 0x7f0000200000, 1 << 21, 0, 0x10010)
    w.device_memory(7, 0, (1 << 34) - (600 << 20), 1 << 34)
    w.address_range(MEMORY_UNMAP, 8, 0x7f0000000000, 2 << 21)
    w.free(9, 0x10000)
    w.free(10, 0x10010)
    w.address_range(ADDRESS_FREE, 11, 0x7f0000000000, 8 << 21)
    w.device_memory(12, 0, (1 << 34) - (500 << 20), 1 << 34)
    w.marker(13, TRACE_CLOSED)
    return w


def simulated():
    # A run on the simulated GPU (docs/trace-format.md, "The simulated device"): its record,
    # reads of device values on two lines (one untraced), and an out-of-memory on the card.
    w = TraceWriter(stacks=3).simulated_device("l4", "/opt/memtrace/profiles/l4.json", 1 << 30,
                                              memory_set_by_user=True, devices=2)
    f = w.string("generate.py")
    s = w.python_stack(0, w.frame(f, w.string("main"), 12))
    s2 = w.python_stack(s, w.frame(f, w.string("step"), 31))
    leaf = native_stack(w, 0, 0x7f1000001234)
    w.device(0, w.string("NVIDIA L4"), 1 << 30).context(1, 0, api=DEVICE_READ_API)
    w.device_read(1, 8)  # before tracing: untraced
    w.marker(2, TRACING_STARTED)
    w.context(1, 0, api=CUDA_MALLOC_ASYNC).module_scope(w.string("model.lm_head"))
    w.alloc(3, 0x7f0000000000, 900 << 20, s2, leaf)
    w.context(1, 0, api=DEVICE_READ_API)
    for time in range(4, 9):
        w.device_read(time, 4, s2, leaf)
    w.context(2, 1, api=DEVICE_READ_API).device_read(9, 1 << 20, s)  # the other device
    w.context(1, 0, api=CUDA_MALLOC_ASYNC)
    w.failed_alloc(10, 200 << 20, s2)
    w.free(11, 0x7f0000000000)
    w.marker(12, PROCESS_EXIT)
    return w


def compiled():
    # torch.compile's generated code (docs/trace-format.md, "Generated code"): two stretches of
    # a generated file standing for two lines of the model, allocations on lines inside them,
    # one outside any, and one on a line a stretch covers of a file told twice.
    w = TraceWriter()
    model = w.string("/home/user/model.py")
    forward = w.string("forward")
    generated = w.string("/tmp/torchinductor_user/ab/cabcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopq.py")
    call = w.string("call")
    outer = w.python_stack(0, w.frame(model, w.string("<module>"), 30))
    inner = w.python_stack(outer, w.frame(model, forward, 12))
    line_11 = w.python_stack(outer, w.frame(model, forward, 11))
    w.generated_code(generated, 140, 12, line_11)
    w.generated_code(generated, 152, 10, inner)
    w.generated_code(generated, 152, 10, inner)
    w.context(1, 0, api=CUDA_MALLOC_ASYNC)
    w.marker(1, TRACING_STARTED)
    w.alloc(2, 0x7f0000000000, 32 << 20, w.python_stack(outer, w.frame(generated, call, 147)))
    w.alloc(3, 0x7f0002000000, 8 << 20, w.python_stack(outer, w.frame(generated, call, 159)))
    w.alloc(4, 0x7f0003000000, 1 << 20, w.python_stack(outer, w.frame(generated, call, 175)))
    w.free(5, 0x7f0000000000)
    w.marker(6, PROCESS_EXIT)
    return w


def unknown_device():
    w = TraceWriter(stacks=0)
    w.context(1, -1)
    w.alloc(5, 0x1000, 100)
    w.alloc(6, 0x2000, 200)
    w.failed_alloc(7, 300)
    w.free(8, 0x1000)
    return w


def flight():
    """A flight recorder's file (version 4): the tables, the peak's and the failure's sections
    with their frees, the window's live set, frames, events and step peaks; on the simulated
    GPU, with a read of device values after a frame (whose context it sets again)."""
    w = TraceWriter().simulated_device("h100-80gb", "", 80 << 30)
    f = w.string("train.py")
    s = w.python_stack(0, w.frame(f, w.string("step"), 7))
    block = w.string("model.block0")
    w.device(0, w.string("GPU 0"), 1 << 34)
    w.step_peak(1, 0, 900, 400, 3 << 20, FORWARD, block)
    w.step_peak(2, 900, 1000, 950, 5 << 20, BACKWARD, 0)
    w.section(500, PEAK).context(7, 0).module_scope(block).marker(500, TRACING_STARTED)
    w.alloc(500, 0x7f0000000000, 2 << 20, s).category(0x7f0000000000, ACTIVATION)
    w.alloc(500, 0x7f0000400000, 3 << 20, s)
    w.free(500, 0x7f0000000000).free(500, 0x7f0000400000)
    w.section(600, OUT_OF_MEMORY).context(7, 0).alloc(600, 0x7f0000000000, 1 << 20, s)
    w.failed_alloc(600, 1 << 40, s).free(600, 0x7f0000000000)
    w.section(3000, WINDOW).context(7, 0).alloc(3000, 0x7f0000800000, 1 << 20, s)
    w.flush()
    w.section(3000, FRAME, 1, 0, 1000, (900, 460, 440, 1, 5 << 30, 2), [(0, 5 << 30, 5 << 20, 500)])
    w.context(7, 0).alloc(3100, 0x7f0000900000, 4096, s).free(3200, 0x7f0000900000)
    w.step_peak(3, 2000, 3300, 3100, (1 << 20) + 4096, NO_PHASE, 0)
    w.section(3400, FRAME, 1, 0, 1000, (903, 461, 441, 1, 5 << 30, 2))
    w.context(7, 0).alloc(3500, 0x7f0000a00000, 8192, s)
    w.context(7, 0, api=DEVICE_READ_API).device_read(3600, 8, s)
    return w


def event_tables():
    """Version 7's events that name entries of the event tables (Note [Event tables])."""
    w = TraceWriter()
    s = w.python_stack(0, w.frame(w.string("model.py"), w.string("forward"), 10))
    w.device(0, w.string("GPU 0"), 1 << 34).context(7, 0).marker(1, TRACING_STARTED)
    w.alloc(10, 0x7f0000000000, 4096, s).alloc_of_size_entry(20, 0x7f0000001000,
                                                              w.size_slot(4096) + 1, s)
    w.alloc(30, 0x7f0000002000, 100, s).free_of_recent_allocation(40, 0x7f0000000000, 3)
    w.flush()
    w.free_of_recent_allocation(50, 0x7f0000002000, 1).free(60, 0x7f0000001000)
    w.marker(70, TRACE_CLOSED)
    return w


def microseconds(compressed=False):
    """Version 8's time unit (Note [Times in microseconds]): times in microseconds, equal
    times beside each other, a training step and a device memory reading among the events.
    `compressed`: both chunks compressed (version 9, Note [Compressed chunks])."""
    w = TraceWriter(time_unit_ns=1000)
    s = w.python_stack(0, w.frame(w.string("train.py"), w.string("step"), 12))
    w.device(0, w.string("GPU 0"), 1 << 34).context(7, 0).marker(0, TRACING_STARTED)
    w.training_phase(1000, FORWARD)
    w.alloc(1000, 0x7f0000000000, 512, s).alloc_of_size_entry(1000, 0x7f0000000200,
                                                              w.size_slot(512) + 1, s)
    w.device_memory(3000, 0, (1 << 34) - (2 << 20), 1 << 34)
    w.flush(compressed)
    w.free_of_recent_allocation(250000, 0x7f0000000200, 1).step_end(250000, 1)
    w.free(10**15, 0x7f0000000000)  # 11.6 days after the start
    w.marker(10**15, TRACE_CLOSED)
    return w.flush(compressed)


def short_records():
    """Version 10's short forms (Note [Records beside the events, shorter]): categories and owners
    naming recent allocations by their place, over a chunk boundary and past a free, module paths
    that begin as the string before them, a segment near the events' address base."""
    w = TraceWriter(stacks=1, time_unit_ns=1000)
    s = w.python_stack(0, w.frame(w.string("train.py"), w.string("main"), 7))
    w.device(0, w.string("GPU 0"), 1 << 33).context(1, 0).marker(0, TRACING_STARTED)
    model = w.string("model.transformer.h.0")
    attention = w.string_after(21, ".attn.c_attn")
    for i in range(12):
        w.alloc(1000 * (i + 1), 0x7f0000000000 + i * 4096, 4096, s)
    w.recent_category(12, PARAMETER).recent_owner_module(12, model)
    w.flush()
    w.free(13000, 0x7f0000000000 + 11 * 4096)
    w.recent_category(1, ACTIVATION)  # the newest allocation, freed: ignored
    w.recent_owner_module(10, attention).recent_category(2, GRADIENT)
    w.segment_near(13000, 0, 0, 0x7f0000200000, 2 << 20).alloc(13000, 0x7f0000200000, 512, s)
    w.marker(14000, TRACE_CLOSED)
    return w


def compact_events():
    """Version 11's events (Note [Events in fewer bytes]): time deltas in the type byte and
    after it, addresses 256-aligned and not, frees by a table entry, by their place in the ring
    (over a chunk boundary) and by address, stacks written and the previous ones."""
    w = TraceWriter(stacks=1, time_unit_ns=1000)
    s = w.python_stack(0, w.frame(w.string("train.py"), w.string("step"), 3))
    w.device(0, w.string("GPU 0"), 1 << 34).context(7, 0).marker(0, TRACING_STARTED)
    for i in range(12):
        w.compact_event(False, 1000 * i, 0x7f0000000000 + i * 4096, 4096 if i % 3 else 512,
                        python=s if i == 0 else None)
    w.compact_event(False, 12000, 0x7f0000100010, 100)  # not 256-aligned
    w.compact_event(False, 12000, 0x7f0000200000, 0, entry=w.size_slot(4096) + 1)
    w.flush()
    w.compact_event(True, 12000, 0x7f0000000000, place=14)
    w.compact_event(True, 14000, 0x7f0000200000, entry=1)
    w.compact_event(True, 400000, 0x7f0000100010)
    w.compact_event(True, 400001000, 0x7f0000001000, python=0)
    w.marker(400001000, TRACE_CLOSED)
    return w


def block_events():
    """Version 12's events (Note [Allocations named by the blocks before them]): allocations at a
    delta, at a recent allocation's end, at a freed block with its size and at a freed address
    with another, sizes in 512-byte units and in bytes, Python stacks as deltas; frees by a table
    entry, by their place and by address; a string that begins as an earlier one (Note [Strings
    that begin as an earlier one])."""
    w = TraceWriter(stacks=1, time_unit_ns=1000)
    path = w.string("/usr/lib/python3/dist-packages/torch/nn/modules/linear.py")
    forward = w.string("forward")
    module = w.string_from(2, 48, "module.py")
    outer = w.python_stack(0, w.frame(module, forward, 1))
    inner = w.python_stack(outer, w.frame(path, forward, 125))
    w.device(0, w.string("GPU 0"), 1 << 34).context(7, 0).marker(0, TRACING_STARTED)
    base = 0x7f0000000000
    for i in range(6):
        w.compact_event(False, 1000 * i, base + i * 4096, 4096 if i % 2 else 100, blocks=True,
                        python=(inner if i % 2 else outer) if i < 3 else None)
    # At the end of the newest (4096 bytes at base + 5 * 4096), then of the 3rd newest (100 bytes
    # at base + 4 * 4096, rounded to 512).
    w.compact_event(False, 6000, base + 6 * 4096, 1024, blocks=True, end=1)
    w.compact_event(False, 6000, base + 4 * 4096 + 512, 1024, blocks=True, end=3)
    w.compact_event(False, 6000, base + (1 << 20) + 16, 300, blocks=True)  # not 256-aligned
    w.flush()
    w.compact_event(True, 7000, base, place=9)  # the 9th most recent allocation: base
    w.compact_event(True, 7000, base + 3 * 4096, entry=6)  # the 6th most recent: i = 3
    w.compact_event(True, 9000, base + (1 << 20) + 16)  # by its address: its size not known
    w.compact_event(False, 9000, base + 3 * 4096, blocks=True, freed=2, sized=True)
    w.compact_event(False, 10000, base, 100 * 512, blocks=True, freed=3, python=inner)
    w.marker(10000, TRACE_CLOSED)
    return w


def main():
    corpus = HERE / "corpus"
    corpus.mkdir(exist_ok=True)
    for name, make in [("python_only", python_only), ("everything", everything),
                       ("unknown_device", unknown_device), ("training", training),
                       ("virtual_memory", virtual_memory), ("simulated", simulated),
                       ("compiled", compiled)]:
        data = make().write(corpus / f"{name}.bin").read_bytes()
        # The same trace cut inside its last chunk: read up to the last whole one.
        (corpus / f"{name}_cut.bin").write_bytes(data[:len(data) - 5])
    (corpus / "header_only.bin").write_bytes(TraceWriter().write(corpus / "tmp").read_bytes()[:16])
    # Version 4: a flight recorder's file, whole and ending in an open chunk (a killed writer's).
    flight().write(corpus / "flight.bin", flags=FLIGHT)
    flight().write(corpus / "flight_open.bin", flags=FLIGHT, open_tail=64)
    # Version 7: events naming entries of the event tables, whole and cut in its last chunk.
    data = event_tables().write(corpus / "event_tables.bin", version=7).read_bytes()
    (corpus / "event_tables_cut.bin").write_bytes(data[:len(data) - 5])
    # Version 8: times in microseconds, whole and cut in its last chunk.
    data = microseconds().write(corpus / "microseconds.bin", version=8).read_bytes()
    (corpus / "microseconds_cut.bin").write_bytes(data[:len(data) - 5])
    # Version 9: the same in compressed chunks, whole and cut in its last chunk.
    data = microseconds(compressed=True).write(corpus / "compressed.bin", version=9).read_bytes()
    (corpus / "compressed_cut.bin").write_bytes(data[:len(data) - 5])
    # Version 10: the short records beside the events, whole and cut in its last chunk.
    data = short_records().write(corpus / "short_records.bin", version=10).read_bytes()
    (corpus / "short_records_cut.bin").write_bytes(data[:len(data) - 5])
    # Version 11: events in fewer bytes, whole and cut in its last chunk.
    data = compact_events().write(corpus / "compact_events.bin", version=11).read_bytes()
    (corpus / "compact_events_cut.bin").write_bytes(data[:len(data) - 5])
    # Version 12: allocations named by the blocks before them, whole and cut in its last chunk.
    data = block_events().write(corpus / "block_events.bin", version=12).read_bytes()
    (corpus / "block_events_cut.bin").write_bytes(data[:len(data) - 5])
    (corpus / "tmp").unlink()


if __name__ == "__main__":
    main()
