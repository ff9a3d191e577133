// Out of memory: the first failed allocation of a trace, what was live on its device at that
// moment by line and by nn.Module, the device's memory and how far over it the request went
// (the report's OOM section). A pure analysis over the event stream, like analysis.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/locations.h"

namespace memtrace::report {

struct OomReport {
  FailedRequest request;
  Location line;       // the request's line, under the report's frame policy
  std::string module;  // the nn.Module that was running ("" none)
  // Live on the request's device (every selected device when it is unknown) at the failure.
  uint64_t live_bytes = 0;
  uint64_t live_allocations = 0;
  LocationTable by_line;
  LocationTable by_module;
  // The device's memory: the simulated card's (kSimulatedDevice) or the device record's total;
  // 0 when the trace does not say.
  uint64_t memory_bytes = 0;
  bool simulated = false;  // memory_bytes is the simulated card's
  // live + request - memory (with memory_bytes): how far over the card the request went;
  // zero or less when the rest of the memory was held outside any allocation call.
  int64_t over_bytes = 0;
};

// The first failed allocation's OOM (a pass over the trace to that point), or nullopt when
// the trace has none (in the summary's window, on a device it selects).
std::optional<OomReport> analyzeOom(reader::TraceReader& trace, const TraceSummary& summary,
                                    FramePolicy frame);

}  // namespace memtrace::report
