// The memtrace trace format: one header shared by the recorder (writer) and the reader.
// docs/trace-format.md is the prose version of this file; keep them in step.
//
// A trace is a fixed 16-byte file header followed by framed chunks:
//
//   FileHeader   magic "MEMTRACE" (8) | version u32 LE | flags u32 LE (FileFlags)
//   Chunk        payload_size u32 LE | payload_crc u32 LE | header_crc u32 LE | payload
//
// From version 9 a whole chunk may be compressed: the top bit of payload_size set (Note
// [Compressed chunks]); payload_size's other bits and payload_crc then count the stored bytes.
// header_crc is the CRC-32C of the 8 bytes before it, so a corrupted size is told apart
// from a file cut short (a process killed while writing): the reader accepts a file cut
// at any byte, up to its last whole chunk, and refuses one whose bytes were changed.
// The last chunk may be *open* (version 4): a payload_size of 0 (its checksums may be set
// or zero) says that the writer was still adding records to it, straight into the file; it
// runs to the end of the file and is read up to its first zero type byte (Note [Records
// reach the page cache as they are written], tracer/recorder/trace_file.h).
//
// A payload is a sequence of records. Each record starts with one type byte; the fields
// after it are varints (LEB128), zigzag varints for signed deltas, or byte strings
// (varint length + bytes). Records never span chunks. Ids in the tables (strings,
// frames, stacks, loaded objects) are implicit: the n-th record of a table has id n, from 1;
// id 0 means "none". Delta bases (time, address, previous stacks) carry over chunks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memtrace::format {

inline constexpr char kMagic[8] = {'M', 'E', 'M', 'T', 'R', 'A', 'C', 'E'};
// The version written. Each version only added to the one before it, so a file of any version
// from kOldestVersion on reads as it always did:
//   1  records 0x01 to 0x0e (the training records 0x0c to 0x0e were added without a new
//      version: Note [Training records]);
//   2  records 0x0f to 0x14 and APIs 7 and 8 (Note [Virtual memory management], Note [Device
//      memory readings], Note [A job's ranks]);
//   3  records 0x15 and 0x16 and API 9 (Note [The simulated device]);
//   4  the open chunk (above), the file header's flags (FileFlags::kFlight) and records 0x17
//      and 0x18 (Note [The flight recorder's file]), and record 0x19 (Note [Generated code]);
//   5  record 0x1a and API 10 (Note [PyTorch's own allocator]);
//   6  record 0x1b (Note [Weights and their modules]), record 0x1c and API 11 (Note [Sizes in
//      the trace]), record 0x1d (Note [Values where they decide the path] in
//      python/mem_tracer/simulated_gpu/values.py);
//   7  a memory event's low three bits (zero before) name an entry of the event tables: an
//      allocation's size or a free's address, then not written (Note [Event bit layout]);
//   8  kProcessInfo's last field, the time unit: every time delta counts units of it (1 ns
//      before; Note [Times in microseconds]);
//   9  compressed chunks (Note [Compressed chunks]): `memtrace-report compact` writes them; the
//      recorder writes none, its files read as version 8's did;
//  10  records 0x1e to 0x21, shorter forms of kCategory, kOwnerModule, kString and kSegment, and
//      the event tables' ring of EventTables::kRing allocations (Note [Records beside the events,
//      shorter]);
//  11  a memory event's bits 5-3 and fields change meaning (Note [Events in fewer bytes]): a small
//      time delta in the type byte, one bit for both stacks, a free naming any allocation of the
//      ring; `memtrace-report compact` keeps a version 8-10 file's version (10).
//  12  an allocation's address field may name a recent free or a recent allocation's end, its
//      size field counts 512-byte units, its stack field is a delta (Note [Allocations named by
//      the blocks before them]); record 0x22 (Note [Strings that begin as an earlier one]);
//      `memtrace-report compact` keeps the version of a version 11 or 12 file.
// A reader refuses a version past kVersion at the file header, naming both.
inline constexpr uint32_t kVersion = 12;
inline constexpr uint32_t kOldestVersion = 1;
inline constexpr size_t kFileHeaderSize = 16;
// The file header's flags.
struct FileFlags {
  // A flight recorder's file (Note [The flight recorder's file]): events were dropped, and
  // kSection records say what stands in for them.
  static constexpr uint32_t kFlight = 1;
};
inline constexpr uint32_t kKnownFileFlags = FileFlags::kFlight;
// The first version with the open chunk and the file header's flags: an older file's flags
// are 0 and its chunks never empty, as they always were.
inline constexpr uint32_t kOpenChunkVersion = 4;
inline constexpr size_t kChunkHeaderSize = 12;
// The writer flushes a chunk at 1 MiB; the reader refuses sizes past this bound as
// corrupt instead of allocating whatever a damaged size field says.
inline constexpr uint32_t kMaxChunkPayload = 16u << 20;

// Note [Compressed chunks]
// Version 9: a whole chunk (never the open one) may hold its records compressed. Its header's
// payload_size has kCompressedChunk set, and its other bits, like payload_crc, count the bytes
// stored: the records' size (u32 LE, 1 to kMaxChunkPayload), then the records as one zlib
// stream (RFC 1950, deflate). The reader inflates them and reads them as any chunk's; a stream
// that does not inflate to exactly that size is refused as corrupt. Nothing else changes:
// records never span chunks, and the decoding bases carry over compressed and plain chunks
// alike. The recorder does not compress: its records are stored straight into the mapped file
// as they are made (Note [Records reach the page cache as they are written]), and a closed chunk
// rewritten smaller in place would leave a moment in which the file does not read. So a trace is
// compressed once it is closed, by `memtrace-report compact` (tracer/reader/compact.h), which
// writes a new file: measured on GPT-2's forwards and steps and on 8 threads at once, 4.66-5.78
// bytes an event as written become 2.49-2.79 (docs/performance.md, Version 9: compressed chunks).
inline constexpr uint32_t kCompressedChunkVersion = 9;
inline constexpr uint32_t kCompressedChunk = 0x80000000u;
// Strings longer than this are cut (a command line can be long; a record must fit a chunk).
inline constexpr size_t kMaxStringBytes = 64u << 10;
// Device indices a trace may name: -1 (unknown) and 0 to kMaxDevices - 1. The reader refuses
// any other, so that no command sizes anything by an index a damaged or crafted file chose
// (a device list, a per-device loop) and work stays proportional to the records read.
// The recorder describes devices 0 to kMaxDevices - 1 (a kDevice record each) and keeps a
// peak for each; an event on a device past them is written with device -1 and counts only in
// the total.
inline constexpr int kMaxDevices = 64;

