// The record path (recorder.h): guard (the caller's), capture outside the lock, lock, write;
// and the recorder's one-time initialization.
#include "tracer/recorder/recorder.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <new>

#include "tracer/format/peak.h"
#include "tracer/format/ranges.h"
#include "tracer/recorder/flight.h"
#include "tracer/recorder/lent_stacks.h"
#include "tracer/recorder/native_stack.h"
#include "tracer/recorder/python_stack.h"
#include "tracer/recorder/recorder_state.h"
#include "tracer/recorder/reports.h"
#include "tracer/recorder/thread_state.h"

namespace memtrace {

using namespace detail;

namespace {

struct DeviceDescription {
  std::atomic<int> state;  // 0 unknown, 1 being asked, 2 known
  char name[256];
  uint64_t total_bytes;
};

pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
std::atomic<DeviceDescriber> g_describer{nullptr};
DeviceDescription g_devices[kMaxDevices];  // written once per device, outside the recorder's lock

// Whether the device's peak rose. Every event counts twice, the process's counter (index 0)
// and the device's, written out rather than as a loop: they run on every event.
inline bool countAlloc(int device, uint64_t size) {
  g_recorder.current[0] += size;
  bool rose = format::raisePeak(g_recorder.peak[0], g_recorder.current[0]);  // Note [New peak]
  int index = counterIndex(device);
  if (index < 0) return rose;
  g_recorder.current[index] += size;
  return format::raisePeak(g_recorder.peak[index], g_recorder.current[index]);
}

inline void takeAway(uint64_t& counter, uint64_t size) {
  counter -= size < counter ? size : counter;
}

inline void countFree(int device, uint64_t size) {
  takeAway(g_recorder.current[0], size);
  int index = counterIndex(device);
  if (index >= 0) takeAway(g_recorder.current[index], size);
}

// Reserved memory grows or shrinks by `size` on `device` (segments: recordSegment).
void countReserved(int device, uint64_t size, bool grows) {
  for (int index : {0, counterIndex(device)}) {
    if (index < 0) continue;
    uint64_t& reserved = g_recorder.reserved[index];
    reserved = grows ? reserved + size : reserved - (size < reserved ? size : reserved);
    if (reserved > g_recorder.reserved_peak[index]) g_recorder.reserved_peak[index] = reserved;
  }
}

// Takes [address, address + size) out of the live segment table: the ranges inside it go, the
// ones it cuts are trimmed (an expandable segment unmaps pages by the block, not by the mapping
// that made them). Returns the bytes taken out.
uint64_t removeSegmentRange(uintptr_t address, uint64_t size) {
  SegmentBlock removed{};
  if (g_recorder.segments.erase(address, &removed)) {
    if (removed.size == size) return size;
    g_recorder.segments.insert(address, removed);  // not the same range: trimmed below
  }
  uint64_t end = address + size, taken = 0;
  // Segments are few (hundreds): a scan per cut is cheap, and cuts are rare.
  struct Cut {
    uint64_t start;
    SegmentBlock block;
  };
  Cut cuts[32];
  for (;;) {
    int count = 0;
    g_recorder.segments.forEach([&](uint64_t start, const SegmentBlock& block) {
      if (count < 32 && start < end && start + block.size > address) cuts[count++] = {start, block};
    });
    if (count == 0) return taken;
    for (int i = 0; i < count; ++i) {
      Cut& cut = cuts[i];
      g_recorder.segments.erase(cut.start);
      uint64_t cut_end = cut.start + cut.block.size;
      // Note [Cutting a range out of PyTorch's segments]: the report's replays cut the same.
      format::RangeCut pieces = format::cutRange(cut.start, cut_end, address, end);
      taken += pieces.taken;
      if (pieces.keeps_before) {
        SegmentBlock before = cut.block;
        before.size = address - cut.start;
        g_recorder.segments.insert(cut.start, before);
      }
      if (pieces.keeps_after) {
        SegmentBlock after = cut.block;
        after.size = cut_end - end;
        g_recorder.segments.insert(end, after);
      }
    }
  }
}

[[gnu::noinline]] void askDescription(int device) {
  DeviceDescription& description = g_devices[device];
  int expected = 0;
  if (!description.state.compare_exchange_strong(expected, 1)) return;
  DeviceDescriber describer = g_describer.load(std::memory_order_acquire);
  if (!describer ||
      !describer(device, description.name, sizeof(description.name), &description.total_bytes)) {
    snprintf(description.name, sizeof(description.name), "device %d", device);
    description.total_bytes = 0;
  }
  description.state.store(2, std::memory_order_release);
}

// Asks the shim for the device's name and memory once (outside the lock).
inline void describeDevice(int device) {
  if (device < 0 || device >= kMaxDevices ||
      g_devices[device].state.load(std::memory_order_acquire) == 2)
    return;
  askDescription(device);
}

// Writes the device's record once per file. Called with the recorder's lock held.
bool writeDeviceIfNew(int device) {
  if (g_recorder.writer.deviceWritten(device)) return true;
  if (g_devices[device].state.load(std::memory_order_acquire) != 2) return true;
  return g_recorder.writer.writeDevice(device, g_devices[device].name,
                                       g_devices[device].total_bytes);
}

// The capture step, outside the lock.
struct Capture {
  ThreadState* thread = nullptr;
  bool python = false;
  bool native = false;
  int64_t graph_task = -1;  // autograd's, while a stack is lent (Note [Stacks lent to ...])
};

// Whether this event's stacks are captured at all (tracing, and frees only when asked).
bool capturesStacks(bool is_free) {
  return g_recorder.tracing.load(std::memory_order_relaxed) &&
         (!is_free || g_recorder.config.free_stacks);
}

// Captures the thread's stacks into `capture` (its thread set). `walk_python`: Python stacks are
// wanted and this thread's can be walked (decided once per event: it also decides the GcPause
// around the public API's walk); `holds_gil`, canWalk's.
[[gnu::noinline]] void captureStacks(Capture* capture, const void* caller, bool walk_python,
                                     bool holds_gil) {
  ThreadState* thread = capture->thread;
  if (!thread) return;
  thread->python_count = 0;
  thread->python_walk.frames_serial = 0;
  thread->native_count = 0;
  thread->python_holds_gil = holds_gil;
  if (anyStackLent() && format::wantsPython(g_recorder.config.stack_mode))
    capture->graph_task = currentGraphTask();
  if (walk_python) {
    thread->python_count = python::captureStack(
        thread->python_frames, g_recorder.config.python_depth, &thread->python_walk);
    capture->python = thread->python_count > 0;
  }
  if (format::wantsNative(g_recorder.config.stack_mode)) {
    thread->native_count =
        native::captureStack(thread->native_ips, g_recorder.config.native_depth, caller);
    capture->native = thread->native_count > 0;
  }
}

// Gives the thread the stacks lent to the backward it runs, if any (the recorder's lock held).
void borrowLentStack(Capture* capture) {
  if (!capture->thread || !format::wantsPython(g_recorder.config.stack_mode) || !anyStackLent())
    return;
  capture->python = borrowLentStacks(*capture->thread, capture->graph_task);
}

// Interns the captured stacks (with the recorder's lock held). *unknown_object asks the caller to
// refresh the object table once the lock is released. Inlined: every event with stacks runs it
// (as a call from its two callers, 35 instructions an allocation of GPT-2's forward).
[[gnu::always_inline]] inline bool internStacks(const Capture& capture, uint32_t* python_stack,
                                                uint32_t* native_stack, bool* unknown_object) {
  bool ok = true;
  *python_stack = capture.python ? g_recorder.writer.internPythonStack(*capture.thread, &ok) : 0;
  *native_stack = ok && capture.native
                      ? g_recorder.writer.internNativeStack(*capture.thread, &ok, unknown_object)
                      : 0;
  return ok;
}

void refreshObjectsIfNeeded(bool unknown_object) {
  if (!unknown_object) return;
  native::refreshObjectTable();
  RecorderLock lock;
  if (g_recorder.file.isOpen() && !g_recorder.writer.writeNewLoadedObjects()) failWrite();
}

bool pathMentionsSelf(const char* preload) {
  Dl_info info;
  if (!preload || !dladdr(reinterpret_cast<void*>(&ensureRecorderInitialized), &info) ||
      !info.dli_fname)
    return false;
  const char* base = strrchr(info.dli_fname, '/');
  base = base ? base + 1 : info.dli_fname;
  return strstr(preload, base) != nullptr;
}

void initialize() {
  g_recorder.config = readConfig();
  strncpy(g_recorder.path_pattern, g_recorder.config.output_pattern,
          sizeof(g_recorder.path_pattern) - 1);
  bool preloaded = loadedByPreload();
  bool autostart = g_recorder.config.autostart >= 0 ? g_recorder.config.autostart == 1 : preloaded;
  python::loadApi();
  if (g_recorder.config.python_public_api_only) python::usePublicApiOnly();
  if (format::wantsNative(g_recorder.config.stack_mode)) native::loadUnwinder();
  installForkHandlers();
  installSnapshotSignal();
  atexit(onExit);
  if (autostart) {
    g_recorder.file_wanted = true;
    g_recorder.tracing.store(true, std::memory_order_relaxed);
  }
  g_recorder.initialized.store(true, std::memory_order_release);
}

}  // namespace

bool loadedByPreload() {
  return pathMentionsSelf(getenv("LD_PRELOAD"));
}

void ensureRecorderInitialized() {
  if (!g_recorder.initialized.load(std::memory_order_acquire))
    pthread_once(&g_init_once, initialize);
}

void setDeviceDescriber(DeviceDescriber describer) {
  g_describer.store(describer, std::memory_order_release);
}

namespace {

// Note [Recording scope before the lock]
// Each record function opens with one Event (Note [One opening per event]), whose members
// are the steps of the opening in the order they run: the recording (EventRecording) before
// the RecorderLock. Members are constructed in order and destroyed in reverse, so that one
// declaration fixes three orderings:
//   - the capture (the EventRecording's constructor) runs before the recorder's lock is taken:
//     the native walk reads the loaded objects under the loader's lock, which is never taken
//     while the recorder's lock is held (Note [Lock order]); and threads capture in parallel;
//   - the GcPause member outlives the lock: the stacks are interned under the recorder's lock,
//     and the Python frames' metadata resolved there must not start a collection either
//     (Note [No Python code runs in a hook]);
//   - the object-table refresh (the destructor) runs after the recorder's lock is released: it
//     takes the loader's lock, then the recorder's lock itself to write the new loaded objects;
//     with the recorder's lock still held that would invert the lock order and deadlock on the
//     non-recursive mutex.

// Which stacks an event may carry: an allocation's (and a read's, a failed allocation's), a
// free's (only with MEMTRACE_FREE_STACKS), or none (a segment's change).
enum class Stacks { kAllocation, kFree, kNone };

// The steps of recording an event before the lock (capture) and the records that go before
// the event itself, shared by every record with the thread's stacks.
class EventRecording {
 public:
  [[gnu::always_inline]] EventRecording(const EventSource& source, Stacks stacks)
      : captured_(stacks != Stacks::kNone && capturesStacks(stacks == Stacks::kFree)),
        wants_python_(captured_ && format::wantsPython(g_recorder.config.stack_mode)),
        walk_python_(wants_python_ && python::canWalk(&holds_gil_)),
        gc_pause_(walk_python_ && holds_gil_) {
    if (stacks == Stacks::kNone) return;
    // The thread's state, looked up once an event (Note [One opening per event]).
    capture_.thread = currentThreadState();
    // Python's stacks or native ones (wants_python_, or wantsNative): any mode but kNone, one test.
    if (captured_ && g_recorder.config.stack_mode != format::StackMode::kNone)
      captureStacks(&capture_, source.caller, walk_python_, holds_gil_);
  }

