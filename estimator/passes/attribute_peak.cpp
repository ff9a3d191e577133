#include "estimator/passes/attribute_peak.h"

#include <algorithm>
#include <map>

// Note [Two groupings by line]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The tracer charges each allocation to the innermost Python frame that was running, and can
// also charge it to the innermost frame in the user's own code (isUserCode()). For a tensor
// made by F.linear inside nn.Linear.forward the first is torch/nn/modules/linear.py, the second
// the line of the model that called the layer. The estimator offers both, keyed the same way
// (absolute file, line, function), so a report can put measured and predicted side by side
// under either key. A node's stack comes from the IR: the inlined call stack of a scripted
// model, the Python stack a traced model recorded.

namespace memtrace::estimator {

namespace {

std::vector<LiveGroup> sortedGroups(std::vector<LiveGroup> groups) {
  std::stable_sort(groups.begin(), groups.end(), [](const LiveGroup& left, const LiveGroup& right) {
    return left.bytes > right.bytes;
  });
  return groups;
}

template <typename Key>
void charge(std::map<Key, LiveGroup>& groups, const Key& key, LiveGroup prototype, int64_t bytes) {
  auto [entry, inserted] = groups.try_emplace(key, std::move(prototype));
  entry->second.bytes += bytes;
  entry->second.tensors += 1;
}

template <typename Key>
std::vector<LiveGroup> collect(const std::map<Key, LiveGroup>& groups) {
  std::vector<LiveGroup> result;
  for (const auto& [key, group] : groups) result.push_back(group);
  return sortedGroups(std::move(result));
}

}  // namespace

PeakAttribution attributePeak(const Graph& graph, const std::vector<StorageId>& live) {
  std::map<SourceFrame, LiveGroup> byFrame;
  std::map<SourceFrame, LiveGroup> byUserFrame;
  std::map<std::string, LiveGroup> byModule;
  PeakAttribution attribution;
  for (StorageId id : live) {
    const Storage& storage = graph.storage(id);
    if (storage.bytes == 0) continue;
    attribution.storages.push_back(id);
    std::vector<SourceFrame> noStack;
    const Node* producer = storage.producer.valid() ? &graph.node(storage.producer) : nullptr;
    const std::vector<SourceFrame>& stack = producer ? producer->stack : noStack;
    SourceFrame frame = innermostFrame(stack);
    SourceFrame userFrame = innermostUserFrame(stack);
    std::string module = producer ? producer->modulePath : std::string();
    charge(byFrame, frame, LiveGroup{frame, {}, 0, 0}, storage.bytes);
    charge(byUserFrame, userFrame, LiveGroup{userFrame, {}, 0, 0}, storage.bytes);
    charge(byModule, module, LiveGroup{{}, module, 0, 0}, storage.bytes);
  }
  std::stable_sort(attribution.storages.begin(), attribution.storages.end(),
                   [&](StorageId left, StorageId right) {
                     return graph.storage(left).bytes > graph.storage(right).bytes;
                   });
  attribution.byFrame = collect(byFrame);
  attribution.byUserFrame = collect(byUserFrame);
  attribution.byModule = collect(byModule);
  return attribution;
}

}  // namespace memtrace::estimator