// The type byte. Values below 0x80 are table and control records; a set top bit is a
// memory event with its flags in the low bits (EventBits).
enum class RecordType : uint8_t {
  // Once, first record of the first chunk. Fields: pid, parent pid, start time (Unix
  // epoch ns), start time (CLOCK_MONOTONIC ns; the base of every event time), command
  // line (string, arguments separated by NUL), executable path (string), host name
  // (string), tracer version (string), stack mode (StackMode byte), Python depth limit,
  // native depth limit, free events carry stacks (0/1), and from version 8 the time unit (ns
  // a unit of every "time delta" field counts; 1 to kMaxTimeUnitNs; Note [Times in
  // microseconds]).
  kProcessInfo = 0x01,
  // A string. Fields: bytes (varint length + UTF-8).
  kString = 0x02,
  // A Python frame, unique by content. Fields: file string id, function string id, line.
  kPythonFrame = 0x03,
  // A node of the Python stack trie: the stack `parent` with `frame` called from it.
  // Fields: parent stack id (0 = root: frame is the outermost), frame id.
  kPythonStack = 0x04,
  // A node of the native stack trie. Fields: parent stack id (0 = root: outermost),
  // instruction pointer as a zigzag delta from the parent's (from 0 at the root).
  kNativeStack = 0x05,
  // An ELF object the process has loaded (the executable, a shared library, the vDSO),
  // which native instruction pointers resolve against. Fields: path string id, load bias,
  // build id (byte string, may be empty), segment count, then per executable PT_LOAD
  // segment: start address, size. ("Module" in this format always means an nn.Module.)
  kLoadedObject = 0x06,
  // A device seen by the trace. Fields: device index (zigzag), name string id, total
  // memory bytes (0 if unknown).
  kDevice = 0x07,
  // Sets the context of the events after it, until the next kContext. Fields: thread id,
  // device (zigzag; -1 unknown), stream (the cudaStream_t value), Api byte, Level byte.
  kContext = 0x08,
  // A point in time. Fields: time delta, MarkerKind byte, name string id (0 = none).
  kMarker = 0x09,
  // An allocation the CUDA call refused (out of memory). Fields: time delta, requested
  // size, Python stack id, native stack id. Device and stream come from the context.
  kFailedAlloc = 0x0a,
  // The nn.Module running on the context's thread, for that thread's events after it,
  // until its next kModuleScope. Fields: module path string id (0 = none).
  kModuleScope = 0x0b,
  // What an allocation holds in training (Note [Training records]). Fields: the address the
  // live allocation starts at (varint, absolute), Category byte. No time: it says what the
  // allocation is for its whole life, and may come any time while it is live.
  kCategory = 0x0c,
  // The training phase of the whole process from now on. Fields: time delta, TrainingPhase
  // byte.
  kTrainingPhase = 0x0d,
  // A training step ended (the optimizer's step() returned). Fields: time delta, the step's
  // number (from 1).
  kStepEnd = 0x0e,
  // Physical memory mapped at a range of virtual addresses (cuMemMap; Note [Virtual memory
  // management]). Fields: time delta, virtual address, size, offset into the physical
  // allocation, the physical allocation's handle (the address of its memory event).
  kMemoryMap = 0x0f,
  // A range of virtual addresses unmapped (cuMemUnmap). Fields: time delta, virtual address,
  // size.
  kMemoryUnmap = 0x10,
  // A range of virtual addresses reserved (cuMemAddressReserve): address space, no memory.
  // Fields: time delta, virtual address, size.
  kAddressReserve = 0x11,
  // A reserved range given back (cuMemAddressFree). Fields: time delta, virtual address, size.
  kAddressFree = 0x12,
  // The process is one rank of a torch.distributed job (Note [A job's ranks]). Once, right
  // after kProcessInfo, only in a rank's trace. Fields: rank, world size, local rank, local
  // world size, group rank (the node's), restart count (each zigzag; -1 unknown), job id
  // (string: TORCHELASTIC_RUN_ID, may be empty).
  kDistributed = 0x13,
  // The device's memory as its driver counts it (cuMemGetInfo; Note [Device memory
  // readings]). Fields: time delta, device (zigzag; 0 to kMaxDevices - 1), free bytes, total
  // bytes.
  kDeviceMemory = 0x14,
  // The process ran on memtrace's simulated GPU (Note [The simulated device]). Once, right
  // after kProcessInfo (and kDistributed), when the recorder knew it when the file opened;
  // otherwise before the first event after it learned it. Fields: profile name (string),
  // profile file (string), each device's memory in bytes, whether the user set that memory
  // (byte 0/1: MEMTRACE_GPU_MEMORY), device count (1 to kMaxDevices: MEMTRACE_GPU_COUNT).
  kSimulatedDevice = 0x15,
  // A copy from device memory to the host on the simulated device: a read of device values,
  // which the simulated device answers with zeros (Note [The simulated device]). Fields: time
  // delta, bytes, Python stack id, native stack id. Thread and device come from the context
  // (Api::kDeviceRead).
  kDeviceRead = 0x16,
  // A flight recorder's section (Note [The flight recorder's file]): every decoding base
  // starts afresh here (time, address, previous stacks, the context, each thread's module
  // scope). Fields: time (ns since the trace's start, absolute), SectionKind byte, tracing
  // (0/1: the state of the events after a kFrame), TrainingPhase byte, the events the window
  // keeps at least (N), then the run's totals up to here: memory events, allocations, frees,
  // failed allocations, bytes allocated, untraced allocations, and a count of devices, each
  // with: device (zigzag), bytes allocated, peak bytes, peak time (ns since the start).
  kSection = 0x17,
  // A training step, as the flight recorder counts it (it keeps no step's events). Fields,
  // each relative to the previous kStepPeak of the file (to 0 for the first), so that a day of
  // steps stays a few MiB: step number (zigzag delta), begin time (ns after the previous step's
  // end), duration (ns), peak time (ns after the begin), peak bytes, TrainingPhase byte at the
  // peak, nn.Module string id at the peak.
  kStepPeak = 0x18,
  // Lines of generated code (torch.compile's inductor wrapper) stand for the user's source
  // (Note [Generated code]). Fields: the generated file (string id), its first line, how many
  // lines from it, the source stack (Python stack id, not 0: the stack its FX node was traced
  // at, whose innermost frame is where the node's op is in the user's program).
  kGeneratedCode = 0x19,
  // A segment of PyTorch's caching allocator changed (Note [PyTorch's own allocator]): memory it
  // reserved from the device, or gave back. Fields: time delta, SegmentAction byte, device
  // (zigzag; 0 to kMaxDevices - 1), address, size, the private pool it belongs to (two varints:
  // a CUDA graph's pool id, a torch.cuda.MemPool's id; both 0 for the default pools). No stacks:
  // the tensor event that needed the segment follows it, with its own.
  kSegment = 0x1a,
  // The nn.Module whose parameter or buffer a live allocation holds (Note [Weights and their
  // modules]). Fields: the address the live allocation starts at (varint, absolute), the
  // module's path (string id, not 0). No time, as kCategory: it holds for the allocation's
  // whole life, and may come any time while it is live.
  kOwnerModule = 0x1b,
  // A size a library of the simulated GPU answered without knowing it (Note [Sizes in the
  // trace]). Fields: time delta, the address of the buffer the program handed the library
  // (varint, absolute; 0: told at the question), the bytes answered, the upper figure plus one
  // (0: no bound), Certainty byte, the question (string id: a JSON object with "library",
  // "call" and "shapes"), Python stack id, native stack id. Thread and device come from the
  // context (Api::kSimulatedSize).
  kSimulatedSize = 0x1c,
  // A value the simulated run did not know (no kernel computed it), where it decided the
  // program's path, and what the run took it to be (Note [Values where they decide the path] in
  // python/mem_tracer/simulated_gpu/values.py): a read back as zero, or as the worst case memtrace
  // knows for its line; a mask's count taken as everything. Fields: time delta, what was assumed
  // (string id), Python stack id, native stack id. Thread and device come from the context
  // (Api::kDeviceRead).
  kAssumedValue = 0x1d,
  // Version 10 (Note [Records beside the events, shorter]): a kCategory naming one of the last
  // allocations. Fields: one varint, (k << 3) | Category, where k (1 to EventTables::kRing) names
  // the
  // k-th most recent allocation of the event tables' ring; the address is its address.
  kRecentCategory = 0x1e,
  // A kOwnerModule naming one of the last allocations. Fields: k as kRecentCategory's (1 to
  // EventTables::kRing), the module's path (string id, not 0).
  kRecentOwnerModule = 0x1f,
  // A kString that begins as the string before it (the one whose id is this one's less 1).
  // Fields: how many bytes of that string it begins with (1 to kMaxSharedPrefix, and at most
  // that string's length), then the rest (varint length + bytes).
  kStringAfter = 0x20,
  // A kSegment whose address is a delta from the events' address base (Note [Event bit layout]),
  // which then moves to it: the tensor event that needed the segment, at its start, follows it.
  // Fields: kSegment's, the address as one varint: zigzag(delta / 256) * 2 + 1 when the delta's
  // low byte is zero, zigzag(delta) * 2 otherwise.
  kSegmentNear = 0x21,
  // Version 12 (Note [Strings that begin as an earlier one]): a kString that begins as an earlier
  // string. Fields: how far back that string is (its id is this one's less this, 1 or more), how
  // many bytes of it this one begins with (1 to kMaxSharedPrefix, and at most its length), then
  // the rest (varint length + bytes).
  kStringFrom = 0x22,
};
// The last record type this version knows.
inline constexpr RecordType kLastRecordType = RecordType::kStringFrom;

