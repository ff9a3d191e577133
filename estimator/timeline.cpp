#include "estimator/timeline.h"

namespace memtrace::estimator {

std::vector<TimelineEvent> buildTimeline(const Graph& graph, const Lifetimes& lifetimes) {
  std::vector<std::vector<StorageId>> released_after_node(graph.nodes.size());
  for (size_t index = 0; index < lifetimes.released_after.size(); ++index) {
    NodeId node = lifetimes.released_after[index];
    if (node.valid()) released_after_node[node.value].push_back(StorageId(index));
  }
  std::vector<TimelineEvent> timeline;
  timeline.reserve(graph.nodes.size() * 3);
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    NodeId node(index);
    for (const MemoryEvent& event : graph.nodes[index].events) {
      if (graph.storage(event.storage).origin != StorageOrigin::kActivation) continue;
      timeline.push_back({node, event.kind, event.storage, true});
    }
    for (StorageId storage : released_after_node[index]) {
      timeline.push_back({node, MemoryEventKind::kRelease, storage, false});
    }
  }
  return timeline;
}

}  // namespace memtrace::estimator
