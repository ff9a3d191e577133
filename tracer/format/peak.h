// The peak's rule, written once for both sides of the file, as live_table.h is the live set's:
// the recorder keeps the peak counters (memtrace_peak_bytes, mem_tracer.max_memory_allocated)
// by it in the traced process, and the reader finds by it, offline, the trace's peak, each
// device's, each training step's and the timeline's, so that all of them agree.
//
// Note [New peak]
// ~~~~~~~~~~~~~~~
// The peak is the most bytes live at once. It is checked after every allocation, since a free
// can only lower the live bytes, and only a strictly higher count is a new peak: where the live
// bytes come back to the peak later, the peak stays at the first allocation that reached it (the
// report's peak event, and what was live there, are that allocation's).
#pragma once

#include <cstdint>

namespace memtrace::format {

// After an allocation left `live` bytes live: whether that is a new peak (Note [New peak]);
// `peak` is raised to it if so.
inline bool raisePeak(uint64_t& peak, uint64_t live) {
  if (live <= peak) return false;
  peak = live;
  return true;
}

}  // namespace memtrace::format