// Note [Weights and their modules]
// A model's parameters and buffers are allocated where the program moves it to the device
// (`model.cuda()`), outside any forward and often before tracing starts: no module scope
// names them, and a trace that began after them has them as untraced. Yet the package knows
// whose they are (each module's own named_parameters() and named_buffers()), and a module
// table that put a model's weights under `<no module>` would say less than it knows. So the
// package tells, by a kOwnerModule record, the module of each parameter's and buffer's
// allocation: when tracing starts with model=, and when a module first runs with them on the
// device while tracing (mem_tracer/_modules.py); and of each parameter's gradient and optimizer
// state, at each optimizer step (Note [Everything a parameter has is its module's] in
// python/mem_tracer/training.py). As a kCategory record, it names a live allocation by its
// start address, holds for that allocation's whole life (a reader applies it backwards, to the
// allocation's event), replaces the module its event had, and is ignored for an address that
// starts no live allocation (a tensor inside a segment). The
// report then puts the weights under their modules wherever it groups by module, and names
// those allocated before tracing `weights, allocated before tracing` where it groups by line
// (Note [What was live before tracing] in tracer/report/analysis.h).

// How sure a kSimulatedSize answer is (simulator/core/sizes.h's Certainty, the same numbers).
enum class Certainty : uint8_t {
  kExact = 0,      // documented or measured (not recorded by the simulated libraries today)
  kBounded = 1,    // between documented bounds
  kEstimated = 2,  // memtrace's estimate; its upper figure is an estimate too, or none
  kCount
};

// Note [Sizes in the trace]
// The simulated GPU's libraries answer some sizes without knowing them (Note [Sizes nobody
// measured] in simulator/core/sizes.cpp): a cuFFT plan's work area, a cuSOLVER routine's
// buffer, cuDNN's RNN spaces, an unmeasured cuDNN plan's workspace. The program then allocates
// that much (or nothing, for an answer of 0), so the peak holds a figure nobody measured. The
// recorder writes each answer it is told (the simulated core's size observer, registered by the
// shim) as a kSimulatedSize record with the stacks of the thread that asked, so the report
// lists them by line, and the replay links each to the allocation that holds it
// (reader::LiveReplay): the live allocation at the record's address when the library was handed
// the buffer (cuFFT's cufftSetWorkArea), else the next allocation of exactly that many bytes on
// the asking thread, within the next kSizeLinkAllocations of its allocations (PyTorch allocates
// the buffer right after asking). An answer no allocation takes (0 bytes: a workspace cuDNN's
// plan was told it does not need) holds nothing at any point; it could have held up to its upper
// figure while it was in use. The report's figures at the peak: the bytes of linked allocations
// live there, and how much higher they could be (the sum of their upper figures less their
// sizes; "no bound" when one has none).
inline constexpr int kSizeLinkAllocations = 8;

// What a kSegment record says happened (PyTorch's TraceEntry actions of the same names).
enum class SegmentAction : uint8_t {
  kAlloc = 0,  // a segment was allocated (cudaMalloc): reserved grows by its size
  kFree = 1,   // a segment was given back (cudaFree: empty_cache, an OOM's retry)
  kMap = 2,    // expandable segments: pages mapped into a segment (cuMemMap): reserved grows
  kUnmap = 3,  // expandable segments: pages unmapped from a segment: reserved shrinks
  kCount
};

