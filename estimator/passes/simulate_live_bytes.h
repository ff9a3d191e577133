#pragma once

#include <cstdint>
#include <vector>

#include "estimator/graph.h"
#include "estimator/timeline.h"

namespace memtrace::estimator {

// The activation peak in exact bytes: what a tracker counting live tensor storages would see
// (weights, inputs and allocator workspaces excluded, no rounding).
struct LiveBytesPeak {
  int64_t peak_bytes = 0;
  NodeId peak_node;  // the node during which the peak is reached
  std::vector<StorageId> live_at_peak;
};

LiveBytesPeak simulateLiveBytes(const Graph& graph, const std::vector<TimelineEvent>& timeline);

// The storages live once the first `events` events of the timeline have happened.
std::vector<StorageId> liveAfter(const Graph& graph, const std::vector<TimelineEvent>& timeline,
                                 size_t events);

}  // namespace memtrace::estimator
