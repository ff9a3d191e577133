// Internal to recorder/: the state that the record path (recorder.cpp), the file session
// (session.cpp), the flusher (flusher.cpp), the fork handlers (fork.cpp) and the C API
// (c_api.cpp) share, and the lock that guards it. Nothing outside recorder/ includes this.
//
// All of it is one object, g_recorder (Note [One recorder state]), defined in
// recorder_state.cpp; its members are constructed in the order they are declared (its writer
// refers to its file).
#pragma once

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tracer/format/live_table.h"
#include "tracer/format/records.h"
#include "tracer/recorder/config.h"
#include "tracer/recorder/generated_code.h"
#include "tracer/recorder/growable_array.h"
#include "tracer/recorder/lent_stacks.h"
#include "tracer/recorder/native_stack.h"
#include "tracer/recorder/python_stack.h"
#include "tracer/recorder/record_writer.h"
#include "tracer/recorder/trace_file.h"

// Note [Lock order]
// Three locks are involved in recording, always taken in this order:
//   recorder (RecorderLock)  ->  object table (native_stack.cpp)
//   dynamic loader           ->  object table
// The recorder's lock is never held while taking the loader's (dl_iterate_phdr, dlopen,
// libunwind's unwinding, which reads the loaded objects): those all run in the capture step
// or after the lock is released. A library constructor that allocates CUDA memory while
// the loader holds its lock therefore cannot deadlock against a thread that records.
// Python's GIL is never taken by us (Note [Python frames without the GIL]): a thread walks its
// own frames whether or not it holds the GIL, and the public API's walk runs only on a thread
// that already holds it; a thread that holds the GIL while it waits for our lock is always
// inside a hook that will not ask for the GIL either.

namespace memtrace::detail {

using format::kMaxDevices;  // devices past this are counted only in the total

// An allocation the recorder has seen and not yet seen freed. recordAlloc writes each field in
// the live table's slot itself (its `fill`, Note [The live block written in place] in
// recorder.cpp): the initializers below do not run there, so a field added here is written there.
struct LiveBlock {
  uint64_t size;
  int16_t device;
  format::Level level;
  format::Api api;
  // Physical memory (api kCuMemCreate) only: its handle's references and the mappings of it
  // (Note [Virtual memory management] in records.h). Saturating: a count that reached the
  // top never comes down, so such memory is never freed early, only late.
  uint16_t references = 1;
  uint16_t mappings = 0;
  // What names the allocation when the library writes what is live itself, with no trace to
  // replay (Note [Reports the library writes itself], reports.cpp; Note [The flight
  // recorder's file], flight.cpp): its stacks and nn.Module as ids of the current file's tables
  // (0: none; a new file's snapshot sets them to 0), and its context. Two words more per live
  // allocation and a few stores per event, against a second table the flight recorder would
  // otherwise look up on every event.
  uint32_t python_stack = 0;
  uint32_t native_stack = 0;
  uint32_t module = 0;
  int32_t thread_id = 0;
  uint64_t stream = 0;
  uint64_t serial = 0;  // its allocation's event number in the file (the flight recorder's)
  format::Category category = format::Category::kUnknown;  // as told so far
  bool traced = false;  // made while tracing (stacks were captured)
  // Its number in the writer's count of allocations when it was written (the writer's
  // allocationNumber()), by which its free names it (Note [Events in fewer bytes] in records.h).
  uint32_t ring = 0;
};
static_assert(sizeof(LiveBlock) == 56,
              "the live table's value stays seven words; recordAlloc's fill writes each field");

// A mapping of physical memory (cuMemMap), by its virtual address.
struct Mapping {
  uint64_t size;
  uint64_t handle;  // the physical memory's handle (its address in g_recorder.live)
};

// A range of device memory PyTorch's caching allocator holds (Note [PyTorch's own allocator] in
// records.h): a segment it allocated, or pages it mapped into an expandable segment.
struct SegmentBlock {
  uint64_t size;
  int32_t device;
  uint64_t graph_pool;
  uint64_t user_pool;
};

// The simulated GPU (Note [The simulated device] in records.h), once the shim found it: a copy,
// written to every file from then on (session.cpp).
struct SimulatedDeviceCopy {
  bool known = false;
  char profile_name[256];
  char profile_file[4096];
  uint64_t memory_bytes = 0;
  bool memory_set_by_user = false;
  int device_count = 0;
};

// The flight recorder's state (flight.cpp; Note [Keeping the peak without its events] there), a
// part of the Recorder: guarded by the recorder's lock.
struct FlightEntry {
  uint64_t address;
  LiveBlock block;
};

struct FlightState {
  static constexpr uint64_t kMinimumFrame = 1024;  // the shortest frame, in events

