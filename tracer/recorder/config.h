// The recorder's settings, read from the environment. Every variable is optional; a value
// that cannot be parsed keeps the default and is reported once on stderr.
//
//   MEMTRACE_OUTPUT        trace file; %p becomes the pid          (memtrace-%p.bin)
//   MEMTRACE_STACKS        python | native | all | none            (python)
//   MEMTRACE_PYTHON_DEPTH  Python frames kept, innermost first     (128, at most 256)
//   MEMTRACE_NATIVE_DEPTH  native frames kept, innermost first     (32, at most 256)
//   MEMTRACE_FREE_STACKS   1: frees carry stacks too                (0)
//   MEMTRACE_AUTOSTART     1: trace from load; 0: wait for memtrace_start()
//                          (1 when preloaded, 0 when loaded by dlopen)
//   MEMTRACE_KEEP_TORCH_ALLOCATOR  1: under LD_PRELOAD, leave PyTorch's caching allocator
//                          in front (events are then segments)      (0)
//   MEMTRACE_PYTHON_WALKER api: walk Python frames through the public C API only, never
//                          directly (Note [Python frames without the GIL]): only
//                          threads that hold the GIL are walked then  (auto)
//   MEMTRACE_VERBOSE       1: say on stderr where the trace goes    (0)
#pragma once

#include <cstdint>

#include "tracer/format/records.h"

namespace memtrace {

struct Config {
  char output_pattern[4096];
  format::StackMode stack_mode;
  uint32_t python_depth;
  uint32_t native_depth;
  bool free_stacks;
  int autostart;  // -1: not set
  bool keep_torch_allocator;
  bool verbose;
  bool python_public_api_only;
};

// Reads the environment. Safe to call before main (from a constructor) and at run time.
Config readConfig();

// Writes one line to stderr without allocating ("memtrace: " + message).
void warn(const char* message, const char* detail = nullptr);

}  // namespace memtrace