// Note [PyTorch's own allocator]
// With PyTorch's caching allocator in front of CUDA, cudaMalloc sees segments, each holding many
// tensors, and the allocator's own counters (memory_stats()) are the figures users know. So
// memtrace records inside it, leaving it exactly as the program configured it: a bridge built
// against the torch release that runs (allocator/torch_bridge/) attaches a trace tracker
// (c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker), which PyTorch calls on the
// allocating thread, with the device's allocator lock held, for every action of its allocator,
// whether or not its own history recording is on. Each tensor is then an ordinary event at
// Level::kTensor with Api::kTorchAllocator, its size the size the program asked for (PyTorch's
// requested_bytes; its allocated_bytes rounds each block up), allocated when PyTorch's ALLOC
// says and freed when FREE_COMPLETED does (a free delayed by record_stream is freed when the
// stream's work is done, as PyTorch counts it). Each segment action is a kSegment record: what
// PyTorch counts as reserved_bytes. Segments are not memory events, because every tensor lies
// inside one (a tensor and its segment can start at the same address): a trace's events are one
// level, its segments beside them. The CUDA hooks leave alone what PyTorch's allocator calls
// once the tracker is attached (cudaMalloc, cuMemCreate and kin from libc10_cuda.so), and record
// everything else (NCCL's buffers, a library's own cudaMalloc) as before; where no bridge can
// attach (a torch release none was built for, a CPU build, the cudaMallocAsync backend the
// program chose), PyTorch's cudaMalloc is recorded as a segment-level event, as it always was.

// What a kSection stands for (Note [The flight recorder's file]).
enum class SectionKind : uint8_t {
  kFrame = 0,        // nothing dropped: the events after it follow the ones before
  kPeak = 1,         // the allocations after it are the live set at the run's peak
  kOutOfMemory = 2,  // ... the live set at the first failed allocation, then that failure
  kWindow = 3,       // ... the live set where the kept events begin
  kCount
};

// Note [The flight recorder's file]
// MEMTRACE_MODE=flight keeps a file the size of what is live, however long the run: it holds
// the live set at the highest peak so far, the live set at the first failed allocation, the
// last N events or more (MEMTRACE_FLIGHT_EVENTS), every training step's peak (kStepPeak) and
// the tables (strings, frames, stacks, loaded objects), and it reads, at any moment, as an
// ordinary trace: the events of a flight file replay like any other's.
//   file = header (kFlight) | tables | [kSection kPeak | its allocations | their frees]
//          [kSection kOutOfMemory | its allocations | the failed allocation | their frees]
//          | kSection kWindow | the live set then | kSection kFrame | events ...
//          | kSection kFrame | events ...
// The peak and out-of-memory sections come first, in the order of their times, and only
// when their events were dropped (a peak among the kept events is found by replaying them).
// Each is freed before the next, so that a replay's live set is always the process's at the
// point it stands for; the first kFrame after a kWindow carries the run's totals, which stand
// in for what a replay counted before it. The recorder starts a kFrame every N events or so,
// and when the file has grown to twice what it held after the last compaction it writes the
// file again (a new file renamed over the old: a reader, or a SIGKILL, sees one or the other,
// whole): the tables, the sections, then the events from the frame before the last one on,
// copied as they are (a kFrame makes them independent of what precedes them). So the file
// keeps between N and a few N events and is O(tables + live set + N) bytes
// (tracer/recorder/flight.cpp).

// The version that introduced a record type (and, below, an API): a reader refuses one its
// file's version does not have, so that a file is read by the rules of the version it says
// (and a damaged version field is caught, though no checksum covers the file header). The
// same holds for version 4's open chunk and file flags, which the reader checks where it
// meets them.
inline constexpr uint32_t firstVersion(RecordType type) {
  uint8_t value = static_cast<uint8_t>(type);
  return value >= 0x22   ? 12
         : value >= 0x1e ? 10
         : value >= 0x1b ? 6
         : value >= 0x1a ? 5
         : value >= 0x17 ? 4
         : value >= 0x15 ? 3
         : value >= 0x0f ? 2
                         : 1;
}
// Note [Generated code]
// torch.compile runs a model as code inductor generated (a file named c<hash>.py in its cache
// folder: `buf0 = empty_strided_cuda(...)` in its call()), so every allocation of a compiled
// graph has that file's line as its innermost frame, and a line nobody wrote or can change.
// PyTorch keeps where each op came from: each FX node's stack trace (node.meta["stack_trace"],
// the user's frames when dynamo traced it), and inductor tells which node's code each stretch of
// the generated file is (the line map it hands PyCodeCache: the stretch from a line up to the
// next entry's is the code of one scheduler node, named by its last origin node). The Python
// package (mem_tracer/_compiled.py) passes each stretch to the recorder (memtrace_generated_code),
// which keeps them for the process and writes a kGeneratedCode record for each into every file
// (when it opens, and when told while one is open): so the report names an allocation made by a
// line of such a stretch by the source stack's frame its policy picks (Note [The line the user
// acts on] in tracer/report/locations.h), and keeps the generated frame in full stacks. A stretch
// covers every line of its node's code: the allocation of its output buffer, cuBLAS's workspace
// at the first matmul, triton's autotuning at a kernel's first run. The forward's and the
// backward's graphs both: autograd copies each forward node's stack trace to its backward nodes.
// The file is the generated file as Python's frames name it (its co_filename).

// Note [A job's ranks]
// torchrun (torch.distributed's launcher) starts one process per rank and tells each what it
// is in its environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the
// node's rank), TORCHELASTIC_RESTART_COUNT (how many times the agent restarted the workers)
// and TORCHELASTIC_RUN_ID (the job id). The recorder reads them when it opens the file, so
// that a rank's trace says which rank it is (kDistributed) and MEMTRACE_OUTPUT can name the
// file by them (%r, %w, %l, %g, %a, %j): one folder holds a job's traces, and a restarted
// rank writes a new file (%a) instead of overwriting the one its failed attempt left. The
// host is ProcessInfo's. A process with none of these variables writes no kDistributed.

// Note [Virtual memory management]
// CUDA's virtual memory management splits an allocation in two: physical memory
// (cuMemCreate, released by cuMemRelease) and its mappings at virtual addresses (cuMemMap,
// cuMemUnmap, into ranges cuMemAddressReserve reserved). PyTorch's expandable segments and
// NCCL (NCCL_CUMEM_ENABLE) allocate this way. What a device spends is the physical memory,
// so each physical allocation on a device is one memory event, Api::kCuMemCreate at
// Level::kSegment (an allocator hands it out in pieces):
//   - its allocation when cuMemCreate returned it; its "address" is the allocation handle
//     (CUmemGenericAllocationHandle), not a device address, so that it is found again by
//     the calls that name the handle;
//   - its free when the driver frees the memory: once the handle has been released as often
//     as it was made or retained (cuMemRelease, cuMemRetainAllocationHandle) and no mapping
//     of it is left (cuMemUnmap), whichever comes last. The free is written before the call
//     that ends it, like every free.
// kMemoryMap and kMemoryUnmap say where physical memory is visible; they change no live
// bytes. Under expandable segments every page is created, mapped, unmapped and released
// together, so the mapped bytes are the physical bytes; they differ when a handle is mapped
// twice (counted once here) or made and not yet mapped (counted here). Physical memory made
// on the host (a CU_MEM_LOCATION_TYPE_HOST* location) is not device memory: not recorded.

