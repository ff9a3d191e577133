// The C API (memtrace.h): what the Python package and C/C++ programs call to drive the
// recorder.
#include <stdio.h>
#include <string.h>

#include "tracer/recorder/flight.h"
#include "tracer/recorder/memtrace.h"
#include "tracer/recorder/native_stack.h"
#include "tracer/recorder/python_stack.h"
#include "tracer/recorder/recorder.h"
#include "tracer/recorder/recorder_state.h"
#include "tracer/recorder/thread_state.h"

using namespace memtrace;
using namespace memtrace::detail;
using format::MarkerKind;

namespace {

// Writes one record through `write` (a marker, or a training record: Note [Training records]):
// under the lock, into the open file, opening it if one is wanted.
template <typename Write>
int writeRecordNow(Write&& write) {
  RecorderLock lock;
  if (!g_recorder.file_wanted) {
    setError("tracing has not started: call memtrace_start() first");
    return -1;
  }
  if (!ensureFileOpen()) return -1;
  uint64_t time = monotonicNow();
  if (!write(time)) {
    failWrite();
    return -1;
  }
  afterRecord(time);
  return 0;
}

int writeMarkerNow(MarkerKind kind, const char* name) {
  return writeRecordNow(
      [&](uint64_t time) { return g_recorder.writer.writeMarker(time, kind, name); });
}

// A per-device counter (g_recorder.current, g_recorder.peak, g_recorder.reserved,
// g_recorder.reserved_peak): device -1 is every device's, one past kMaxDevices none.
uint64_t counterOf(const uint64_t (&counters)[kMaxDevices + 1], int device) {
  RecorderLock lock;
  int index = device < 0 ? 0 : counterIndex(device);
  return index < 0 ? 0 : counters[index];
}

}  // namespace

void memtrace::setLastError(const char* message) {
  RecorderLock lock;
  setError(message);
}