  struct Frame {
    uint64_t offset = 0;  // where its kFrame's chunk starts in the current file
    uint64_t serial = 0;  // the events before it
    uint64_t time_ns = 0;
    size_t table_log_bytes = 0;  // the table records written before it
    SectionTotals totals{};
  };

  // PyTorch's segments at the frame's start (Note [PyTorch's own allocator] in records.h).
  struct SegmentEntry {
    uint64_t address;
    SegmentBlock block;
  };

  // This file's counts, peaks and frame.
  struct Now {
    uint64_t serial = 0;  // memory events written to this file (the next event's index)
    SectionTotals totals{};
    int device_slot[kMaxDevices];  // device -> index in totals.devices, -1 none yet

    uint64_t peak_bytes = 0;
    uint64_t peak_serial = UINT64_MAX;  // UINT64_MAX: no allocation yet
    uint64_t peak_time_ns = 0;

    bool oom_seen = false;
    uint64_t oom_serial = 0;
    uint64_t oom_time_ns = 0;
    FlightEntry oom_failed{};  // the failed request: its size, stacks and context

    Frame frame;  // the latest frame's start
    uint64_t frame_length = kMinimumFrame;
    uint64_t compacted_bytes = 0;  // the file's size after the last compaction (or its start)
    bool compaction_off = false;

    uint64_t step_begin_ns = 0;
    uint64_t step_peak_bytes = 0;
    uint64_t step_peak_time_ns = 0;
    format::TrainingPhase step_phase = format::TrainingPhase::kNone;
    uint32_t step_module = 0;
  };

  Now now;
  GrowableArray<FlightEntry> freed_since_peak;
  GrowableArray<FlightEntry> frame_live;  // the live set at the frame's start
  GrowableArray<FlightEntry> oom_live;
  GrowableArray<FlightEntry> scratch;
  GrowableArray<uint8_t> table_log;
  TraceFile next_file;  // the compacted file while it is written
  GrowableArray<SegmentEntry> frame_segments;
  bool compaction_warned = false;
};

// The recorder's lock: a mutex of one word (the three-state futex mutex of Drepper's "Futexes
// Are Tricky"), the pthread mutex's protocol without its checks of kind, owner and elision.
// Taken uncontended it costs a compare-and-swap and, released, an exchange: 9 instructions an
// event in bench/record_instructions.cpp, where the pthread mutex took 55; contended, the waiter
// sleeps in the kernel as a pthread mutex's does. Not recursive: the recorder never takes it
// twice.
class RecorderMutex {
 public:
  void lock() {
    int expected = kFree;
    if (!state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire))
      lockContended(expected);
  }
  void unlock() {
    if (state_.exchange(kFree, std::memory_order_release) == kWaiters) wake();
  }
  // In a forked child, where the thread that held it does not exist.
  void reset() { state_.store(kFree, std::memory_order_relaxed); }

 private:
  static constexpr int kFree = 0, kLocked = 1, kWaiters = 2;
  void lockContended(int seen) {
    if (seen != kWaiters) seen = state_.exchange(kWaiters, std::memory_order_acquire);
    while (seen != kFree) {
      syscall(SYS_futex, &state_, FUTEX_WAIT_PRIVATE, kWaiters, nullptr, nullptr, 0);
      seen = state_.exchange(kWaiters, std::memory_order_acquire);
    }
  }
  void wake() { syscall(SYS_futex, &state_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0); }
  std::atomic<int> state_{kFree};
};
static_assert(sizeof(std::atomic<int>) == sizeof(int), "the futex is the atomic's word");

