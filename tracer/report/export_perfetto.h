// memtrace-report export perfetto: the trace as Chrome trace event JSON.
#pragma once

#include <cstddef>
#include <ostream>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"

namespace memtrace::report {

// Chrome trace event JSON, which Perfetto and chrome://tracing open: a counter track of
// live bytes per device (downsampled, Note [Timeline downsampling]), instant events for
// marks, the peak and failed allocations, and slices for phases.
void exportPerfetto(std::ostream& out, reader::TraceReader& trace, const TraceSummary& summary,
                    size_t buckets);

}  // namespace memtrace::report
