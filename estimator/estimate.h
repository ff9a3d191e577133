// The estimator's analyses, run in order over a neutral graph (Note [The neutral graph]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "estimator/device_profile.h"
#include "estimator/graph.h"
#include "estimator/passes/assign_lifetimes.h"
#include "estimator/passes/attribute_peak.h"
#include "estimator/passes/replay_caching_allocator.h"
#include "estimator/passes/simulate_live_bytes.h"

namespace memtrace::estimator {

struct EstimateOptions {
  Semantics semantics = Semantics::Eager;
  DeviceProfile profile;
  std::optional<int64_t> memoryLimitBytes;  // replay on a device of this size (for --budget)
};

// Ops whose outputs could not be sized, counted by op name (Assumption::UnknownOp).
struct UnknownOp {
  std::string op;
  int64_t count = 0;
  std::vector<SourceFrame> firstStack;
  std::string detail;
};

struct Estimate {
  Semantics semantics = Semantics::Eager;
  int64_t parameterBytes = 0;
  int64_t bufferBytes = 0;
  int64_t constantBytes = 0;
  int64_t inputBytes = 0;
  LiveBytesPeak activations;    // exact live activation bytes, and where they peak
  AllocatorReplay allocator;    // what the caching allocator would report
  PeakAttribution attribution;  // what is live at the activation peak
  int64_t totalFlops = 0;
  std::vector<UnknownOp> unknownOps;
  bool lowerBound = false;  // some sizes are unknown: the true peak may be higher

  int64_t weightBytes() const { return parameterBytes + bufferBytes + constantBytes; }
};

// Runs countFlops (which annotates the graph), assignLifetimes, simulateLiveBytes,
// replayCachingAllocator and attributePeak.
Estimate estimateMemory(Graph& graph, const EstimateOptions& options);

}  // namespace memtrace::estimator