extern "C" {

MEMTRACE_EXPORT int memtrace_start(const char* path) {
  ensureRecorderInitialized();
  // Settings may have changed since load (a Python program sets MEMTRACE_STACKS first).
  // Loading may take the dynamic loader's lock, so it happens before the recorder's lock is taken
  // (Note [Lock order]).
  Config config = readConfig();
  python::loadApi();
  if (config.python_public_api_only) python::usePublicApiOnly();
  if (format::wantsNative(config.stack_mode)) native::loadUnwinder();
  RecorderLock lock;
  // The setting of the running file's stack mode is what its ProcessInfo said; a changed
  // mode applies from the next file on, and to capture at once.
  g_recorder.config = config;
  if (path && *path) {
    char wanted[4096];
    expandPath(path, wanted, sizeof(wanted));
    if (g_recorder.file.isOpen() && strcmp(wanted, g_recorder.file.path()) != 0)
      closeFile(MarkerKind::kTraceClosed);
    strncpy(g_recorder.path_pattern, path, sizeof(g_recorder.path_pattern) - 1);
  } else if (!g_recorder.file.isOpen()) {
    strncpy(g_recorder.path_pattern, config.output_pattern, sizeof(g_recorder.path_pattern) - 1);
  }
  g_recorder.file_wanted = true;
  g_recorder.write_failed = false;
  bool was_open = g_recorder.file.isOpen();
  bool was_tracing = g_recorder.tracing.exchange(true);
  if (!ensureFileOpen()) return -1;
  if (was_open && !was_tracing &&
      !g_recorder.writer.writeMarker(monotonicNow(), MarkerKind::kTracingStarted, nullptr)) {
    failWrite();
    return -1;
  }
  g_recorder.last_error[0] = '\0';
  return 0;
}

MEMTRACE_EXPORT int memtrace_stop(void) {
  ensureRecorderInitialized();
  recordDeviceMemory();  // before the lock: it calls the driver
  RecorderLock lock;
  if (!g_recorder.tracing.exchange(false)) {
    setError("tracing is not running");
    return -1;
  }
  if (g_recorder.file.isOpen()) {
    if (!g_recorder.writer.writeMarker(monotonicNow(), MarkerKind::kTracingStopped, nullptr) ||
        !g_recorder.file.flush()) {
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
    RecorderLock lock;
    ++g_recorder.open_phases;
  }
  return result;
}

MEMTRACE_EXPORT int memtrace_phase_end(void) {
  ensureRecorderInitialized();
  {
    RecorderLock lock;
    if (g_recorder.open_phases == 0) {
      setError("no phase is open");
      return -1;
    }
    --g_recorder.open_phases;
  }
  return writeMarkerNow(MarkerKind::kPhaseEnd, nullptr);
}

MEMTRACE_EXPORT int memtrace_set_category(uint64_t address, int category) {
  ensureRecorderInitialized();
  if (category < 0 || category >= static_cast<int>(format::Category::kCount)) {
    RecorderLock lock;
    setError("memtrace_set_category: the category is not one of memtrace_category's");
    return -1;
  }
  return writeRecordNow([&](uint64_t) {
    // The live table keeps it too: what the library writes itself, and the flight recorder's
    // sections, name it (Note [Keeping the peak without its events]). The file says it already
    // when this allocation was told it (autograd saves one tensor for several ops: 75 of GPT-2's
    // 1,365 categories in a `memtrace run`), so nothing is written again (Note [Records beside the
    // events, shorter]); kUnknown is written whenever told, untold meaning another thing.
    if (LiveBlock* block = g_recorder.live.find(address)) {
      if (block->category == static_cast<format::Category>(category) &&
          block->category != format::Category::kUnknown)
        return true;
      block->category = static_cast<format::Category>(category);
    }
    return g_recorder.writer.writeCategory(static_cast<uintptr_t>(address),
                                           static_cast<format::Category>(category));
  });
}

MEMTRACE_EXPORT int memtrace_set_owner_module(uint64_t address, const char* module) {
  ensureRecorderInitialized();
  if (!module || !*module) {
    RecorderLock lock;
    setError("memtrace_set_owner_module: the module's path is empty");
    return -1;
  }
  return writeRecordNow([&](uint64_t) {
    uint32_t module_id = 0;
    if (!g_recorder.writer.writeOwnerModule(static_cast<uintptr_t>(address), module, &module_id))
      return false;
    // As a category: what the library writes itself, and the flight recorder's sections (which
    // write each live block under its module's scope), name it (Note [Keeping the peak without
    // its events]).
    if (LiveBlock* block = g_recorder.live.find(address)) block->module = module_id;
    return true;
  });
}

MEMTRACE_EXPORT int memtrace_training_phase(int phase) {
  ensureRecorderInitialized();
  if (phase < 0 || phase >= static_cast<int>(format::TrainingPhase::kCount)) {
    RecorderLock lock;
    setError("memtrace_training_phase: the phase is not one of memtrace_training_phase's");
    return -1;
  }
  return writeRecordNow([&](uint64_t time) {
    g_recorder.phase = static_cast<format::TrainingPhase>(phase);
    return g_recorder.writer.writeTrainingPhase(time, static_cast<format::TrainingPhase>(phase));
  });
}

MEMTRACE_EXPORT int memtrace_step_end(uint64_t step) {
  ensureRecorderInitialized();
  if (step == 0) {
    RecorderLock lock;
    setError("memtrace_step_end: steps count from 1");
    return -1;
  }
  // The flight recorder keeps no step's events: it writes the step's peak instead.
  return writeRecordNow([&](uint64_t time) {
    return g_recorder.config.flight ? flightStepEnd(time, step)
                                    : g_recorder.writer.writeStepEnd(time, step);
  });
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
  thread->prelude_epoch = 0;  // its next event writes the scope (RecordWriter::preludeUnchanged)
  return 0;
}

MEMTRACE_EXPORT int memtrace_module_exit(void) {
  ThreadState* thread = currentThreadState();
  if (!thread || thread->module_depth == 0) {
    RecorderLock lock;
    setError("memtrace_module_exit: no module is running on this thread");
    return -1;
  }
  --thread->module_depth;
  ++thread->module_version;
  thread->prelude_epoch = 0;  // its next event writes the scope (RecordWriter::preludeUnchanged)
  return 0;
}

MEMTRACE_EXPORT int memtrace_generated_code(const char* file, int first_line, int line_count,
                                            const char* const* files, const char* const* functions,
                                            const int* lines, int depth) {
  ensureRecorderInitialized();
  RecorderLock lock;
  if (!file || !*file || first_line < 1 || line_count < 1 || depth < 1 || !files || !functions ||
      !lines) {
    setError(
        "memtrace_generated_code: a file, a first line and a line count of 1 or more, and a "
        "source stack of 1 frame or more are needed");
    return -1;
  }
  if (!g_recorder.generated_code.add(file, first_line, line_count, files, functions, lines,
                                     static_cast<size_t>(depth))) {
    setError("memtrace_generated_code: out of memory");
    return -1;
  }
  // Written now when a file is open (the code may run at once); else when one opens.
  if (!g_recorder.file.isOpen()) return 0;
  if (!g_recorder.generated_code.writeLast(g_recorder.writer)) {
    failWrite();
    return -1;
  }
  afterRecord(monotonicNow());
  return 0;
}

MEMTRACE_EXPORT int memtrace_assumed_value(int device, const char* assumed) {
  ensureRecorderInitialized();
  if (!assumed || !*assumed || device < 0 || device >= format::kMaxDevices) {
    memtrace::setLastError("memtrace_assumed_value: a device (0 to 63) and what was assumed");
    return -1;
  }
  {
    RecorderLock lock;
    if (!g_recorder.file_wanted) {
      setError("tracing has not started: call memtrace_start() first");
      return -1;
    }
  }
  if (RecursionGuard::active()) return 0;  // from inside memtrace: not the program's
  RecursionGuard guard;
  recordAssumedValue(guard,
                     EventSource{format::Api::kDeviceRead, format::Level::kTensor, device, 0,
                                 __builtin_return_address(0)},
                     assumed);
  return 0;
}

MEMTRACE_EXPORT int memtrace_hide_python_code(const void* code) {
  if (!code) {
    setError("memtrace_hide_python_code: no code object");
    return -1;
  }
  if (!python::hideCode(code)) {
    setError("memtrace_hide_python_code: memtrace hides as many code objects as it can");
    return -1;
  }
  return 0;
}

MEMTRACE_EXPORT int memtrace_lend_python_stack(int skip) {
  return lendPythonStack(skip > 0 ? static_cast<size_t>(skip) : 0);
}

MEMTRACE_EXPORT void memtrace_end_lent_python_stack(void) {
  endLentPythonStack();
}

MEMTRACE_EXPORT void memtrace_bind_lent_python_stack(int lend) {
  bindLentPythonStack(lend);
}

MEMTRACE_EXPORT int memtrace_flush(void) {
  ensureRecorderInitialized();
  RecorderLock lock;
  if (!g_recorder.file.isOpen()) {
    setError("no trace file is open");
    return -1;
  }
  if (!g_recorder.file.flush()) {
    failWrite();
    return -1;
  }
  return 0;
}

MEMTRACE_EXPORT int memtrace_close(void) {
  ensureRecorderInitialized();
  RecorderLock lock;
  g_recorder.tracing.store(false);
  g_recorder.file_wanted = false;
  g_recorder.open_phases = 0;
  if (!g_recorder.file.isOpen()) return 0;
  closeFile(MarkerKind::kTraceClosed);
  return g_recorder.write_failed ? -1 : 0;
}

MEMTRACE_EXPORT int memtrace_is_tracing(void) {
  return g_recorder.tracing.load(std::memory_order_relaxed) ? 1 : 0;
}

MEMTRACE_EXPORT const char* memtrace_output_path(void) {
  RecorderLock lock;
  return g_recorder.file.path();
}

MEMTRACE_EXPORT uint64_t memtrace_current_bytes(int device) {
  return counterOf(g_recorder.current, device);
}

MEMTRACE_EXPORT uint64_t memtrace_peak_bytes(int device) {
  return counterOf(g_recorder.peak, device);
}

MEMTRACE_EXPORT void memtrace_reset_peak(int device) {
  RecorderLock lock;
  for (int index = 0; index <= kMaxDevices; ++index)
    if (device < 0 || index == counterIndex(device)) {
      g_recorder.peak[index] = g_recorder.current[index];
      g_recorder.reserved_peak[index] = g_recorder.reserved[index];
    }
}

MEMTRACE_EXPORT uint64_t memtrace_reserved_bytes(int device) {
  return counterOf(g_recorder.reserved, device);
}

MEMTRACE_EXPORT uint64_t memtrace_peak_reserved_bytes(int device) {
  return counterOf(g_recorder.reserved_peak, device);
}

MEMTRACE_EXPORT const char* memtrace_diagnostics(void) {
  static char text[128];
  RecorderLock lock;
  snprintf(text, sizeof(text), "python-walker=%s unwinder=%s", python::walkerName(),
           native::unwinderName());
  return text;
}

MEMTRACE_EXPORT const char* memtrace_last_error(void) {
  return g_recorder.last_error;
}

}  // extern "C"
