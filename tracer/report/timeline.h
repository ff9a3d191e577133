// The live-bytes timeline of a trace, downsampled so that a view of any trace stays small:
// a pure analysis over the event stream, like summarize() and liveSetAt(). The HTML report
// draws it (stacked by source location) and the Perfetto export writes it as counters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/locations.h"

namespace memtrace::report {

// Note [Timeline downsampling]
// A trace can hold tens of millions of events; a browser draws a few thousand points
// comfortably. The trace's duration is cut into `buckets` equal spans of time, and each
// span that saw events keeps up to three of them, in time order: the one after which the
// live bytes were lowest, the one after which they were highest (the first to get there),
// and the last one. So
//   - the exact peak survives (it is the highest point of its span), and so does every
//     span's trough, which a max-only envelope would hide;
//   - a span's last value is what the line holds across the quiet spans after it;
//   - the output has at most 3 * buckets samples, whatever the trace's size.
// Each sample carries the live bytes split by lane (the top locations and "other"), taken
// at that same event, so the stacked areas add up to the total at every sample.

struct TimelineSample {
  uint64_t time_ns = 0;
  uint64_t event = 0;  // the event after which the bytes were measured
  uint64_t bytes = 0;
  std::vector<uint64_t> lanes;  // bytes per lane; sums to `bytes`
};

struct TimelineMark {
  uint64_t time_ns = 0;
  format::MarkerKind kind = format::MarkerKind::kAnnotation;
  std::string name;
};

struct TimelineFailure {
  uint64_t time_ns = 0;
  uint64_t size = 0;  // the allocation CUDA refused
};

struct Timeline {
  // Lane names: the top locations of the table the lanes were taken from, then "other"
  // when the table has more rows than lanes.
  std::vector<std::string> lanes;
  std::vector<TimelineSample> samples;    // in time order, starting at 0 bytes at time 0
  std::vector<TimelineMark> marks;        // every marker: tracing on/off, annotations, phases
  std::vector<TimelineFailure> failures;  // failed allocations (out of memory)
  uint64_t duration_ns = 0;
  uint64_t bucket_ns = 0;  // the span of time one bucket covers
  uint64_t peak_bytes = 0;
  uint64_t peak_time_ns = 0;
  uint64_t peak_event = 0;
  // When the first traced allocation was made (duration_ns if none was): the page opens its
  // view there, past a trace's untraced start (allocations made before tracing began).
  uint64_t first_traced_ns = 0;
  uint64_t events = 0;  // events replayed
};

struct TimelineOptions {
  size_t buckets = 2000;
  // Lanes are the first `lanes` rows of `table` (grouped as `locator` groups); every other
  // allocation goes to "other". 0 lanes: one lane, "all". A table grouped by category gets a
  // lane per category, each allocation in its category for its whole life (told later or not).
  size_t lanes = 10;
};

// The marks of a training trace: each training phase (forward, backward, optimizer) a band
// (kPhaseBegin / kPhaseEnd named after it), each step's end an annotation "step N".

// One pass over `trace` (the bytes `summary.device_filter` selects). `locator` must group
// as `table` was grouped; its names assign allocations to lanes.
Timeline computeTimeline(reader::TraceReader& trace, const TraceSummary& summary, Locator& locator,
                         const LocationTable& table, const TimelineOptions& options);

}  // namespace memtrace::report
