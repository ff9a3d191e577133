// Sizes the simulated GPU's libraries answered without knowing them (Note [Sizes in the trace]
// in tracer/format/records.h), by source line: where a simulated run's peak holds a figure
// nobody measured, and how much larger it could be.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/locations.h"

namespace memtrace::report {

struct SimulatedSizeRow {
  Location location;
  std::string library;   // "cuFFT"
  std::string call;      // "cufftXtMakePlanMany"
  std::string shapes;    // the question's shapes, JSON
  uint64_t count = 0;    // answers given there
  uint64_t bytes = 0;    // the largest answered
  uint64_t at_most = 0;  // the largest upper figure (UINT64_MAX: one had none)
  format::Certainty certainty = format::Certainty::kExact;  // the least sure
};

// The summary's answers by line (under `frame`) and question, the largest first. Reads the trace
// again only when its tables lack a stack the answers name (as deviceReadRows does).
std::vector<SimulatedSizeRow> simulatedSizeRows(reader::TraceReader& trace,
                                                const TraceSummary& summary, FramePolicy frame);

}  // namespace memtrace::report
