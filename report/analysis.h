// The analyses behind memtrace-report: pure functions over a trace's event stream.
//   summarize()   first pass: the exact peak (checked after every allocation), totals, counts
//   liveSetAt()   second pass: what was live at a point (the peak, the end, an OOM, a time)
// Both hold only the live set in memory, never the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reader/reader.h"

namespace memtrace::report {

// Which bytes count: one device's, or all devices' together.
inline constexpr int kAllDevices = -1;

// Whether `device`'s bytes count under the filter (kAllDevices or a device index).
inline bool selected(int filter, int device) {
  return filter == kAllDevices || filter == device;
}

struct DeviceSummary {
  int device = -1;
  std::string name;          // from the trace's device record, "" if none
  uint64_t total_bytes = 0;  // the device's memory, 0 if unknown
  uint64_t peak_bytes = 0;
  uint64_t peak_event = 0;
  uint64_t peak_time_ns = 0;
  uint64_t allocated_bytes = 0;
  uint64_t end_bytes = 0;
};

struct MarkerSummary {
  uint64_t time_ns;
  format::MarkerKind kind;
  std::string name;
};

struct TraceSummary {
  reader::ProcessInfo process;
  uint64_t file_bytes = 0;
  uint64_t cut_offset = 0;     // a partial last chunk began here (0: none)
  bool ended_cleanly = false;  // a process-exit or trace-closed mark was written
  int device_filter = kAllDevices;

  // For the bytes selected by device_filter:
  uint64_t peak_bytes = 0;  // the high-water mark of live bytes
  uint64_t peak_event = 0;  // the allocation that reached it first (its index)
  uint64_t peak_time_ns = 0;
  uint64_t end_bytes = 0;        // live at the end of the trace
  uint64_t allocated_bytes = 0;  // all allocations summed

  uint64_t events = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t failed_allocations = 0;
  uint64_t untraced_allocations = 0;  // written while tracing was stopped (or before it began)
  uint64_t unmatched_frees = 0;       // frees of addresses not live (should be 0)
  uint64_t replaced_allocations = 0;  // allocations over a live address (should be 0)
  uint64_t first_failed_event = UINT64_MAX;
  uint64_t duration_ns = 0;
  bool segment_level = false;  // some events are segments of PyTorch's caching allocator
  bool tensor_level = false;

  std::vector<DeviceSummary> devices;  // every device seen, by index
  std::vector<MarkerSummary> markers;  // annotations and phases, in order

  // The report covers the first `window_events` events (Until::kLastStop); UINT64_MAX: all.
  uint64_t window_events = UINT64_MAX;
  uint64_t window_end_ns = 0;  // the time of the mark that ends the window
};

// How far into the trace a report looks.
enum class Until {
  kEnd,  // the whole trace
  // Up to the last "tracing stopped" mark, if tracing was stopped and not started again:
  // what a program traced between start_tracing() and stop_tracing(), without what it
  // allocated afterwards (still written, untraced, so that a later start stays right).
  kLastStop,
};

// Pass 1.
TraceSummary summarize(reader::TraceReader& trace, int device_filter = kAllDevices,
                       Until until = Until::kEnd);

// A point of the trace to look at the live set.
struct Point {
  enum class Kind { kPeak, kEnd, kOom, kTime } kind = Kind::kPeak;
  uint64_t time_ns = 0;  // for kTime: since the trace's start
};

// One allocation live at the point.
struct LiveAllocation {
  uint64_t address;
  uint64_t size;
  uint32_t python_stack;
  uint32_t native_stack;
  int device;
  bool traced;
  uint32_t module;  // string id of the nn.Module path (0: none)
};

struct LiveSet {
  Point point;
  uint64_t event = 0;    // the last event replayed
  uint64_t time_ns = 0;  // its time
  uint64_t bytes = 0;
  std::vector<LiveAllocation> allocations;
};

// Pass 2. Throws reader::TraceError when the point does not exist (no OOM in the trace).
LiveSet liveSetAt(reader::TraceReader& trace, const TraceSummary& summary, Point point);

// Whether a replay to `point` stops before `event`: the event lies past the point, or past
// the summary's window. (A failed allocation changes no live set: the OOM point includes
// it.)
bool pastPoint(const TraceSummary& summary, const Point& point, const reader::Event& event);

}  // namespace memtrace::report
