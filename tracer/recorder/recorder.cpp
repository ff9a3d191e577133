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

#include "tracer/format/peak.h"
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
DeviceDescription g_devices[kMaxDevices];  // written once per device, outside g_mutex

// Whether the device's peak rose.
bool countAlloc(int device, uint64_t size) {
  bool rose = false;
  for (int index : {0, counterIndex(device)}) {
    if (index < 0) continue;
    g_current[index] += size;
    rose = format::raisePeak(g_peak[index], g_current[index]);  // Note [New peak]
  }
  return rose;
}

void countFree(int device, uint64_t size) {
  for (int index : {0, counterIndex(device)}) {
    if (index < 0) continue;
    g_current[index] -= size < g_current[index] ? size : g_current[index];
  }
}

// Reserved memory grows or shrinks by `size` on `device` (segments: recordSegment).
void countReserved(int device, uint64_t size, bool grows) {
  for (int index : {0, counterIndex(device)}) {
    if (index < 0) continue;
    uint64_t& reserved = g_reserved[index];
    reserved = grows ? reserved + size : reserved - (size < reserved ? size : reserved);
    if (reserved > g_reserved_peak[index]) g_reserved_peak[index] = reserved;
  }
}

// Takes [address, address + size) out of the live segment table: the ranges inside it go, the
// ones it cuts are trimmed (an expandable segment unmaps pages by the block, not by the mapping
// that made them). Returns the bytes taken out.
uint64_t removeSegmentRange(uintptr_t address, uint64_t size) {
  SegmentBlock removed{};
  if (g_segments.erase(address, &removed)) {
    if (removed.size == size) return size;
    g_segments.insert(address, removed);  // not the same range: trimmed below
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
    g_segments.forEach([&](uint64_t start, const SegmentBlock& block) {
      if (count < 32 && start < end && start + block.size > address) cuts[count++] = {start, block};
    });
    if (count == 0) return taken;
    for (int i = 0; i < count; ++i) {
      Cut& cut = cuts[i];
      g_segments.erase(cut.start);
      uint64_t cut_end = cut.start + cut.block.size;
      uint64_t inside_from = cut.start > address ? cut.start : address;
      uint64_t inside_to = cut_end < end ? cut_end : end;
      taken += inside_to - inside_from;
      if (cut.start < address) {
        SegmentBlock before = cut.block;
        before.size = address - cut.start;
        g_segments.insert(cut.start, before);
      }
      if (cut_end > end) {
        SegmentBlock after = cut.block;
        after.size = cut_end - end;
        g_segments.insert(end, after);
      }
    }
  }
}

void describeDevice(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  DeviceDescription& description = g_devices[device];
  int expected = 0;
  if (description.state.load(std::memory_order_acquire) == 2 ||
      !description.state.compare_exchange_strong(expected, 1))
    return;
  DeviceDescriber describer = g_describer.load(std::memory_order_acquire);
  if (!describer ||
      !describer(device, description.name, sizeof(description.name), &description.total_bytes)) {
    snprintf(description.name, sizeof(description.name), "device %d", device);
    description.total_bytes = 0;
  }
  description.state.store(2, std::memory_order_release);
}

// Writes the device's record once per file. Called with g_mutex held.
bool writeDeviceIfNew(int device) {
  if (g_writer.deviceWritten(device)) return true;
  if (g_devices[device].state.load(std::memory_order_acquire) != 2) return true;
  return g_writer.writeDevice(device, g_devices[device].name, g_devices[device].total_bytes);
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
  return g_tracing.load(std::memory_order_relaxed) && (!is_free || g_config.free_stacks);
}

// `walk_python`: Python stacks are wanted and this thread's can be walked (decided once per
// event: it also decides the GcPause around the public API's walk); `holds_gil`, canWalk's.
Capture captureStacks(bool is_free, const void* caller, bool walk_python, bool holds_gil) {
  Capture capture;
  if (!capturesStacks(is_free)) return capture;
  capture.thread = currentThreadState();
  if (!capture.thread) return capture;
  capture.thread->python_count = 0;
  capture.thread->native_count = 0;
  capture.thread->python_holds_gil = holds_gil;
  if (anyStackLent() && format::wantsPython(g_config.stack_mode))
    capture.graph_task = currentGraphTask();
  if (walk_python) {
    capture.thread->python_count =
        python::captureStack(capture.thread->python_frames, g_config.python_depth);
    capture.python = capture.thread->python_count > 0;
  }
  if (format::wantsNative(g_config.stack_mode)) {
    capture.thread->native_count =
        native::captureStack(capture.thread->native_ips, g_config.native_depth, caller);
    capture.native = capture.thread->native_count > 0;
  }
  return capture;
}

