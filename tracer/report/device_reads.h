// Reads of device values on the simulated device (Note [The simulated device] in
// tracer/format/records.h), by source line: where a simulated run may stop being the card's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/locations.h"

namespace memtrace::report {

struct DeviceReadRow {
  Location location;
  uint64_t count = 0;  // reads made there
  uint64_t bytes = 0;
};

// Values the simulated run assumed at one line, and what (Note [Values where they decide the
// path]).
struct AssumedValueRow {
  Location location;
  std::string assumed;
  uint64_t count = 0;
};

// The summary's reads by line (under `frame`), the most frequent first. Reads the trace again
// only when its tables, as the last pass left them, lack a stack the reads name (a pass that
// stopped at a point before them): right after summarize() it reads nothing.
std::vector<DeviceReadRow> deviceReadRows(reader::TraceReader& trace, const TraceSummary& summary,
                                          FramePolicy frame);
// The summary's assumed values by line (under `frame`) and what was assumed, the most frequent
// first; as deviceReadRows, it reads the trace again only when the tables lack a stack.
std::vector<AssumedValueRow> assumedValueRows(reader::TraceReader& trace,
                                              const TraceSummary& summary, FramePolicy frame);

}  // namespace memtrace::report