  // After the lock is released (Note [Recording scope before the lock]): a native frame
  // outside every known loaded object asks for a refresh of the object table.
  ~EventRecording() { refreshObjectsIfNeeded(unknown_object_); }

  // With the recorder's lock held: the device (once a file), the context, the thread's module
  // scope and the stacks of the event. False when the file could not take them.
  [[gnu::always_inline]] bool writePrelude(const EventSource& source, int device,
                                           format::Level level, uint32_t* python_stack,
                                           uint32_t* native_stack) {
    ThreadState* thread = capture_.thread;
    if (wants_python_) borrowLentStack(&capture_);
    // The fast path: nothing changed since the thread's last event; its stacks, if any, are all
    // that is left to intern.
    if (thread &&
        g_recorder.writer.preludeUnchanged(*thread, source.stream,
                                           RecordWriter::preludeKey(device, source.api, level))) {
      if (!capture_.python && !capture_.native) {
        *python_stack = *native_stack = 0;
        return true;
      }
      return internStacks(capture_, python_stack, native_stack, &unknown_object_);
    }
    return writeChanges(context(source, device, level), python_stack, native_stack);
  }

  // After writePrelude: the context written, and the nn.Module the file says the thread runs.
  EventContext context(const EventSource& source, int device, format::Level level) const {
    return EventContext{threadId(), device, source.stream, source.api, level};
  }
  pid_t threadId() const { return capture_.thread ? capture_.thread->thread_id : 0; }
  uint32_t module() const { return capture_.thread ? RecordWriter::moduleOf(*capture_.thread) : 0; }
  bool traced() const { return captured_; }

