#include "estimator/estimate.h"

#include <map>

#include "estimator/passes/count_flops.h"
#include "estimator/timeline.h"

namespace memtrace::estimator {

namespace {

std::vector<UnknownOp> collectUnknownOps(const Graph& graph) {
  std::vector<UnknownOp> unknown;
  std::map<std::string, size_t> positions;
  for (const Assumption& assumption : graph.assumptions) {
    if (assumption.kind != AssumptionKind::UnknownOp) continue;
    auto [entry, inserted] = positions.try_emplace(assumption.op, unknown.size());
    if (inserted) unknown.push_back({assumption.op, 0, assumption.stack, assumption.detail});
    unknown[entry->second].count += 1;
  }
  return unknown;
}

}  // namespace

Estimate estimateMemory(Graph& graph, const EstimateOptions& options) {
  Estimate estimate;
  estimate.semantics = options.semantics;
  for (const Storage& storage : graph.storages) {
    switch (storage.origin) {
      case StorageOrigin::Parameter:
        estimate.parameterBytes += storage.bytes;
        break;
      case StorageOrigin::Buffer:
        estimate.bufferBytes += storage.bytes;
        break;
      case StorageOrigin::Constant:
        estimate.constantBytes += storage.bytes;
        break;
      case StorageOrigin::Input:
        estimate.inputBytes += storage.bytes;
        break;
      case StorageOrigin::Activation:
      case StorageOrigin::Host:
        break;
    }
  }
  countFlops(graph);
  for (const Node& node : graph.nodes) estimate.totalFlops += node.flops;

  Lifetimes lifetimes = assignLifetimes(graph, options.semantics);
  std::vector<TimelineEvent> timeline = buildTimeline(graph, lifetimes);
  estimate.activations = simulateLiveBytes(graph, timeline);
  estimate.allocator =
      replayCachingAllocator(graph, timeline, options.profile, options.memoryLimitBytes);
  estimate.attribution = attributePeak(graph, estimate.activations.liveAtPeak);
  estimate.unknownOps = collectUnknownOps(graph);
  estimate.lowerBound = graph.lowerBound();
  return estimate;
}

}  // namespace memtrace::estimator
