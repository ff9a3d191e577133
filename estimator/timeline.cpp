#include "estimator/timeline.h"

namespace memtrace::estimator {

std::vector<TimelineEvent> buildTimeline(const Graph& graph, const Lifetimes& lifetimes) {
  std::vector<std::vector<StorageId>> releasedAfterNode(graph.nodes.size());
  for (size_t index = 0; index < lifetimes.releasedAfter.size(); ++index) {
    NodeId node = lifetimes.releasedAfter[index];
    if (node.valid()) releasedAfterNode[node.value].push_back(StorageId(index));
  }
  std::vector<TimelineEvent> timeline;
  timeline.reserve(graph.nodes.size() * 3);
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    NodeId node(index);
    for (const MemoryEvent& event : graph.nodes[index].events) {
      if (graph.storage(event.storage).origin != StorageOrigin::Activation) continue;
      timeline.push_back({node, event.kind, event.storage, true});
    }
    for (StorageId storage : releasedAfterNode[index]) {
      timeline.push_back({node, MemoryEventKind::Release, storage, false});
    }
  }
  return timeline;
}

}  // namespace memtrace::estimator