// Note [The simulated device]
// memtrace's simulated GPU (simulator/, docs/simulated-gpu.md) runs PyTorch's CUDA build on a
// card that exists only as address space: allocations are PyTorch's own, as on the card, but
// no kernel runs, so every value in device memory is unknown and a copy back to the host reads
// zeros (Note [Reads of device values] in simulator/core/device.cpp). A trace of such a run
// says so, once (kSimulatedDevice: which profile, its memory, whether the user sized it, how
// many devices), so that no report can be mistaken for one of the card; and it lists every
// read of device values (kDeviceRead), with its stacks, because what the program did after
// one (a loop that stops at an end token, MoE routing, nonzero()'s size, a boolean mask) may
// differ from what it does on the card. The shim finds the simulated device by its C API
// (simulator/core/simgpu_api.h), which the simulated core exports and memtrace never links:
// at library init (allocator/simulated_device.cpp), when the simulated libraries were loaded
// with the program, as `python -m mem_tracer.simulated_gpu` loads them; a process whose
// simulated libraries came later is found again when it first describes a device, and its
// record then comes before the first event after that.

// Note [Device memory readings]
// kDeviceMemory is cuMemGetInfo on the thread of an allocation, where the allocation's
// context is current (the recorder never makes a context current itself): total - free is
// the device's used memory. It holds this process's allocations and what no allocation call
// made: the CUDA context, the modules' code and data, libraries' own buffers, the free memory
// that memory pools keep for reuse, and the memory of any other process on the same device.
// The recorder takes one after a file's first event, after a device's peak rises (at most
// once every kDeviceMemoryPeriodNs per device), when tracing stops and at exit (while a
// context is still current); none where no driver or no context is there. A reader takes
// used - live at a reading as the memory outside any allocation call then, and assumes it
// unchanged until the next reading.
inline constexpr uint64_t kDeviceMemoryPeriodNs = 100 * 1000 * 1000;

// Note [Training records]
// The Python package (mem_tracer/training.py) learns what a tensor is only at certain
// moments: a parameter when tracing starts or at a step boundary, a .grad when the
// optimizer's step() begins, optimizer state when it ends, a saved activation when autograd
// saves it. So a kCategory record names a live allocation by its start address some time
// after it was allocated, and holds for that allocation's whole life (from its allocation to
// its free): a reader resolves it backwards. A later kCategory for the same allocation
// replaces an earlier one. An address that is not the start of a live allocation (a tensor
// inside a segment of PyTorch's caching allocator, Level::kSegment) is ignored.
// An allocation told no category is kTemporary in a trace that has training records (a
// kCategory, kTrainingPhase or kStepEnd) and was made while tracing; kUnknown otherwise.
// These records (0x0c to 0x0e) were added while the version was 1, without a bump, as
// additions that change nothing before them: a reader from before them refuses such a file at
// the first one ("an unknown record type"), and new readers read old files unchanged. Files
// are of later versions now for the later records (kVersion above); these belong to all.

// Note [Event bit layout]
// A memory event is the common record, so it is packed (docs/trace-format.md has the
// measured bytes per event):
//
//   bit 7     1: this is a memory event
//   bit 6     0: allocation, 1: free
//   bit 5     the address delta is stored divided by 256 (CUDA allocations are 256-byte
//             aligned, so the low byte of a delta is almost always zero)
//   bit 4     the Python stack is the previous event's of the same kind (no field)
//   bit 3     the native stack is the previous event's of the same kind (no field)
//   bits 2-0  an entry of the event tables (version 7; zero before, and zero: no entry):
//             an allocation's size is sizes[k - 1] (no size field); a free's address is the
//             k-th most recent allocation's (no address field, bit 5 zero)
//
// Fields, in order: time delta (time units since the previous timed record), address (zigzag
// delta from the previous event's address, or from a kSegmentNear's after it; none for a free
// naming a table entry), size
// (allocations only, none where bits 2-0 name its slot: a free's size is the size of the
// allocation it frees), Python stack id (unless bit 4), native stack id (unless bit 3). Frees carry
// stacks only when ProcessInfo says so; otherwise bits 4 and 3 are set and their stacks stay 0.
//
// Note [Event tables]
// Before version 7 (issue 52: at most 4 bytes an event), an allocation's size took 2-3 bytes
// and a free's address delta 1-3 bytes, though most sizes recur and most frees free one of
// the last few allocations. Writer and reader keep the same two small tables (EventTables),
// updated by every event as it is written and read, and reset with every other decoding base:
//   - sizes: 7 slots, a size's slot chosen by a hash of it (sizeSlot). An allocation whose
//     size is in its slot names the slot (bits 2-0 = slot + 1); another writes its size and
//     puts it in its slot. One comparison an event on the record path.
//   - recent allocations: the last 8 allocations' addresses (a ring). A free of one of the
//     last 7 names it (bits 2-0 = k for the k-th most recent) instead of writing its
//     address; a free of any other address writes it as before. Up to 7 comparisons an
//     event (the recorder's loop of an allocation and its free finds it at the first).
// The time delta, in nanoseconds, was then most of what was left (2.07 bytes an event on
// GPT-2's forwards and training steps): version 8 counts it in microseconds (Note [Times in
// microseconds]). A compressor on whole chunks was measured and not taken on the writer's side
// (docs/performance.md, Trace size): records are stored straight into the mapped file as they are
// made (Note [Records reach the page cache as they are written]), so a closed chunk cannot be
// rewritten smaller without a moment in which the file does not read. A closed trace is compressed
// afterwards (version 9, Note [Compressed chunks]).

