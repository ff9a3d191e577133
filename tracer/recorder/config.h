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
//   MEMTRACE_TORCH_TRACKER 0: record PyTorch's caching allocator by its segments only, without
//                          the bridge that records its tensors from inside it (Note
//                          [PyTorch's own allocator], tracer/format/records.h)   (1)
//   MEMTRACE_TORCH_BRIDGE  the bridge's file, instead of libmemtrace-torch-<release>.so
//                          beside libmemtrace.so
//   MEMTRACE_PYTHON_WALKER api: walk Python frames through the public C API only, never
//                          directly (Note [Python frames without the GIL]): only
//                          threads that hold the GIL are walked then  (auto)
//   MEMTRACE_VERBOSE       1: say on stderr where the trace goes    (0)
//   MEMTRACE_MODE          full: every event; flight: a file the size of what is live, with
//                          the peak, the last events and the steps (Note [The flight
//                          recorder's file], tracer/format/records.h)   (full)
//   MEMTRACE_FLIGHT_EVENTS the events a flight file keeps at least    (1000000)
//   MEMTRACE_MAP_FILE      0: write the trace through a buffer, never into a mapping of the
//                          file (Note [Records reach the page cache as they are written])  (1)
//   MEMTRACE_SNAPSHOT_SIGNAL  the signal that writes a snapshot of what is live beside the
//                          trace (Note [Reports the library writes itself]): USR1, USR2 or
//                          none; installed only where the program left the signal at its
//                          default                                  (USR1)
//   MEMTRACE_OOM_REPORT    0: no report of a failed allocation beside the trace   (1)
//   MEMTRACE_TIME_RESOLUTION  us | ns: the unit of the times in the trace (Note [Times in
//                          microseconds], tracer/format/records.h)   (us)
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
  bool torch_tracker;
  bool verbose;
  bool python_public_api_only;
  bool flight;             // MEMTRACE_MODE=flight
  uint64_t flight_events;  // N: the events a flight file keeps at least
  bool map_file;           // write into a mapping of the file where it can
  int snapshot_signal;     // 0: none
  bool oom_report;
  uint32_t time_unit_ns;  // 1000 (us) or 1 (ns)
};

// Reads the environment. Safe to call before main (from a constructor) and at run time.
Config readConfig();

// Writes one line to stderr without allocating ("memtrace: " + message).
void warn(const char* message, const char* detail = nullptr);

}  // namespace memtrace
