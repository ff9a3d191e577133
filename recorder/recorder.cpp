#include "recorder/recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <initializer_list>

#include "recorder/config.h"
#include "common/flat_map.h"
#include "recorder/memtrace.h"
#include "recorder/native_stack.h"
#include "recorder/python_stack.h"
#include "recorder/record_writer.h"
#include "recorder/thread_state.h"
#include "recorder/trace_file.h"

// Note [Lock order]
// Three locks are involved in recording, always taken in this order:
//   recorder (g_mutex)  ->  module table (native_stack.cpp)
//   dynamic loader      ->  module table
// The recorder's lock is never held while taking the loader's (dl_iterate_phdr, dlopen,
// libunwind's unwinding, which reads the loaded objects): those all run in the capture step
// or after the lock is released. A library constructor that allocates CUDA memory while
// the loader holds its lock therefore cannot deadlock against a thread that records.
// Python's GIL is never taken by us: stacks are walked only by a thread that already holds
// it, and a thread that holds the GIL while it waits for our lock is always inside a hook
// that will not ask for the GIL either.

namespace memtrace {
namespace {

using format::MarkerKind;

constexpr int kMaxDevices = 64;  // devices past this are counted only in the total

struct LiveAllocation {
  uint64_t size;
  int16_t device;
  format::Level level;
  format::Api api;
};

struct DeviceDescription {
  std::atomic<int> state;  // 0 unknown, 1 being asked, 2 known
  char name[256];
  uint64_t total_bytes;
};

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_once_t g_init_once = PTHREAD_ONCE_INIT;

// Everything below is guarded by g_mutex unless it says otherwise.
Config g_config;
TraceFile g_file;
RecordWriter g_writer(g_file);
FlatMap<uint64_t, LiveAllocation> g_live;
uint64_t g_current[kMaxDevices + 1];  // [0]: all devices; [d + 1]: device d
uint64_t g_peak[kMaxDevices + 1];
bool g_file_wanted = false;  // a file should be open (started, or autostart)
bool g_write_failed = false;  // writing failed; nothing is written until the next start
bool g_exiting = false;       // after exit began, every record is written through
bool g_flusher_running = false;
int g_open_phases = 0;
char g_path_pattern[4096];  // the pattern the next file opens with
char g_last_error[512];

std::atomic<bool> g_tracing{false};  // capture stacks (read without the lock)
std::atomic<DeviceDescriber> g_describer{nullptr};
DeviceDescription g_devices[kMaxDevices];

uint64_t monotonicNow() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return uint64_t(now.tv_sec) * 1000000000u + uint64_t(now.tv_nsec);
}

void setError(const char* message, const char* detail = nullptr) {
  snprintf(g_last_error, sizeof(g_last_error), "%s%s", message, detail ? detail : "");
}

class MutexLock {
 public:
  MutexLock() { pthread_mutex_lock(&g_mutex); }
  ~MutexLock() { pthread_mutex_unlock(&g_mutex); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
};

int counterIndex(int device) { return device >= 0 && device < kMaxDevices ? device + 1 : -1; }

void countAlloc(int device, uint64_t size) {
  for (int index : {0, counterIndex(device)}) {
    if (index < 0) continue;
    g_current[index] += size;
    if (g_current[index] > g_peak[index]) g_peak[index] = g_current[index];
  }
}

void countFree(int device, uint64_t size) {
  for (int index : {0, counterIndex(device)}) {
    if (index < 0) continue;
    g_current[index] -= size < g_current[index] ? size : g_current[index];
  }
}

// Expands %p to the pid.
void expandPath(const char* pattern, char* out, size_t out_size) {
  char pid[24];
  snprintf(pid, sizeof(pid), "%d", getpid());
  size_t used = 0;
  for (const char* p = pattern; *p && used + 24 < out_size; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      used += snprintf(out + used, out_size - used, "%s", pid);
      ++p;
    } else {
      out[used++] = *p;
    }
  }
  out[used] = '\0';
}

void failWrite() {
  char detail[600];
  snprintf(detail, sizeof(detail), "%s: %s; recording stopped, the program goes on",
           g_file.path(), strerror(g_file.lastErrno() ? g_file.lastErrno() : EIO));
  warn("cannot write the trace file ", detail);
  setError("cannot write the trace file ", detail);
  g_file.abandon();
  g_write_failed = true;
  g_tracing.store(false, std::memory_order_relaxed);
}

// After writing a record: in the exit path, write it through at once.
void afterRecord() {
  if (g_exiting && g_file.isOpen() && !g_file.flush()) failWrite();
}

size_t readCommandLine(char* out, size_t size) {
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t used = 0;
  for (ssize_t n; used < size && (n = read(fd, out + used, size - used)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    used += static_cast<size_t>(n);
  }
  close(fd);
  while (used && out[used - 1] == '\0') --used;  // the last argument's terminator
  return used;
}

void* flusherMain(void*);

void startFlusher() {
  if (g_flusher_running) return;
  // The flusher must not take signals meant for the program's threads.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 64 << 10);
  if (pthread_create(&thread, &attributes, flusherMain, nullptr) == 0) g_flusher_running = true;
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

// Opens the trace file if one is wanted and none is open: header, process information,
// modules, then every allocation live now (as untraced: the file's live bytes are right
// from its first event), then the start mark if tracing. Called with g_mutex held.
bool ensureFileOpen() {
  if (g_file.isOpen()) return true;
  if (!g_file_wanted || g_write_failed) return false;
  char path[4096];
  expandPath(g_path_pattern, path, sizeof(path));
  const char* error = nullptr;
  TraceFile::OpenResult result = g_file.open(path, &error);
  if (result == TraceFile::OpenResult::kBusy) {
    // Another process is writing there (Note [Which process owns a trace file]).
    size_t length = strlen(path);
    snprintf(path + length, sizeof(path) - length, ".%d", getpid());
    result = g_file.open(path, &error);
    if (result == TraceFile::OpenResult::kBusy) error = "locked by another process";
  }
  if (result != TraceFile::OpenResult::kOpened) {
    char detail[4200];
    snprintf(detail, sizeof(detail), "%s: %s; the program goes on untraced", path, error);
    warn("cannot open the trace file ", detail);
    setError("cannot open the trace file ", detail);
    g_write_failed = true;
    g_tracing.store(false, std::memory_order_relaxed);
    return false;
  }
  if (g_config.verbose) warn("tracing to ", path);

  uint64_t start = monotonicNow();
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  static char command_line[format::kMaxStringBytes];
  static char executable[4096];
  static char host_name[256];
  ssize_t executable_size = readlink("/proc/self/exe", executable, sizeof(executable) - 1);
  executable[executable_size > 0 ? executable_size : 0] = '\0';
  if (gethostname(host_name, sizeof(host_name)) != 0) host_name[0] = '\0';
  host_name[sizeof(host_name) - 1] = '\0';

  g_writer.beginFile(start);
  ProcessInfo info{};
  info.pid = getpid();
  info.parent_pid = getppid();
  info.start_unix_ns = uint64_t(wall.tv_sec) * 1000000000u + uint64_t(wall.tv_nsec);
  info.start_monotonic_ns = start;
  info.command_line = command_line;
  info.command_line_size = readCommandLine(command_line, sizeof(command_line));
  info.executable = executable;
  info.host_name = host_name;
  info.stack_mode = g_config.stack_mode;
  info.python_depth = g_config.python_depth;
  info.native_depth = g_config.native_depth;
  info.free_stacks = g_config.free_stacks;
  bool ok = g_writer.writeProcessInfo(info);
  if (ok && format::wantsNative(g_config.stack_mode)) ok = g_writer.writeNewModules();

  // The snapshot, device by device so that the context changes once per device.
  EventContext context{0, -1, 0, format::Api::kSnapshot, format::Level::kTensor};
  for (int device = -1; ok && device < kMaxDevices; ++device) {
    g_live.forEach([&](uint64_t address, const LiveAllocation& live) {
      int live_device = live.device >= 0 && live.device < kMaxDevices ? live.device : -1;
      if (!ok || live_device != device) return;
      context.device = live.device;
      context.level = live.level;
      ok = g_writer.setContext(context) && g_writer.writeAlloc(start, address, live.size, 0, 0);
    });
  }
  if (ok && g_tracing.load(std::memory_order_relaxed))
    ok = g_writer.writeMarker(start, MarkerKind::kTracingStarted, nullptr);
  if (!ok) {
    failWrite();
    return false;
  }
  startFlusher();
  return true;
}

void closeFile(MarkerKind why) {
  if (!g_file.isOpen()) return;
  if (!g_writer.writeMarker(monotonicNow(), why, nullptr) || !g_file.close()) failWrite();
}

void* flusherMain(void*) {
  timespec interval{0, 100 * 1000 * 1000};  // the bound: flushed at least every 100 ms
  for (;;) {
    nanosleep(&interval, nullptr);
    MutexLock lock;
    if (g_file.isOpen() && g_file.hasPendingBytes() && !g_file.flush()) failWrite();
  }
  return nullptr;
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
};

// Whether this event's stacks are captured at all (tracing, and frees only when asked).
bool capturesStacks(bool is_free) {
  return g_tracing.load(std::memory_order_relaxed) && (!is_free || g_config.free_stacks);
}

// `walk_python`: the thread holds the GIL and Python stacks are wanted (decided once per
// event: it also decides the GcPause around the walk).
Capture captureStacks(bool is_free, const void* caller, bool walk_python) {
  Capture capture;
  if (!capturesStacks(is_free)) return capture;
  capture.thread = currentThreadState();
  if (!capture.thread) return capture;
  capture.thread->python_count = 0;
  capture.thread->native_count = 0;
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

// Interns the captured stacks (with g_mutex held). *unknown_module asks the caller to
// refresh the module table once the lock is released.
bool internStacks(const Capture& capture, uint32_t* python_stack, uint32_t* native_stack,
                  bool* unknown_module) {
  bool ok = true;
  *python_stack = capture.python ? g_writer.internPythonStack(*capture.thread, &ok) : 0;
  *native_stack =
      ok && capture.native ? g_writer.internNativeStack(*capture.thread, &ok, unknown_module) : 0;
  return ok;
}

void refreshModulesIfNeeded(bool unknown_module) {
  if (!unknown_module) return;
  native::refreshModuleTable();
  MutexLock lock;
  if (g_file.isOpen() && !g_writer.writeNewModules()) failWrite();
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

void onExit() {
  MutexLock lock;
  if (g_file.isOpen()) {
    if (!g_writer.writeMarker(monotonicNow(), MarkerKind::kProcessExit, nullptr) ||
        !g_file.flush())
      failWrite();
  }
  // Teardown frees after this point (static destructors, CUDA context teardown) are still
  // recorded, each written through.
  g_exiting = true;
}

void forkPrepare() {
  pthread_mutex_lock(&g_mutex);
  native::Module* ignored;
  native::lockModules(&ignored);
}

void forkParent() {
  native::unlockModules();
  pthread_mutex_unlock(&g_mutex);
}

void forkChild() {
  native::unlockModules();
  pthread_mutex_init(&g_mutex, nullptr);
  // The parent's buffer and file are the parent's: drop them unwritten. The child traces
  // into a file of its own, opened at its first event.
  g_file.abandon();
  g_flusher_running = false;
  g_write_failed = false;
  g_open_phases = 0;
  resetThreadIdAfterFork();
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
  pthread_atfork(forkPrepare, forkParent, forkChild);
  atexit(onExit);
  if (autostart) {
    g_file_wanted = true;
    g_tracing.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

bool loadedByPreload() { return pathMentionsSelf(getenv("LD_PRELOAD")); }

void ensureRecorderInitialized() { pthread_once(&g_init_once, initialize); }

void setDeviceDescriber(DeviceDescriber describer) {
  g_describer.store(describer, std::memory_order_release);
}

namespace {

// The steps of recording an event before the lock (capture) and the records that go before
// the event itself, shared by allocations, frees and failed allocations.
class EventRecording {
 public:
  EventRecording(const EventSource& source, bool is_free)
      : walk_python_(capturesStacks(is_free) && format::wantsPython(g_config.stack_mode) &&
                     python::threadHoldsGil()),
        gc_pause_(walk_python_),
        capture_(captureStacks(is_free, source.caller, walk_python_)) {}

  // After the lock is released: a native frame outside every known module asks for a
  // refresh of the module table (which takes the loader's lock: Note [Lock order]).
  ~EventRecording() { refreshModulesIfNeeded(unknown_module_); }

  // With g_mutex held: the device (once a file), the context, the thread's module scope and
  // the stacks of the event. False when the file could not take them.
  bool writePrelude(const EventSource& source, int device, format::Level level,
                    uint32_t* python_stack, uint32_t* native_stack) {
    EventContext context{capture_.thread ? capture_.thread->thread_id : currentThreadId(), device,
                         source.stream, source.api, level};
    return writeDeviceIfNew(device) && g_writer.setContext(context) && writeModuleScope() &&
           internStacks(capture_, python_stack, native_stack, &unknown_module_);
  }

 private:
  bool walk_python_;
  python::GcPause gc_pause_;  // from before the Python walk until the stacks are interned
  Capture capture_;
  bool unknown_module_ = false;
};

}  // namespace

void recordAlloc(const RecursionGuard&, const EventSource& source, const void* address,
                 uint64_t size) {
  ensureRecorderInitialized();
  describeDevice(source.device);
  EventRecording recording(source, /*is_free=*/false);
  MutexLock lock;
  uint64_t time = monotonicNow();
  // The file opens (with its snapshot of the live table) before this allocation joins the
  // live table, so that it is written once.
  bool writing = ensureFileOpen();
  LiveAllocation live{size, static_cast<int16_t>(source.device), source.level, source.api};
  bool inserted = false;
  LiveAllocation* slot = g_live.insert(reinterpret_cast<uintptr_t>(address), live, &inserted);
  if (slot && !inserted) {
    // A free we never saw (freed through a path we do not hook): the new allocation replaces
    // it. The reader does the same (docs/trace-format.md).
    countFree(slot->device, slot->size);
    *slot = live;
  }
  countAlloc(source.device, size);
  if (!writing) return;
  uint32_t python_stack = 0, native_stack = 0;
  if (!recording.writePrelude(source, source.device, source.level, &python_stack, &native_stack) ||
      !g_writer.writeAlloc(time, reinterpret_cast<uintptr_t>(address), size, python_stack,
                           native_stack))
    failWrite();
  afterRecord();
}

void recordFree(const RecursionGuard&, const EventSource& source, const void* address) {
  ensureRecorderInitialized();
  EventRecording recording(source, /*is_free=*/true);
  MutexLock lock;
  uint64_t time = monotonicNow();
  bool writing = ensureFileOpen();
  LiveAllocation live;
  if (!g_live.erase(reinterpret_cast<uintptr_t>(address), &live)) return;
  countFree(live.device, live.size);
  if (!writing) return;
  uint32_t python_stack = 0, native_stack = 0;
  if (!recording.writePrelude(source, live.device, live.level, &python_stack, &native_stack) ||
      !g_writer.writeFree(time, reinterpret_cast<uintptr_t>(address), python_stack, native_stack))
    failWrite();
  afterRecord();
}

void recordFailedAlloc(const RecursionGuard&, const EventSource& source, uint64_t size) {
  ensureRecorderInitialized();
  describeDevice(source.device);
  EventRecording recording(source, /*is_free=*/false);
  MutexLock lock;
  uint64_t time = monotonicNow();
  if (!ensureFileOpen()) return;
  uint32_t python_stack = 0, native_stack = 0;
  if (!recording.writePrelude(source, source.device, source.level, &python_stack, &native_stack) ||
      !g_writer.writeFailedAlloc(time, size, python_stack, native_stack))
    failWrite();
  // An OOM is often followed by the process dying: get it on disk now.
  else if (!g_file.flush())
    failWrite();
}

}  // namespace memtrace

// ---- The C API (memtrace.h) ----------------------------------------------------------

using namespace memtrace;

namespace {

int writeMarkerNow(MarkerKind kind, const char* name) {
  MutexLock lock;
  if (!g_file_wanted) {
    setError("tracing has not started: call memtrace_start() first");
    return -1;
  }
  if (!ensureFileOpen()) return -1;
  if (!g_writer.writeMarker(monotonicNow(), kind, name)) {
    failWrite();
    return -1;
  }
  afterRecord();
  return 0;
}

}  // namespace

extern "C" {

MEMTRACE_EXPORT int memtrace_start(const char* path) {
  ensureRecorderInitialized();
  // Settings may have changed since load (a Python program sets MEMTRACE_STACKS first).
  Config config = readConfig();
  python::loadApi();
  if (config.python_public_api_only) python::usePublicApiOnly();
  if (format::wantsNative(config.stack_mode)) native::loadUnwinder();
  MutexLock lock;
  // The setting of the running file's stack mode is what its ProcessInfo said; a changed
  // mode applies from the next file on, and to capture at once.
  g_config = config;
  if (path && *path) {
    char wanted[4096];
    expandPath(path, wanted, sizeof(wanted));
    if (g_file.isOpen() && strcmp(wanted, g_file.path()) != 0) closeFile(MarkerKind::kTraceClosed);
    strncpy(g_path_pattern, path, sizeof(g_path_pattern) - 1);
  } else if (!g_file.isOpen()) {
    strncpy(g_path_pattern, config.output_pattern, sizeof(g_path_pattern) - 1);
  }
  g_file_wanted = true;
  g_write_failed = false;
  bool was_open = g_file.isOpen();
  bool was_tracing = g_tracing.exchange(true);
  if (!ensureFileOpen()) return -1;
  if (was_open && !was_tracing &&
      !g_writer.writeMarker(monotonicNow(), MarkerKind::kTracingStarted, nullptr)) {
    failWrite();
    return -1;
  }
  g_last_error[0] = '\0';
  return 0;
}

MEMTRACE_EXPORT int memtrace_stop(void) {
  ensureRecorderInitialized();
  MutexLock lock;
  if (!g_tracing.exchange(false)) {
    setError("tracing is not running");
    return -1;
  }
  if (g_file.isOpen()) {
    if (!g_writer.writeMarker(monotonicNow(), MarkerKind::kTracingStopped, nullptr) ||
        !g_file.flush()) {
      failWrite();
      return -1;
    }
  }
  return 0;
}

MEMTRACE_EXPORT int memtrace_annotate(const char* name) {
  ensureRecorderInitialized();
  return writeMarkerNow(MarkerKind::kAnnotation, name ? name : "");
}

MEMTRACE_EXPORT int memtrace_phase_begin(const char* name) {
  ensureRecorderInitialized();
  int result = writeMarkerNow(MarkerKind::kPhaseBegin, name ? name : "");
  if (result == 0) {
    MutexLock lock;
    ++g_open_phases;
  }
  return result;
}

MEMTRACE_EXPORT int memtrace_phase_end(void) {
  ensureRecorderInitialized();
  {
    MutexLock lock;
    if (g_open_phases == 0) {
      setError("no phase is open");
      return -1;
    }
    --g_open_phases;
  }
  return writeMarkerNow(MarkerKind::kPhaseEnd, nullptr);
}

MEMTRACE_EXPORT int memtrace_module_enter(const char* path) {
  ThreadState* thread = currentThreadState();
  if (!thread) return -1;
  if (thread->module_depth < kMaxModuleDepth) {
    size_t length = path ? strnlen(path, kMaxModulePath - 1) : 0;
    memcpy(thread->module_paths[thread->module_depth], path ? path : "", length);
    thread->module_lengths[thread->module_depth] = static_cast<uint32_t>(length);
  }
  ++thread->module_depth;
  ++thread->module_version;
  return 0;
}

MEMTRACE_EXPORT int memtrace_module_exit(void) {
  ThreadState* thread = currentThreadState();
  if (!thread || thread->module_depth == 0) {
    MutexLock lock;
    setError("memtrace_module_exit: no module is running on this thread");
    return -1;
  }
  --thread->module_depth;
  ++thread->module_version;
  return 0;
}

MEMTRACE_EXPORT int memtrace_flush(void) {
  ensureRecorderInitialized();
  MutexLock lock;
  if (!g_file.isOpen()) {
    setError("no trace file is open");
    return -1;
  }
  if (!g_file.flush()) {
    failWrite();
    return -1;
  }
  return 0;
}

MEMTRACE_EXPORT int memtrace_close(void) {
  ensureRecorderInitialized();
  MutexLock lock;
  g_tracing.store(false);
  g_file_wanted = false;
  g_open_phases = 0;
  if (!g_file.isOpen()) return 0;
  closeFile(MarkerKind::kTraceClosed);
  return g_write_failed ? -1 : 0;
}

MEMTRACE_EXPORT int memtrace_is_tracing(void) {
  return g_tracing.load(std::memory_order_relaxed) ? 1 : 0;
}

MEMTRACE_EXPORT const char* memtrace_output_path(void) {
  MutexLock lock;
  return g_file.path();
}

MEMTRACE_EXPORT uint64_t memtrace_current_bytes(int device) {
  MutexLock lock;
  int index = device < 0 ? 0 : counterIndex(device);
  return index < 0 ? 0 : g_current[index];
}

MEMTRACE_EXPORT uint64_t memtrace_peak_bytes(int device) {
  MutexLock lock;
  int index = device < 0 ? 0 : counterIndex(device);
  return index < 0 ? 0 : g_peak[index];
}

MEMTRACE_EXPORT void memtrace_reset_peak(int device) {
  MutexLock lock;
  for (int index = 0; index <= kMaxDevices; ++index)
    if (device < 0 || index == counterIndex(device)) g_peak[index] = g_current[index];
}

MEMTRACE_EXPORT const char* memtrace_diagnostics(void) {
  static char text[128];
  MutexLock lock;
  snprintf(text, sizeof(text), "python-walker=%s unwinder=%s", python::walkerName(),
           native::unwinderName());
  return text;
}

MEMTRACE_EXPORT const char* memtrace_last_error(void) { return g_last_error; }

}  // extern "C"