// Note [Times in microseconds]
// Every record's time (a "time delta" field) counts units of the file's time unit, which
// kProcessInfo names (version 8; nanoseconds before): 1 µs by default, as PyTorch's own memory
// snapshots record their entries (each trace entry's time_us in torch.cuda.memory._snapshot(),
// written by torch/csrc/cuda/memory_snapshot.cpp from TraceEntry's time_), 1 ns with
// MEMTRACE_TIME_RESOLUTION=ns. Nanosecond deltas took 2.07 bytes an event on GPT-2's forwards and
// steps, microsecond ones about one (docs/performance.md, Trace size): a memory timeline needs no
// finer clock, and events keep their order by their place in the file, never by their times,
// which may now be equal. The writer takes each time as the start of its unit, t - (t - start) %
// unit, start being kProcessInfo's monotonic start, so that a time is the same whichever record
// carries it; the fields that are nanoseconds whatever the unit (kSection's times, kStepPeak's)
// hold such times too. The reader multiplies each delta by the unit: every time it gives is
// nanoseconds since the start, as before, and a multiple of the unit.
inline constexpr uint32_t kTimeUnitVersion = 8;
inline constexpr uint64_t kMaxTimeUnitNs = 1000000000;  // a second: anything coarser is no clock

// Note [Records beside the events, shorter]
// The file `memtrace run` leaves holds, beside the events, what the package's training hooks tell
// (Note [Training records], Note [Weights and their modules]): on GPT-2's three forwards and two
// AdamW steps, 1,365 kCategory and 740 kOwnerModule records for 6,808 events, each naming its
// allocation by its absolute address (7 bytes of a 9-byte record), and 153 strings, most of them
// module paths that begin as the one before (`model.transformer.h.10.attn` after
// `model.transformer.h.10`). They took 2.78 + 0.69 of the file's 8.78 bytes an event as written.
// The allocation a category or an owner is told for was made a little before, almost always: an
// activation when autograd saves it, a gradient in the backward before the step, optimizer state
// in the step, a parameter when its module first runs. So version 10 names it by its place among
// the last allocations: the event tables' ring of recent allocations (Note [Event tables]) holds
// the last kRing (4,096) allocations' addresses on both sides, as it held 8, at no cost an event
// (the index is masked either way), and kRecentCategory / kRecentOwnerModule say "the k-th most
// recent allocation" instead of its address (k = 1 to 4,096; a category is packed with k into one
// varint). The writer finds k by comparing the ring's addresses from the newest, up to 4,096 of
// them, once a record (a Python call through ctypes costs more); an address not in the ring is
// written as before, by kCategory or kOwnerModule. k names an address, nothing else: the record
// means what its address form means (a freed address, or one in a segment, is ignored alike).
// A string that begins as the string before it (by id) is written as kStringAfter: the length of
// the shared beginning (at most kMaxSharedPrefix) and the rest, a table record like kString, so
// the flight recorder's compaction copies it in its order. A segment of PyTorch's allocator
// (kSegment, 122 on GPT-2) is written as kSegmentNear: its address a delta from the events'
// address base, which moves to it, since the tensor that needed the segment starts there and
// follows it (7 bytes of absolute address, then about 3 of the tensor's delta, become about 3
// and 1). Every base these records use (the ring, the previous string, the address base) is one
// the reader keeps already. Measured (docs/performance.md, Version 10): that file 8.78 -> 6.32
// bytes an event as written, 4.21 -> 3.50-3.55 compacted; the record path unchanged (282.505
// instructions an event, bench/record_instructions).

// Note [Events in fewer bytes]
// Version 10's live files still took 4.7-6.0 bytes an event (issue 52 asks at most 4): one type
// byte, about one byte of time delta, 2.2 of address (docs/performance.md, Version 10 and 11).
// Measured on GPT-2's traces before building (bench/event_fields.py): three of four time deltas
// are 0, 1 or 2 units (microseconds), two of three frees free an allocation that is not among the
// last 7 but is among the last 4,096, and the type byte spent two of its bits on what is almost
// always the same (bit 5: CUDA addresses are 256-aligned; bit 3: no native stacks). So version 11
// gives the type byte's bits 5-3 new meanings:
//   bits 5-4  the time delta when it is 0, 1 or 2 units (no time field); 3: a time field follows,
//             holding the delta - 3;
//   bit 3     both stacks are the previous event's of the same kind (no stack field);
//   bits 2-0  as in version 7 (Note [Event tables]).
// and the fields after it:
//   - time, only where bits 5-4 are 3;
//   - an allocation's address: a varint v; v > 0: the zigzag delta v - 1 from the address base,
//     times 256 (version 10's bit 5, now the common case); v = 0: a zigzag delta follows, not
//     scaled (an address not 256-aligned: rare on CUDA);
//   - a free's address, unless bits 2-0 name one of the last 7 allocations: a varint v; where
//     v & 1, the ((v >> 1) + 8)-th most recent allocation of the ring (at most EventTables::kRing
//     back); else v >> 1 is an allocation's v as above (and 0 is followed by the delta);
//   - the size, as before;
//   - the stacks, unless bit 3: a varint s, the Python stack s >> 1, and where s & 1 the native
//     stack's varint after it (else the native stack is the previous one of the same kind).
// The writer finds a free's place in the ring without searching: the recorder's live table keeps
// each allocation's number in the writer's count (LiveBlock::ring, set when it is written), so the
// free's place is the count minus that number, checked against the ring (one comparison: a number
// from an earlier file, or a ring that wrapped, fails it and the address is written). A free
// without that number (the flight recorder's) searches the last 7 as before. Every base the new
// forms use (the ring, the time and address bases, the previous stacks) is one version 10's
// reader keeps already. Measured (docs/performance.md, Version 11): bytes an event as written and
// the record path's instructions an event.

struct EventBits {
  static constexpr uint8_t kEvent = 0x80;
  static constexpr uint8_t kFree = 0x40;
  static constexpr uint8_t kAddressIn256 = 0x20;
  static constexpr uint8_t kSamePythonStack = 0x10;
  static constexpr uint8_t kSameNativeStack = 0x08;
  // Version 7's table entry (Note [Event tables]); reserved (zero) before it.
  static constexpr uint8_t kTableEntry = 0x07;
};
// The first version whose events name entries of the event tables.
inline constexpr uint32_t kEventTablesVersion = 7;
// Version 11's meanings of bits 5-3 (Note [Events in fewer bytes]).
struct CompactEventBits {
  static constexpr uint8_t kTimeShift = 4;
  static constexpr uint8_t kTime = 0x30;        // the time delta 0-2, or 3: a time field follows
  static constexpr uint32_t kTimeInline = 3;    // deltas below this are in the type byte
  static constexpr uint8_t kSameStacks = 0x08;  // both stacks the previous event's of its kind
};
inline constexpr uint32_t kCompactEventsVersion = 11;