// Gives the thread the stacks lent to the backward it runs, if any (g_mutex held).
void borrowLentStack(Capture* capture) {
  if (!capture->thread || !anyStackLent() || !format::wantsPython(g_config.stack_mode)) return;
  capture->python = borrowLentStacks(*capture->thread, capture->graph_task);
}

// Interns the captured stacks (with g_mutex held). *unknown_object asks the caller to
// refresh the object table once the lock is released.
bool internStacks(const Capture& capture, uint32_t* python_stack, uint32_t* native_stack,
                  bool* unknown_object) {
  bool ok = true;
  *python_stack = capture.python ? g_writer.internPythonStack(*capture.thread, &ok) : 0;
  *native_stack =
      ok && capture.native ? g_writer.internNativeStack(*capture.thread, &ok, unknown_object) : 0;
  return ok;
}

void refreshObjectsIfNeeded(bool unknown_object) {
  if (!unknown_object) return;
  native::refreshObjectTable();
  MutexLock lock;
  if (g_file.isOpen() && !g_writer.writeNewLoadedObjects()) failWrite();
}

// The calling thread's nn.Module, if it changed since the file last said (g_mutex held).
bool writeModuleScope() {
  ThreadState* thread = currentThreadState();
  return !thread || g_writer.writeModuleScope(*thread);
}

