// Out of memory: the first failed allocation of a trace, what was live on its device at that
// moment by line and by nn.Module, the device's memory and how far over it the request went
// (the report's OOM section). A pure analysis over the event stream, like analysis.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  // live + request - memory (with memory_bytes; reserved + request - memory where PyTorch's
  // segments are known): how far over the card the request went; zero or less when the rest of
  // the memory was held outside any allocation call.
  int64_t over_bytes = 0;

  // PyTorch's caching allocator at the failure (kSegment records, Note [PyTorch's own
  // allocator]), on the request's device: what it had reserved, the bytes of its segments no
  // live tensor covered, and the longest such stretch in one segment. The stretches are
  // measured between tensors' requested sizes: PyTorch rounds each block up (to 512 bytes, and
  // keeps up to 1 MiB unsplit behind a large one), so the longest stretch is an upper bound of
  // the largest block it could hand out; one smaller than the request is why a request under
  // the free memory failed (fragmentation).
  bool torch_segments = false;
  uint64_t reserved_bytes = 0;
  uint64_t free_in_segments_bytes = 0;
  uint64_t largest_free_bytes = 0;
  // The segments with the most free bytes (at most kPinnedSegments), each with the lines of
  // the tensors that keep it from being given back.
  struct PinnedSegment {
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t free_bytes = 0;
    uint64_t largest_free_bytes = 0;
    LocationTable pinned_by;
  };
  static constexpr size_t kPinnedSegments = 5;
  std::vector<PinnedSegment> segments;
};

// The first failed allocation's OOM (a pass over the trace to that point), or nullopt when
// the trace has none (in the summary's window, on a device it selects).
std::optional<OomReport> analyzeOom(reader::TraceReader& trace, const TraceSummary& summary,
                                    FramePolicy frame);

}  // namespace memtrace::report