// Note [Allocations named by the blocks before them]
// Version 11's live files still took 4.25 bytes an event on GPT-2's training steps and 5.13 with
// Python stacks (issue 52 asks at most 4): an allocation's address was a delta from the previous
// event's, 2-4 bytes where PyTorch's caching allocator hands out a block far from the last one
// touched. Yet it hands out, measured on those steps (docs/performance.md, Version 12), almost
// only blocks that a recent event says where they are: a block that was freed (41 % of the
// allocations: at the address of a recent free and of the same size, the same block again; 14 %:
// a freed block, another size), or the rest of a block split after a recent allocation (42 %:
// at a recent allocation's end, its size rounded up to 512 bytes, PyTorch's rounding). So version
// 12 keeps, on both sides, beside the ring of the last EventTables::kRing allocations' addresses,
// their sizes and ends, and a ring of the last kRing frees' addresses and the sizes they freed,
// and an allocation's address field, a varint v, says which:
//   v & 3 == 1  the ((v >> 2) + 1)-th most recent free's address, and its size: no size field
//               (bits 2-0 zero); a reader refuses it where the free's size is not known (below);
//   v & 3 == 2  the ((v >> 2) + 1)-th most recent free's address; the size field as usual;
//   v & 3 == 3  the end of the ((v >> 2) + 1)-th most recent allocation;
//   v & 3 == 0  v > 0: the zigzag delta (v >> 2) - 1 from the address base, times 256; v = 0: a
//               zigzag delta follows, not scaled (as version 11).
// A free's size is known where the free named its allocation by its place in the ring (bits 2-0
// or its field's odd value): the ring keeps each allocation's size. A free written by its address
// (an allocation more than kRing back) enters the ring of frees with EventTables::kUnknownSize,
// which no allocation's v & 3 == 1 may name. A free's own fields are version 11's.
// Two more fields change: the size, a varint v: v odd, (v >> 1) × 512 bytes (PyTorch's caching
// allocator asks multiples of 512 for most tensors); v even and not 0, v >> 1 bytes; v = 0, a
// varint of the size follows (a size past 2^63 that 512 does not divide); and the stacks' field,
// whose Python stack is a zigzag delta from the previous one of its kind (new nodes are written
// in order, and an event's stack is often the one just made or near the last).
// The writer finds a block without searching: two direct-mapped indexes by address (a slot of
// kBlockIndex by the address's Fibonacci hash), one of the frees' numbers, one of the allocations'
// numbers by their ends, each checked against its ring (one comparison: a slot another address
// took, or a number from before the tables were emptied, fails it and the next form is tried).
// The indexes are the writer's own, and a hint: what the file says is only what both rings hold.
// Measured (docs/performance.md, Version 12): bytes an event as written, the record path's
// instructions an event.
inline constexpr uint32_t kBlockNamesVersion = 12;
// The address field's forms (Note [Allocations named by the blocks before them]).
struct BlockForm {
  static constexpr uint64_t kMask = 3;
  static constexpr uint64_t kDelta = 0;
  static constexpr uint64_t kFreedBlock = 1;  // a recent free's address and size
  static constexpr uint64_t kFreedAddress = 2;
  static constexpr uint64_t kAllocationEnd = 3;
  static constexpr unsigned kShift = 2;
  // PyTorch's caching allocator rounds every block up to 512 bytes (kMinBlockSize).
  static constexpr uint64_t kRounding = 512;
};
inline uint64_t blockEnd(uint64_t address, uint64_t size) {
  return address + ((size + (BlockForm::kRounding - 1)) & ~(BlockForm::kRounding - 1));
}

// The event tables of Note [Event tables], the same in writer, reader and the tests' writer.
struct EventTables {
  static constexpr uint32_t kSizeSlots = 7;
  static constexpr uint32_t kRecentAllocations = 7;  // a free names one of these
  // The ring's length: 8 before version 10, whose kRecentCategory and kRecentOwnerModule name
  // any of its allocations (a free still names one of the last 7: the same answers as a ring
  // of 8 gave, so a file of any version reads with this one).
  static constexpr uint32_t kRing = 4096;
  static_assert((kRing & (kRing - 1)) == 0, "the ring's index is a mask");
  uint64_t sizes[kSizeSlots] = {};
  uint64_t recent[kRing] = {};  // a ring: the allocation n's address at recent[n % kRing]
  uint32_t allocations = 0;
  // Version 12's (Note [Allocations named by the blocks before them]): the ring's allocations'
  // sizes and ends (blockEnd), and a ring of the last kRing frees: the address, the size freed
  // (kUnknownSize where the free did not name its allocation by its place).
  static constexpr uint64_t kUnknownSize = ~uint64_t{0};
  uint64_t recent_sizes[kRing] = {};
  uint64_t ends[kRing] = {};
  uint64_t freed[kRing] = {};
  uint64_t freed_sizes[kRing] = {};
  uint32_t frees = 0;

  // Fibonacci hashing, then the top 32 bits scaled to [0, kSizeSlots).
  static uint32_t sizeSlot(uint64_t size) {
    uint64_t hash = size * 0x9e3779b97f4a7c15ull;
    return static_cast<uint32_t>(((hash >> 32) * kSizeSlots) >> 32);
  }
  // The k-th most recent allocation's address, k from 1 to kRecentAllocations.
  uint64_t recentAllocation(uint32_t k) const { return recent[(allocations - k) & (kRing - 1)]; }
  void addAllocation(uint64_t address) { recent[allocations++ & (kRing - 1)] = address; }
  // Version 12's: the allocation's size and end join the ring with it.
  void addSizedAllocation(uint64_t address, uint64_t size) {
    uint32_t at = allocations++ & (kRing - 1);
    recent[at] = address;
    recent_sizes[at] = size;
    ends[at] = blockEnd(address, size);
  }
  void addFree(uint64_t address, uint64_t size) {
    uint32_t at = frees++ & (kRing - 1);
    freed[at] = address;
    freed_sizes[at] = size;
  }
  // The k-th most recent allocation's size (k from 1 to ringAllocations()).
  uint64_t recentSize(uint32_t k) const { return recent_sizes[(allocations - k) & (kRing - 1)]; }
  // How many frees the ring holds.
  uint32_t ringFrees() const { return frees < kRing ? frees : kRing; }
  // The k of the most recent of the last kRecentAllocations allocations at `address`; 0 if
  // none of them is.
  uint32_t findRecent(uint64_t address) const {
    for (uint32_t k = 1; k <= kRecentAllocations; ++k)
      if (recent[(allocations - k) & (kRing - 1)] == address) return k;
    return 0;
  }
  // The k by which a free names the allocation numbered `number` (its `allocations` when it was
  // added) at `address`, without searching (Note [Events in fewer bytes]); 0 where the ring no
  // longer holds it there (it wrapped, or the number is from before the tables were emptied).
  uint32_t placeOf(uint32_t number, uint64_t address) const {
    uint32_t k = allocations - number;
    return k - 1 < ringAllocations() && recent[number & (kRing - 1)] == address ? k : 0;
  }
  // How many allocations the ring holds: k may name 1 to this many.
  uint32_t ringAllocations() const { return allocations < kRing ? allocations : kRing; }
  // The same search over the whole ring, for the records of Note [Records beside the events,
  // shorter]: up to kRing comparisons, never on an event's path.
  uint32_t findInRing(uint64_t address) const {
    uint32_t held = ringAllocations();
    for (uint32_t k = 1; k <= held; ++k)
      if (recent[(allocations - k) & (kRing - 1)] == address) return k;
    return 0;
  }
};
// The first version with records 0x1e to 0x21 and the ring of kRing allocations.
inline constexpr uint32_t kShortRecordsVersion = 10;
// kStringAfter's longest shared beginning: one varint byte, and a record of at least 3 bytes
// then stands for at most 127 bytes of the string, so that what a reader keeps stays within
// 43 times the file's bytes (a crafted file cannot make each string the one before plus one).
inline constexpr uint32_t kMaxSharedPrefix = 127;