 private:
  // writePrelude's path when something changed, or stacks are to be interned: it writes what
  // changed, and remembers what the file now says for the thread's next event.
  [[gnu::noinline]] bool writeChanges(const EventContext& context, uint32_t* python_stack,
                                      uint32_t* native_stack) {
    ThreadState* thread = capture_.thread;
    RecordWriter& writer = g_recorder.writer;
    bool ok = writeDeviceIfNew(context.device) && writer.setContext(context) &&
              (!thread || writer.writeModuleScope(*thread)) &&
              internStacks(capture_, python_stack, native_stack, &unknown_object_);
    if (ok && thread) writer.rememberPrelude(*thread, context);
    return ok;
  }

  bool captured_;           // stacks are wanted for this event
  bool wants_python_;       // ... and Python stacks among them
  bool holds_gil_ = false;  // set by canWalk; before walk_python_, initialized after it
  bool walk_python_;
  python::GcPause gc_pause_;  // from before the public API's walk until the stacks are interned
  Capture capture_;
  bool unknown_object_ = false;
};

// Whether an event's opening must see to the recorder's initialization: the hooks' and the C
// API's may run before the library's constructor; the tracker is attached only after it
// (attachOnce initializes first), so its calls skip the check (Note [One call from PyTorch's
// tracker]).
enum class Opening { kFirst, kInitialized };

// The recorder initialized and the event's device described (outside the lock: the shim asks
// the driver), before anything else of an event.
struct Started {
  [[gnu::always_inline]] Started(int device, Opening opening) {
    if (opening == Opening::kFirst) ensureRecorderInitialized();
    describeDevice(device);
  }
};

// A device memory reading an allocation asks for, taken once the recorder's lock is released
// (it is declared before the lock): the driver is never called with the recorder's lock held.
struct DeviceMemoryAfterLock {
  bool due = false;
  ~DeviceMemoryAfterLock() {
    if (due) recordDeviceMemory();
  }
};

// Note [One opening per event]
// Every record function opens the same way, written once here: the recorder initialized, the
// device described, the thread's state looked up once and its stacks captured (outside the
// lock), the recorder's lock taken, the time read under it (times only grow in the file), and
// the file opened if one is wanted (with its snapshot, before the event changes what is live).
// Then, under the lock, EventRecording::writePrelude writes what the file must say before the
// event. Its per-thread fast path does nothing but compare when nothing changed since the
// thread's last event (but intern its stacks: below): the same device, stream, api and level, and
// the writer's prelude epoch where the thread's last event left it
// (RecordWriter::preludeUnchanged; the thread's own nn.Module changing clears the epoch it keeps,
// so the same nn.Module costs no comparison). The epoch moves on with every context record of any
// thread and every new file or section, which is all that can make the file stop saying what it
// said after that event (its context, the device's record, the thread's module scope: the thread
// remembers it only when the file said all of it, RecordWriter::rememberPrelude). Lent stacks
// are asked for only when Python stacks are wanted, and then only while some are lent
// (anyStackLent, an atomic load). Anything else takes the path that writes what changed, which
// the fast path never skips: the records written are the same either way. Measured with
// bench/record_instructions.cpp (no stacks, an allocation and its free in a loop, callgrind
// counting only the loop, the difference of two loop lengths): recordAlloc and recordFree took
// 615 instructions an event before the one state and this opening, 299 after; the whole loop
// (with its own lines and the flusher thread's chunks) 631 and 311.
//
// An event with stacks takes the same path when nothing else changed, and only interns them there:
// interning writes table records (strings, frames, stack nodes), which say nothing of a context,
// so the epoch stays. With Python stacks that took memtrace's own instructions on GPT-2's forward
// from 636 k to 596 k (batch 1, simulated H200, bench/cost_parts.py; the context's, the device's
// and the module scope's checks skipped), and on the 3-frame tensor loop from 17,410 to 17,271 a
// tensor.
//
// The lock stays (Note [Why events take the recorder's lock]).
class Event {
 public:
  [[gnu::always_inline]] Event(const EventSource& source, Stacks stacks, int described_device,
                               Opening opening = Opening::kFirst)
      : started_(described_device, opening),
        recording(source, stacks),
        time(monotonicNow()),
        writing(ensureFileOpen()) {}