pid_t currentThreadId() {
  ThreadState* thread = currentThreadState();
  return thread ? thread->thread_id : 0;
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
  g_config = readConfig();
  strncpy(g_path_pattern, g_config.output_pattern, sizeof(g_path_pattern) - 1);
  bool preloaded = loadedByPreload();
  bool autostart = g_config.autostart >= 0 ? g_config.autostart == 1 : preloaded;
  python::loadApi();
  if (g_config.python_public_api_only) python::usePublicApiOnly();
  if (format::wantsNative(g_config.stack_mode)) native::loadUnwinder();
  installForkHandlers();
  installSnapshotSignal();
  atexit(onExit);
  if (autostart) {
    g_file_wanted = true;
    g_tracing.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

bool loadedByPreload() {
  return pathMentionsSelf(getenv("LD_PRELOAD"));
}

void ensureRecorderInitialized() {
  pthread_once(&g_init_once, initialize);
}

void setDeviceDescriber(DeviceDescriber describer) {
  g_describer.store(describer, std::memory_order_release);
}

namespace {

// Note [Recording scope before the lock]
// Each record function declares its EventRecording before its MutexLock. Locals are
// constructed in order and destroyed in reverse, so that one line fixes three orderings:
//   - the capture (the EventRecording's constructor) runs before g_mutex is taken: the
//     native walk reads the loaded objects under the loader's lock, which is never taken
//     while g_mutex is held (Note [Lock order]); and threads capture in parallel;
//   - the GcPause member outlives the lock: the stacks are interned under g_mutex, and the
//     Python frames' metadata resolved there must not start a collection either
//     (Note [No Python code runs in a hook]);
//   - the object-table refresh (the destructor) runs after g_mutex is released: it takes
//     the loader's lock, then g_mutex itself to write the new loaded objects; with g_mutex still
//     held that would invert the lock order and deadlock on the non-recursive mutex.

// The steps of recording an event before the lock (capture) and the records that go before
// the event itself, shared by allocations, frees and failed allocations.
class EventRecording {
 public:
  EventRecording(const EventSource& source, bool is_free)
      : walk_python_(capturesStacks(is_free) && format::wantsPython(g_config.stack_mode) &&
                     python::canWalk(&holds_gil_)),
        gc_pause_(walk_python_ && holds_gil_),
        capture_(captureStacks(is_free, source.caller, walk_python_, holds_gil_)),
        captured_(capturesStacks(is_free)) {}

  // After the lock is released (Note [Recording scope before the lock]): a native frame
  // outside every known loaded object asks for a refresh of the object table.
  ~EventRecording() { refreshObjectsIfNeeded(unknown_object_); }

  // With g_mutex held: the device (once a file), the context, the thread's module scope and
  // the stacks of the event. False when the file could not take them.
  bool writePrelude(const EventSource& source, int device, format::Level level,
                    uint32_t* python_stack, uint32_t* native_stack) {
    EventContext context{capture_.thread ? capture_.thread->thread_id : currentThreadId(), device,
                         source.stream, source.api, level};
    if (captured_) borrowLentStack(&capture_);
    context_ = context;
    return writeDeviceIfNew(device) && g_writer.setContext(context) && writeModuleScope() &&
           internStacks(capture_, python_stack, native_stack, &unknown_object_);
  }

  // After writePrelude: the context written, and the nn.Module the file says the thread runs.
  const EventContext& context() const { return context_; }
  uint32_t module() const {
    ThreadState* thread = capture_.thread ? capture_.thread : currentThreadState();
    return thread ? RecordWriter::moduleOf(*thread) : 0;
  }
  bool traced() const { return captured_; }

 private:
  bool holds_gil_ = false;  // set by canWalk; before walk_python_, which is initialized after it
  bool walk_python_;
  python::GcPause gc_pause_;  // from before the public API's walk until the stacks are interned
  Capture capture_;
  bool captured_;  // stacks are wanted for this event
  bool unknown_object_ = false;
  EventContext context_{};
};

}  // namespace

// A device memory reading an allocation asks for, taken once g_mutex is released (it is
// declared before the MutexLock): the driver is never called with g_mutex held.
struct DeviceMemoryAfterLock {
  bool due = false;
  ~DeviceMemoryAfterLock() {
    if (due) recordDeviceMemory();
  }
};

void recordAlloc(const RecursionGuard&, const EventSource& source, const void* address,
                 uint64_t size) {
  ensureRecorderInitialized();
  describeDevice(source.device);
  EventRecording recording(source, /*is_free=*/false);  // Note [Recording scope before the lock]
  DeviceMemoryAfterLock device_memory;
  MutexLock lock;
  uint64_t time = monotonicNow();
  // The file opens (with its snapshot of the live table) before this allocation joins the
  // live table, so that it is written once.
  bool writing = ensureFileOpen();
  // The stacks are interned (their records written) before the allocation joins the live
  // table, which keeps them (LiveBlock).
  uint32_t python_stack = 0, native_stack = 0;
  bool prelude_written = writing && recording.writePrelude(source, source.device, source.level,
                                                           &python_stack, &native_stack);
  LiveBlock live{size, static_cast<int16_t>(source.device), source.level, source.api};
  if (writing) {
    live.python_stack = python_stack;
    live.native_stack = native_stack;
    live.module = recording.module();
    live.thread_id = recording.context().thread_id;
    live.stream = source.stream;
    live.traced = g_tracing.load(std::memory_order_relaxed);
    // The flight recorder's number for it (Note [Keeping the peak without its events]).
    if (g_config.flight) live.serial = flightSerial();
  }
  LiveBlock replaced;
  // A free we never saw (freed through a path we do not hook): the new allocation replaces
  // it, by the rule the reader applies too (tracer/format/live_table.h).
  if (g_live.allocate(reinterpret_cast<uintptr_t>(address), live, &replaced) ==
      format::AllocOutcome::kReplaced)
    countFree(replaced.device, replaced.size);
  bool peak_rose = countAlloc(source.device, size);
  if (!writing) return;
  device_memory.due = deviceMemoryDue(source.device, time, peak_rose);
  if (!prelude_written || !g_writer.writeAlloc(time, reinterpret_cast<uintptr_t>(address), size,
                                               python_stack, native_stack)) {
    failWrite();
    return;
  }
  if (g_config.flight && !runAllocated(reinterpret_cast<uintptr_t>(address), live, time)) {
    failWrite();
    return;
  }
  afterRecord(time);
}

void recordFree(const RecursionGuard&, const EventSource& source, const void* address) {
  ensureRecorderInitialized();
  EventRecording recording(source, /*is_free=*/true);  // Note [Recording scope before the lock]
  MutexLock lock;
  uint64_t time = monotonicNow();
  bool writing = ensureFileOpen();
  LiveBlock live;
  if (!g_live.free(reinterpret_cast<uintptr_t>(address), &live)) return;
  countFree(live.device, live.size);
  if (!writing) return;
  uint32_t python_stack = 0, native_stack = 0;
  if (!recording.writePrelude(source, live.device, live.level, &python_stack, &native_stack) ||
      !g_writer.writeFree(time, reinterpret_cast<uintptr_t>(address), python_stack, native_stack)) {
    failWrite();
    return;
  }
  if (g_config.flight) runFreed(reinterpret_cast<uintptr_t>(address), live);
  afterRecord(time);
}

namespace {

// A record with the thread's stacks that is no memory event (a read, an answer, an assumption),
// written as an allocation is (guard, capture outside the lock, lock, write): `write(time,
// python_stack, native_stack)` writes the record itself. It changes no live bytes and no counter.
template <typename Write>
void recordWithStacks(const EventSource& source, Write write) {
  ensureRecorderInitialized();
  describeDevice(source.device);
  EventRecording recording(source, /*is_free=*/false);  // Note [Recording scope before the lock]
  MutexLock lock;
  uint64_t time = monotonicNow();
  if (!ensureFileOpen()) return;
  uint32_t python_stack = 0, native_stack = 0;
  if (!recording.writePrelude(source, source.device, source.level, &python_stack, &native_stack) ||
      !write(time, python_stack, native_stack))
    failWrite();
  afterRecord(time);
}

}  // namespace

// Note [The simulated device] (records.h): a read of device values is recorded with its context
// and stacks.
void recordDeviceRead(const RecursionGuard&, const EventSource& source, uint64_t bytes) {
  recordWithStacks(source, [&](uint64_t time, uint32_t python_stack, uint32_t native_stack) {
    return g_writer.writeDeviceRead(time, bytes, python_stack, native_stack);
  });
}

void recordSimulatedSize(const RecursionGuard&, const EventSource& source,
                         const SimulatedSize& size) {
  recordWithStacks(source, [&](uint64_t time, uint32_t python_stack, uint32_t native_stack) {
    return g_writer.writeSimulatedSize(time, reinterpret_cast<uintptr_t>(size.address), size.bytes,
                                       size.at_most, size.certainty, size.question, python_stack,
                                       native_stack);
  });
}

void recordAssumedValue(const RecursionGuard&, const EventSource& source, const char* assumed) {
  recordWithStacks(source, [&](uint64_t time, uint32_t python_stack, uint32_t native_stack) {
    return g_writer.writeAssumedValue(time, assumed, python_stack, native_stack);
  });
}

void setSimulatedDevice(const SimulatedDevice& device) {
  ensureRecorderInitialized();
  MutexLock lock;
  SimulatedDeviceCopy& copy = g_simulated;
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

void recordSegment(const RecursionGuard&, const SegmentChange& change) {
  ensureRecorderInitialized();
  describeDevice(change.device);
  MutexLock lock;
  uint64_t time = monotonicNow();
  // The file opens (with its snapshot of the segments) before this change, so that it is
  // written once.
  bool writing = ensureFileOpen();
  bool grows = change.action == format::SegmentAction::kAlloc ||
               change.action == format::SegmentAction::kMap;
  uint64_t size = change.size;
  if (grows) {
    SegmentBlock block{change.size, change.device, change.graph_pool, change.user_pool};
    SegmentBlock* slot = g_segments.insert(change.address, block);
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
      !g_writer.writeSegment(time, change.action, change.device, change.address, change.size,
                             change.graph_pool, change.user_pool)) {
    failWrite();
    return;
  }
  afterRecord(time);
}

void recordFailedAlloc(const RecursionGuard&, const EventSource& source, uint64_t size) {
  ensureRecorderInitialized();
  describeDevice(source.device);
  EventRecording recording(source, /*is_free=*/false);  // Note [Recording scope before the lock]
  MutexLock lock;
  uint64_t time = monotonicNow();
  if (!ensureFileOpen()) return;
  uint32_t python_stack = 0, native_stack = 0;
  if (!recording.writePrelude(source, source.device, source.level, &python_stack, &native_stack) ||
      !g_writer.writeFailedAlloc(time, size, python_stack, native_stack)) {
    failWrite();
    return;
  }
  if (g_config.flight)
    runFailed(time, size, python_stack, native_stack, recording.context(), recording.module(),
              recording.traced());
  // Note [Reports the library writes itself].
  writeOutOfMemoryReport(time, size, recording.context(), python_stack, recording.module());
  // An OOM is often followed by the process dying: a buffered file writes it now.
  if (!g_file.mapped() && !g_file.flush()) failWrite();
}

}  // namespace memtrace