// Note [One recorder state]
// Everything the record path, the file session, the flusher, the fork handlers, the C API and
// the parts they call into keep lives in one Recorder, g_recorder: constructed once
// (recorder_state.cpp) and never destroyed (Note [The recorder's state outlives every thread]).
// The parts are members of it, each a type of its own part's header: the lends (LentStacks,
// lent_stacks.h), the flight recorder's window (FlightState, here), the Python side
// (python::PythonState: the C API, the layout, code objects' deaths, hidden code, the frame
// cache) and the native side (native::NativeState: the unwinder, the loaded objects). No file
// of recorder/ keeps a variable of its own; the headers declare two mutable globals, g_recorder
// and the thread-local t_memtrace (recursion_guard.h). Which lock guards what is said by the
// types, in one order (Note [Lock order]):
//   - the recorder's lock (RecorderMutex, a private member: only a RecorderLock takes it, and the
//     fork handlers through lockForFork) guards every member that is not an atomic, a field set
//     once at load, or one of the two below;
//   - native::NativeState::objects_mutex guards the loaded objects: taken after the recorder's
//     lock and after the dynamic loader's, never before either;
//   - python::PythonState::hiding serializes hideCode only (readers read atomics).
// What is reset where:
//   - a new trace file: the writer's tables (RecordWriter::beginFile, in openFile), the live
//     table's stack ids (openFile's snapshot), the flight recorder's window (runOpened) and each
//     thread's caches, which compare the writer's generation;
//   - a fork, in the child: afterForkInChild (fork.cpp), the one place, for every member: the
//     locks made anew, the file abandoned, the flight recorder's window forgotten, the lends of
//     other threads ended.
class Recorder {
 public:
  Recorder() = default;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Everything below is guarded by the lock (RecorderLock) unless it says otherwise.
  Config config;
  TraceFile file;
  RecordWriter writer{file};
  format::LiveTable<LiveBlock> live;
  FlatMap<uint64_t, Mapping> mappings;  // of physical memory `live` holds
  // PyTorch's reserved memory by start address, written again into every new file (session.cpp).
  FlatMap<uint64_t, SegmentBlock> segments;
  uint64_t reserved[kMaxDevices + 1];  // [0]: all devices; [d + 1]: device d
  uint64_t reserved_peak[kMaxDevices + 1];
  uint64_t current[kMaxDevices + 1];  // [0]: all devices; [d + 1]: device d
  uint64_t peak[kMaxDevices + 1];
  bool file_wanted;    // a file should be open (started, or autostart)
  bool write_failed;   // writing failed; nothing is written until the next start
  bool write_through;  // every record is written at once (Note [When records reach the file])
  // ... and every record made before this time: UINT64_MAX while write_through, so that
  // afterRecord tests one word (fork.cpp and onExit set both).
  uint64_t write_through_until_ns;
  bool flusher_running;
  format::TrainingPhase phase;  // the last memtrace_training_phase
  int open_phases;
  char path_pattern[4096];  // the pattern the next file opens with
  char last_error[512];
  // The simulated device, once the shim found it: a copy, written to every file from then on.
  SimulatedDeviceCopy simulated;
  // The stretches of generated code told so far (Note [Generated code] in records.h), written to
  // every file when it opens (session.cpp) and to the open one when told (c_api.cpp).
  GeneratedCodeTable generated_code;
  // Device memory readings (Note [Device memory readings] in records.h): when device d was last
  // read (or tried), and in which file (RecordWriter::generation()).
  uint64_t device_memory_read_ns[kMaxDevices];
  uint32_t device_memory_file[kMaxDevices];
  // The tracker's calls that changed each device's memory (trackerEventCounts in recorder.h).
  uint64_t tracker_events[kMaxDevices];

  // The Python stacks lent to threads that run autograd's backward (lent_stacks.cpp).
  LentStacks lent_stacks;
  // The flight recorder's window (MEMTRACE_MODE=flight, flight.cpp).
  FlightState flight;
  // The Python side (python_stack.cpp) and the native side (native_stack.cpp): set once when
  // loaded, atomics, the frame cache (under this lock) and the loaded objects (under their own).
  python::PythonState python;
  native::NativeState native;

  std::atomic<bool> tracing;      // capture stacks (read without the lock)
  std::atomic<bool> initialized;  // ensureRecorderInitialized() has run (read without the lock)

  // fork() (fork.cpp): the lock, then the object table's, held across it (Note [Lock order]);
  // in the parent both released; in the child both made anew and the recorder's fields reset.
  void lockForFork();
  void unlockInParent();
  void afterForkInChild();

 private:
  friend class RecorderLock;
  RecorderMutex mutex_;
};

// The recorder's state (Note [One recorder state]); never destroyed.
extern Recorder& g_recorder;

// Writes the simulated device's record to the open file if it has not got it (the recorder's lock
// held).
bool writeSimulatedDeviceIfNew();

// Whether a reading of `device` is due after an allocation at `time_ns` that did (or did not)
// raise the device's peak: the file has none of that device yet, or the peak rose and the last
// try is a period old. Claims the reading (the recorder's lock held), so that one thread takes it.
inline bool deviceMemoryDue(int device, uint64_t time_ns, bool peak_rose) {
  if (device < 0 || device >= kMaxDevices) return false;
  bool first = g_recorder.device_memory_file[device] != g_recorder.writer.generation();
  if (!first && !(peak_rose && time_ns - g_recorder.device_memory_read_ns[device] >=
                                   format::kDeviceMemoryPeriodNs))
    return false;
  g_recorder.device_memory_file[device] = g_recorder.writer.generation();
  g_recorder.device_memory_read_ns[device] = time_ns;
  return true;
}