 private:
  Started started_;

 public:
  EventRecording recording;
  DeviceMemoryAfterLock device_memory;

 private:
  RecorderLock lock_;

 public:
  const uint64_t time;
  const bool writing;  // a file is open
};

// Note [Why events take the recorder's lock]
// A thread's own buffer that takes its events without a lock, merged into the file later, does not
// fit this file's encoding: every event is encoded against the record before it in the file (Note
// [Event bit layout] in records.h: the time and address deltas, the previous stacks, the context
// record that names the thread), and a thread's event may change what the next thread's means (the
// live table replaces an allocation a free never reached, the counters of a device, the peak,
// the snapshot a new file opens with). Per-thread buffers would need a context record and fresh
// bases at every switch of buffer, so another record stream and more bytes, and the order of
// events between threads, which the live table and the report replay, would be the order of
// the merge instead of the order they happened under the lock. So an event takes the lock, and the
// lock is made cheap instead: a RecorderMutex (recorder_state.h), uncontended a compare-and-swap
// and an exchange, where the pthread mutex it replaced cost 55 instructions an event
// (bench/record_instructions.cpp); nothing runs under it but the tables and the encoding.

// Note [The live block written in place]
// An allocation's LiveBlock (seven words) was built on the stack and copied into the live
// table's slot, and a free copied the slot's seven words out before reading four of them: 8
// instructions an event each way (bench/record_instructions, callgrind's self costs by line).
// The allocation now writes each field once into the slot the table hands it
// (LiveTable::allocateInPlace), and the free reads what it needs from the slot before the slot
// is taken (LiveTable::freeWith), copying the whole block only for the flight recorder's run.
// Two things keep it so, both measured: each field is written once, from a value chosen before
// (fields zeroed, then written again under `if (event.writing)`: 328.0 instructions an
// allocation, no gain), and nothing takes the filling lambda's address (a rare path that took
// it by reference made the compiler build the closure and read through it on every allocation:
// 350.0). The
// file's bytes do not change (RecordWriter.WritesTheSameBytesForTheSameEvents). Measured with
// bench/record_instructions (2026-11-30): an allocation 328.0 -> 319.0, a free 262.2 -> 257.0.

// What recordAlloc and recordHeldAlloc do once the event is open: the allocation joins the live
// table, is counted and written. The file opened (with its snapshot of the live table) before
// the allocation joins the live table, so that it is written once; the stacks are interned
// (their records written) before it joins, since the live table keeps them (LiveBlock). `held`:
// an allocation read from PyTorch's snapshot (recordHeldAlloc), whose stacks, nn.Module and
// thread are not the calling thread's: it has none (thread 0).
[[gnu::always_inline]] inline void joinAllocation(Event& event, const EventSource& source,
                                                  uintptr_t key, uint64_t size, bool held) {
  uint32_t python_stack = 0, native_stack = 0;
  bool prelude_written =
      event.writing && event.recording.writePrelude(source, source.device, source.level,
                                                    &python_stack, &native_stack);
  if (held) python_stack = native_stack = 0;
  // Written in place, each field once (Note [The live block written in place]). The stacks are
  // 0 where no prelude was written (no file) and for a held allocation.
  bool writing = event.writing, own = writing && !held;
  LiveBlock* live = nullptr;
  auto fill = [&](LiveBlock & block, bool replacing) __attribute__((always_inline)) {
    // A free we never saw (freed through a path we do not hook): the new allocation replaces
    // it, by the rule the reader applies too (tracer/format/live_table.h).
    if (replacing) countFree(block.device, block.size);
    live = &block;
    block.size = size;
    block.device = static_cast<int16_t>(source.device);
    block.level = source.level;
    block.api = source.api;
    block.references = 1;
    block.mappings = 0;
    block.python_stack = python_stack;
    block.native_stack = native_stack;
    block.module = own ? event.recording.module() : 0;
    block.thread_id = own ? event.recording.threadId() : 0;
    block.stream = writing ? source.stream : 0;
    // The flight recorder's number for it (Note [Keeping the peak without its events]).
    block.serial = writing && g_recorder.config.flight ? flightSerial() : 0;
    block.category = format::Category::kUnknown;
    block.traced = writing && g_recorder.tracing.load(std::memory_order_relaxed);
    block.ring = writing ? g_recorder.writer.allocationNumber() : 0;
  };
  if (g_recorder.live.allocateInPlace(key, fill) == format::AllocOutcome::kNoMemory) {
    // The table could not grow (no memory for it): the allocation is kept nowhere but here, for
    // the flight recorder's run of its event (one at a time: the recorder's lock is held).
    static LiveBlock unkept;
    fill(unkept, false);
  }
  bool peak_rose = countAlloc(source.device, size);
  if (!event.writing) return;
  event.device_memory.due = deviceMemoryDue(source.device, event.time, peak_rose);
  if (!prelude_written ||
      !g_recorder.writer.writeAlloc(event.time, key, size, python_stack, native_stack)) {
    failWrite();
    return;
  }
  // `live`: the table's slot, unmoved until the next allocation, or `unkept`'s.
  if (g_recorder.config.flight && !runAllocated(key, *live, event.time)) {
    failWrite();
    return;
  }
  afterRecord(event.time);
}

}  // namespace

void recordAlloc(const RecursionGuard&, const EventSource& source, const void* address,
                 uint64_t size) {
  Event event(source, Stacks::kAllocation, source.device);  // Note [One opening per event]
  joinAllocation(event, source, reinterpret_cast<uintptr_t>(address), size, /*held=*/false);
}

namespace {

// What recordFree does once the event is open: the allocation leaves the live table, is counted
// and written; an address the table does not hold is ignored.
[[gnu::always_inline]] inline void leaveAllocation(Event& event, const EventSource& source,
                                                   uintptr_t key) {
  // What the event needs of the block, read in place (Note [The live block written in place]);
  // the flight recorder's run, the whole block.
  int device = 0;
  uint64_t size = 0;
  format::Level level = format::Level::kTensor;
  uint32_t ring = 0;
  // Storage, not a LiveBlock, whose initializers would cost every event: the block is copied
  // into it (and so made there) only for the flight recorder's run.
  alignas(LiveBlock) unsigned char gone[sizeof(LiveBlock)];
  auto take = [&](const LiveBlock& block) {
    device = block.device;
    size = block.size;
    level = block.level;
    ring = block.ring;
    if (g_recorder.config.flight) std::memcpy(gone, &block, sizeof(LiveBlock));
  };
  if (!g_recorder.live.freeWith(key, take)) return;
  countFree(device, size);
  if (!event.writing) return;
  uint32_t python_stack = 0, native_stack = 0;
  if (!event.recording.writePrelude(source, device, level, &python_stack, &native_stack) ||
      !g_recorder.writer.writeFree(event.time, key, python_stack, native_stack, ring)) {
    failWrite();
    return;
  }
  if (g_recorder.config.flight) runFreed(key, *std::launder(reinterpret_cast<LiveBlock*>(gone)));
  afterRecord(event.time);
}

// Note [Tensors made while the tracker attaches] (allocator/torch_allocator.cpp): each of the
// tracker's calls that changes what a device holds is counted on that device, under the
// recorder's lock, before anything of it is recorded (a free of an address not yet known
// included: that is the change the count must show).
inline void countTrackerEvent(int device) {
  if (device >= 0 && device < kMaxDevices) ++g_recorder.tracker_events[device];
}

}  // namespace

void recordFree(const RecursionGuard&, const EventSource& source, const void* address) {
  Event event(source, Stacks::kFree, -1);  // Note [One opening per event]
  leaveAllocation(event, source, reinterpret_cast<uintptr_t>(address));
}

// Note [One call from PyTorch's tracker]
// A tensor of PyTorch's caching allocator is told by its trace tracker (allocator/torch_bridge/):
// PyTorch's std::function calls the bridge's onTraceEntry, which calls the sink's function
// (allocator/torch_allocator.cpp), which calls these, once an event. They are the whole of what
// the hooks' recordAlloc and recordFree do, with the wrappers' part folded in: the recursion
// guard set once, the event's source built here (its api and level constants the compiler folds
// into the prelude's comparison), the count of the device's tracker calls kept under the
// recorder's lock with the event (it was two counts outside it, at the call's start and end),
// and no check of the recorder's initialization (the tracker is attached after it). From
// PyTorch's std::function to the recorder's lock, the calls are the bridge's onTraceEntry, the
// sink's function (a tail call that adds its return address) and these: the sink's wrappers
// took 37.5 instructions an event (a call of their own, the event's source built in memory, the
// two counts and their bounds checks, a second guard), these 2. Measured with bench/cost.py's
// count() for mode none (PyTorch's tracker on the simulated H200, 200 and 1,200 tensors, the
// difference of onTraceEntry's inclusive counts, two processes): 339.3 instructions an event
// before, 296.2 / 296.3 after (docs/performance.md).
void recordTrackerAlloc(int device, uint64_t stream, uint64_t address, uint64_t size,
                        const void* caller) {
  RecursionGuard guard;
  const EventSource source{format::Api::kTorchAllocator, format::Level::kTensor, device, stream,
                           caller};
  Event event(source, Stacks::kAllocation, device, Opening::kInitialized);
  countTrackerEvent(device);
  joinAllocation(event, source, static_cast<uintptr_t>(address), size, /*held=*/false);
}

void recordTrackerFree(int device, uint64_t stream, uint64_t address, const void* caller) {
  RecursionGuard guard;
  const EventSource source{format::Api::kTorchAllocator, format::Level::kTensor, device, stream,
                           caller};
  // Described as recordFree's: the free's device was described at its allocation.
  Event event(source, Stacks::kFree, -1, Opening::kInitialized);
  countTrackerEvent(device);
  leaveAllocation(event, source, static_cast<uintptr_t>(address));
}

uint64_t trackerEventsLocked(int device) {
  return device >= 0 && device < kMaxDevices ? g_recorder.tracker_events[device] : 0;
}

void trackerEventCounts(uint64_t* counts) {
  RecorderLock lock;
  for (int device = 0; device < kMaxDevices; ++device)
    counts[device] = g_recorder.tracker_events[device];
}

namespace {

// A record with the thread's stacks that is no memory event (a read, an answer, an assumption),
// written as an allocation is (one opening, the prelude, the record): `write(time,
// python_stack, native_stack)` writes the record itself. It changes no live bytes and no counter.
template <typename Write>
void recordWithStacks(const EventSource& source, Write write) {
  Event event(source, Stacks::kAllocation, source.device);  // Note [One opening per event]
  if (!event.writing) return;
  uint32_t python_stack = 0, native_stack = 0;
  if (!event.recording.writePrelude(source, source.device, source.level, &python_stack,
                                    &native_stack) ||
      !write(event.time, python_stack, native_stack))
    failWrite();
  afterRecord(event.time);
}

}  // namespace

// Note [The simulated device] (records.h): a read of device values is recorded with its context
// and stacks.
void recordDeviceRead(const RecursionGuard&, const EventSource& source, uint64_t bytes) {
  recordWithStacks(source, [&](uint64_t time, uint32_t python_stack, uint32_t native_stack) {
    return g_recorder.writer.writeDeviceRead(time, bytes, python_stack, native_stack);
  });
}

void recordSimulatedSize(const RecursionGuard&, const EventSource& source,
                         const SimulatedSize& size) {
  recordWithStacks(source, [&](uint64_t time, uint32_t python_stack, uint32_t native_stack) {
    return g_recorder.writer.writeSimulatedSize(time, reinterpret_cast<uintptr_t>(size.address),
                                                size.bytes, size.at_most, size.certainty,
                                                size.question, python_stack, native_stack);
  });
}

void recordAssumedValue(const RecursionGuard&, const EventSource& source, const char* assumed) {
  recordWithStacks(source, [&](uint64_t time, uint32_t python_stack, uint32_t native_stack) {
    return g_recorder.writer.writeAssumedValue(time, assumed, python_stack, native_stack);
  });
}

void setSimulatedDevice(const SimulatedDevice& device) {
  ensureRecorderInitialized();
  RecorderLock lock;
  SimulatedDeviceCopy& copy = g_recorder.simulated;
  snprintf(copy.profile_name, sizeof(copy.profile_name), "%s",
           device.profile_name ? device.profile_name : "");
  snprintf(copy.profile_file, sizeof(copy.profile_file), "%s",
           device.profile_file ? device.profile_file : "");
  copy.memory_bytes = device.memory_bytes;
  copy.memory_set_by_user = device.memory_set_by_user;
  // The reader takes 1 to kMaxDevices devices; the simulated device makes 1 to 64.
  copy.device_count = device.device_count < 1             ? 1
                      : device.device_count > kMaxDevices ? kMaxDevices
                                                          : device.device_count;
  copy.known = true;
  if (!writeSimulatedDeviceIfNew()) failWrite();
}

namespace {

// recordSegment's change, once its event is open (under the recorder's lock).
void applySegment(uint64_t time, bool writing, const SegmentChange& change) {
  bool grows = change.action == format::SegmentAction::kAlloc ||
               change.action == format::SegmentAction::kMap;
  uint64_t size = change.size;
  if (grows) {
    SegmentBlock block{change.size, change.device, change.graph_pool, change.user_pool};
    SegmentBlock* slot = g_recorder.segments.insert(change.address, block);
    if (!slot) return;  // no memory for the table: the recorder can say nothing true of it
    *slot = block;
  } else {
    size = removeSegmentRange(change.address, change.size);
  }
  countReserved(change.device, size, grows);
  // The file says what PyTorch said, even where the table had nothing to take out: a reader
  // replays it by the same rule.
  if (!writing || change.device < 0 || change.device >= kMaxDevices) return;
  if (!writeDeviceIfNew(change.device) ||
      !g_recorder.writer.writeSegment(time, change.action, change.device, change.address,
                                      change.size, change.graph_pool, change.user_pool)) {
    failWrite();
    return;
  }
  afterRecord(time);
}

EventSource segmentSource(int device) {
  return EventSource{format::Api::kTorchAllocator, format::Level::kSegment, device, 0, nullptr};
}

}  // namespace

void recordSegment(const RecursionGuard&, const SegmentChange& change) {
  // Note [One opening per event]; no stacks. The file opens (with its snapshot of the
  // segments) before this change, so that it is written once.
  Event event(segmentSource(change.device), Stacks::kNone, change.device);
  countTrackerEvent(change.device);
  applySegment(event.time, event.writing, change);
}

HeldOutcome recordHeldSegment(const RecursionGuard&, const SegmentChange& change,
                              const HeldCheck& check) {
  Event event(segmentSource(change.device), Stacks::kNone, change.device);
  if (!check.unchanged(check.context, change.device)) return HeldOutcome::kStale;
  // A segment the table has over any part of the range is known: the tracker recorded it.
  bool known = false;
  uint64_t end = change.address + change.size;
  g_recorder.segments.forEach([&](uint64_t start, const SegmentBlock& block) {
    known = known || (start < end && start + block.size > change.address);
  });
  if (known) return HeldOutcome::kKnown;
  applySegment(event.time, event.writing, change);
  return HeldOutcome::kRecorded;
}

HeldOutcome recordHeldAlloc(const RecursionGuard&, const EventSource& source, const void* address,
                            uint64_t size, const HeldCheck& check) {
  // Note [One opening per event], without the calling thread's stacks: they are not its.
  Event event(source, Stacks::kNone, source.device);
  if (!check.unchanged(check.context, source.device)) return HeldOutcome::kStale;
  uintptr_t key = reinterpret_cast<uintptr_t>(address);
  if (g_recorder.live.find(key)) return HeldOutcome::kKnown;
  // Not in the live table, under the lock the event holds: nothing is replaced.
  joinAllocation(event, source, key, size, /*held=*/true);
  return HeldOutcome::kRecorded;
}

void recordFailedAlloc(const RecursionGuard&, const EventSource& source, uint64_t size) {
  Event event(source, Stacks::kAllocation, source.device);  // Note [One opening per event]
  if (!event.writing) return;
  uint64_t time = event.time;
  EventRecording& recording = event.recording;
  uint32_t python_stack = 0, native_stack = 0;
  if (!recording.writePrelude(source, source.device, source.level, &python_stack, &native_stack) ||
      !g_recorder.writer.writeFailedAlloc(time, size, python_stack, native_stack)) {
    failWrite();
    return;
  }
  EventContext context = recording.context(source, source.device, source.level);
  if (g_recorder.config.flight)
    runFailed(time, size, python_stack, native_stack, context, recording.module(),
              recording.traced());
  // Note [Reports the library writes itself].
  writeOutOfMemoryReport(time, size, context, python_stack, recording.module());
  // An OOM is often followed by the process dying: a buffered file writes it now.
  if (!g_recorder.file.mapped() && !g_recorder.file.flush()) failWrite();
}

}  // namespace memtrace
