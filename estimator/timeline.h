#pragma once

#include <vector>

#include "estimator/graph.h"
#include "estimator/passes/assign_lifetimes.h"

namespace memtrace::estimator {

// One allocation or release of an activation storage, in program order. Weights and inputs
// are on the device before the first node and never appear here; host storages never do.
struct TimelineEvent {
  NodeId node;
  MemoryEventKind kind;
  StorageId storage;
  bool inside_node;  // false: released after the node returned, by the lifetime rules
};

// Each node's own events, then the releases its completion triggers.
std::vector<TimelineEvent> buildTimeline(const Graph& graph, const Lifetimes& lifetimes);

}  // namespace memtrace::estimator