// Note [Strings that begin as an earlier one]
// With Python stacks, a trace's strings are mostly file paths, and most of each path is a folder an
// earlier path named (`.../lib/python3.11/site-packages/`, `torch/nn/modules/`), but the string
// just before is a function's name (`forward`), so version 10's kStringAfter shared nothing: the
// strings took 0.39 bytes an event on GPT-2's training steps (docs/performance.md, Version 12).
// Version 12's kStringFrom begins as any of the kStringWindow strings before it: the writer
// compares the new string with each (when a string is first met, never on an event's path), takes
// the longest shared beginning (the newest on a tie), and writes kStringAfter where that string is
// the one just before, kStringFrom where it is further back, kString where none shares 2 bytes. A
// reader keeps what it kept for kStringAfter: the string whole, a bounded multiple of its record.
inline constexpr uint32_t kStringWindow = 16;

// Which CUDA entry point an event came through (frees name the function that freed).
enum class Api : uint8_t {
  kPluggable = 0,          // memtrace_alloc / memtrace_free (PyTorch's pluggable allocator)
  kCudaMalloc = 1,         // cudaMalloc / cudaFree
  kCudaMallocAsync = 2,    // cudaMallocAsync / cudaMallocFromPoolAsync / cudaFreeAsync
  kCudaMallocManaged = 3,  // cudaMallocManaged (freed through cudaFree)
  kCuMemAlloc = 4,         // cuMemAlloc_v2 / cuMemFree_v2 (driver API)
  kCuMemAllocAsync = 5,  // cuMemAllocAsync / cuMemAllocFromPoolAsync / cuMemFreeAsync (driver API)
  kSnapshot = 6,         // live before this trace began (written when the file opens)
  kCuMemCreate = 7,  // physical memory: cuMemCreate / its end (Note [Virtual memory management])
  kCuMemAllocManaged = 8,  // cuMemAllocManaged (driver API; freed through cuMemFree_v2)
  kDeviceRead = 9,         // a copy from device memory to the host (kDeviceRead records; no event)
  kTorchAllocator = 10,  // a tensor of PyTorch's caching allocator (Note [PyTorch's own allocator])
  kSimulatedSize = 11,   // a size the simulated GPU answered (kSimulatedSize records; no event)
  kCount
};

inline constexpr uint32_t firstVersion(Api api) {
  return api == Api::kSimulatedSize                                   ? 6
         : api == Api::kTorchAllocator                                ? 5
         : api == Api::kDeviceRead                                    ? 3
         : api == Api::kCuMemCreate || api == Api::kCuMemAllocManaged ? 2
                                                                      : 1;
}

// What one event stands for.
enum class Level : uint8_t {
  // One allocation as its caller asked for it: a tensor of PyTorch's caching allocator (its
  // trace tracker), the pluggable allocator, PyTorch's cudaMallocAsync backend, or a program
  // calling CUDA itself.
  kTensor = 0,
  // A block an allocator then hands out in pieces: a segment of PyTorch's caching allocator,
  // or physical memory made with cuMemCreate (Note [Virtual memory management]).
  kSegment = 1,
  kCount
};

enum class MarkerKind : uint8_t {
  kTracingStarted = 0,  // stacks are captured from here on
  kTracingStopped = 1,  // events go on being written, without stacks ("untraced")
  kAnnotation = 2,      // a user mark with a name
  kPhaseBegin = 3,      // a named phase begins (forward, backward, ...)
  kPhaseEnd = 4,        // the innermost open phase ends
  kProcessExit = 5,     // the process is exiting; events may still follow (teardown)
  kTraceClosed = 6,     // the file was closed on purpose; nothing follows
  kCount
};

// What a live allocation holds, in training (kCategory). The numbers are the file's.
enum class Category : uint8_t {
  kUnknown = 0,
  kParameter = 1,
  kGradient = 2,
  kOptimizerState = 3,
  kActivation = 4,  // a tensor autograd saved for backward (not a parameter or an input)
  kInput = 5,       // an argument of the root module's forward
  kTemporary = 6,   // everything else, in a trace with training records
  kCount
};
static_assert(static_cast<int>(Category::kCount) <= 8,
              "kRecentCategory holds a category in 3 bits");

// The phase of a training step (kTrainingPhase).
enum class TrainingPhase : uint8_t {
  kNone = 0,  // outside forward, backward and the optimizer's step (data loading, zero_grad)
  kForward = 1,
  kBackward = 2,
  kOptimizer = 3,
  kCount
};

enum class StackMode : uint8_t {
  kNone = 0,
  kPython = 1,
  kNative = 2,
  kAll = 3,  // Python and native
};

inline bool wantsPython(StackMode mode) {
  return mode == StackMode::kPython || mode == StackMode::kAll;
}
inline bool wantsNative(StackMode mode) {
  return mode == StackMode::kNative || mode == StackMode::kAll;
}

// The names memtrace-report prints (records.cpp).
const char* apiName(Api api);
const char* levelName(Level level);
const char* markerName(MarkerKind kind);
const char* stackModeName(StackMode mode);
const char* categoryName(Category category);          // "parameter", "optimizer_state", ...
const char* trainingPhaseName(TrainingPhase phase);   // "none", "forward", ...
const char* sectionKindName(SectionKind kind);        // "frame", "peak", ...
const char* segmentActionName(SegmentAction action);  // "alloc", "free", "map", "unmap"
const char* certaintyName(Certainty certainty);       // "exact", "bounded", "estimated"

}  // namespace memtrace::format