// Holds the recorder's lock for its scope (Note [Lock order]).
class RecorderLock {
 public:
  RecorderLock() { g_recorder.mutex_.lock(); }
  ~RecorderLock() { g_recorder.mutex_.unlock(); }
  RecorderLock(const RecorderLock&) = delete;
  RecorderLock& operator=(const RecorderLock&) = delete;
};

inline uint64_t monotonicNow() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return uint64_t(now.tv_sec) * 1000000000u + uint64_t(now.tv_nsec);
}

// The index of a device's counters in g_recorder.current and g_recorder.peak, or -1 past
// kMaxDevices.
inline int counterIndex(int device) {
  return device >= 0 && device < kMaxDevices ? device + 1 : -1;
}

// Sets memtrace_last_error()'s text. Called with the recorder's lock held.
void setError(const char* message, const char* detail = nullptr);

// ---- The file session (session.cpp); all called with the recorder's lock held ----

// Expands %p to the pid, and a rank's %r, %w, %l, %g, %a, %j (session.cpp).
void expandPath(const char* pattern, char* out, size_t out_size);

// Opens the trace file if one is wanted and none is open. False when no file is open
// after it (none wanted, or the open failed).
bool openFile();
inline bool ensureFileOpen() {
  return g_recorder.file.isOpen() || openFile();
}

// Writes the closing marker `why` and closes the file, if one is open.
void closeFile(format::MarkerKind why);

// Writing failed: warn, stop recording until the next memtrace_start; the program goes on.
void failWrite();

// Note [When records reach the file]
// A record reaches the file the moment it is written when the file is mapped (Note [Records
// reach the page cache as they are written], trace_file.h): every regular file the recorder
// can map, which is almost every trace. Then nothing below applies, and no end of the process
// (_exit, abort, std::terminate, a fatal signal, SIGKILL, in an exit handler or a static
// destructor) loses a record it had finished writing.
// Through the buffer (a pipe, a file that cannot be mapped, MEMTRACE_MAP_FILE=0), a record
// is lost if the process ends before the buffer is written, and the recorder is not told of
// most endings. What survives them is what a write() already gave the kernel (the page
// cache). So buffered records are written:
//   - by the flusher, at least every kFlushPeriodNs: a process that ends unannounced loses
//     at most that much;
//   - at once (each record its own chunk: a write per event, a few more bytes per event)
//     where losing that much is not acceptable or the flusher cannot be relied on:
//       * in a forked child (g_recorder.write_through from fork on): it typically ends with
//       _exit(),
//         and its flusher may never have run; a short child would leave no event at all;
//       * during a file's first flush period (g_recorder.write_through_until_ns): a process killed
//         early would otherwise leave a trace without a single event;
//       * once exit() has begun (onExit): static destructors and teardown frees follow.
//   - the opening chunk (process, modules, snapshot) is written when the file opens, so a
//     trace file on disk holds at least one whole chunk from then on. Not before: the file's
//     16-byte header is written first (TraceFile::open), and a process killed between the two
//     (a window of microseconds; 3 of 300 SIGKILLs drawn in a loaded program's first 50 ms hit
//     it, tests/preload/test_reliability.py) leaves the header alone, which the reader refuses
//     as a trace that "holds no records" (exit 2), having recorded nothing yet to lose.
// A buffered parent process in steady state loses at most one flush period to a sudden end.
inline constexpr uint64_t kFlushPeriodNs = 100 * 1000 * 1000;

// After writing a record made at `time_ns`: write it through when the policy says so.
inline void afterRecord(uint64_t time_ns) {
  if (time_ns < g_recorder.write_through_until_ns && g_recorder.file.isOpen() &&
      !g_recorder.file.mapped() && !g_recorder.file.flush())
    failWrite();
}

// The atexit handler: marks the exit and switches to writing every record through.
void onExit();

// ---- The flusher thread (flusher.cpp) ----

// Starts the thread that flushes the file every 100 ms, unless it runs. the recorder's lock held.
void startFlusher();

// ---- Fork (fork.cpp) ----

// Registers the pthread_atfork handlers that keep the recorder's lock and the object table
// consistent across fork() and give the child a file of its own.
void installForkHandlers();

}  // namespace memtrace::detail
