// The estimator's analyses, run in order over a neutral graph (Note [The neutral graph]).
#pragma once

#include <array>
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
  Semantics semantics = Semantics::kEager;
  DeviceProfile profile;
  std::optional<int64_t> memory_limit_bytes;  // replay on a device of this size (for --budget)
};

// Ops whose outputs could not be sized, counted by op name (AssumptionKind::kUnknownOp).
struct UnknownOp {
  std::string op;
  int64_t count = 0;
  std::vector<SourceFrame> first_stack;
  std::string detail;
};

// An eager figure resting on names the front end could not recover (Graph::unnamed_values):
// the true eager activation peak lies between `low` (their values freed at last use, or the
// torchscript figure if lower) and `high` (held until their function returns).
struct EagerBracket {
  int64_t low = 0;
  int64_t high = 0;
  int64_t at_last_use = 0;  // the peak with every value freed at its last use in this graph
  size_t unnamed_values = 0;
};

// Calls the recording could not run as the device does (AssumptionKind::kApproximate: cuDNN's
// RNN reserve, Note [cuDNN's RNN reserve, bracketed] in device_kernels.py): the peak may lie up
// to `under_by` above the figure or `over_by` below it, each the sum over the calls.
struct ApproximateBracket {
  int64_t over_by = 0;
  int64_t under_by = 0;
  size_t calls = 0;
};

// A training step's peak (Graph::training_step): every storage live at once, the persistent
// ones (parameters and buffers, optimizer state, inputs) and those the step allocated, by
// category, and the node where it is reached (with its phase and module). The step's own
// storages peak where the activations do, since the persistent ones do not change.
struct TrainingPeak {
  int64_t peak_bytes = 0;
  std::array<int64_t, static_cast<size_t>(format::Category::kCount)> by_category{};
  NodeId node;

  int64_t bytesOf(format::Category category) const {
    return by_category[static_cast<size_t>(category)];
  }
};

struct Estimate {
  Semantics semantics = Semantics::kEager;
  int64_t parameter_bytes = 0;
  int64_t buffer_bytes = 0;
  int64_t constant_bytes = 0;
  int64_t input_bytes = 0;
  int64_t optimizer_state_bytes = 0;  // training steps
  LiveBytesPeak activations;          // exact live activation bytes, and where they peak
  AllocatorReplay allocator;          // what the caching allocator would report
  PeakAttribution attribution;        // what is live at the activation peak
  // What is live where requested_bytes peaks, library workspaces included, and the weights by
  // module (Note [Workspaces on their lines]).
  PeakAttribution requested_attribution;
  int64_t total_flops = 0;
  std::vector<UnknownOp> unknown_ops;
  bool lower_bound = false;                   // some sizes are unknown: the true peak may be higher
  std::optional<EagerBracket> eager_bracket;  // eager only, when names are missing
  std::optional<ApproximateBracket> approximate;  // kernels not run as the device does
  std::optional<TrainingPeak> training;           // training steps only

  int64_t weightBytes() const { return parameter_bytes + buffer_bytes + constant_bytes; }
};

// Runs countFlops (which annotates the graph), assignLifetimes, simulateLiveBytes,
// replayCachingAllocator and attributePeak.
Estimate estimateMemory(Graph& graph, const EstimateOptions& options);

}  // namespace memtrace::estimator
