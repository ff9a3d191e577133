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
  std::map<SourceFrame, LiveGroup> by_frame;
  std::map<SourceFrame, LiveGroup> by_user_frame;
  std::map<std::string, LiveGroup> by_module;
  PeakAttribution attribution;
  for (StorageId id : live) {
    const Storage& storage = graph.storage(id);
    if (storage.bytes == 0) continue;
    attribution.storages.push_back(id);
    std::vector<SourceFrame> no_stack;
    const Node* producer = storage.producer.valid() ? &graph.node(storage.producer) : nullptr;
    const std::vector<SourceFrame>& stack = producer ? producer->stack : no_stack;
    SourceFrame frame = innermostFrame(stack);
    SourceFrame user_frame = innermostUserFrame(stack);
    std::string module = producer ? producer->module_path : std::string();
    charge(by_frame, frame, LiveGroup{frame, {}, 0, 0}, storage.bytes);
    charge(by_user_frame, user_frame, LiveGroup{user_frame, {}, 0, 0}, storage.bytes);
    charge(by_module, module, LiveGroup{{}, module, 0, 0}, storage.bytes);
  }
  std::stable_sort(attribution.storages.begin(), attribution.storages.end(),
                   [&](StorageId left, StorageId right) {
                     return graph.storage(left).bytes > graph.storage(right).bytes;
                   });
  attribution.by_frame = collect(by_frame);
  attribution.by_user_frame = collect(by_user_frame);
  attribution.by_module = collect(by_module);
  return attribution;
}

}  // namespace memtrace::estimator
