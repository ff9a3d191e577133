#include "estimator/estimate.h"

#include <algorithm>
#include <map>

#include "estimator/passes/count_flops.h"
#include "estimator/timeline.h"

namespace memtrace::estimator {

namespace {

std::vector<UnknownOp> collectUnknownOps(const Graph& graph) {
  std::vector<UnknownOp> unknown;
  std::map<std::string, size_t> positions;
  for (const Assumption& assumption : graph.assumptions) {
    if (assumption.kind != AssumptionKind::kUnknownOp) continue;
    auto [entry, inserted] = positions.try_emplace(assumption.op, unknown.size());
    if (inserted) unknown.push_back({assumption.op, 0, assumption.stack, assumption.detail});
    unknown[entry->second].count += 1;
  }
  return unknown;
}

TrainingPeak trainingPeak(const Graph& graph, const LiveBytesPeak& activations) {
  TrainingPeak peak;
  auto add = [&](const Storage& storage) {
    peak.by_category[static_cast<size_t>(storage.category)] += storage.bytes;
    peak.peak_bytes += storage.bytes;
  };
  for (const Storage& storage : graph.storages) {
    if (storage.origin != StorageOrigin::kActivation && storage.origin != StorageOrigin::kHost) {
      add(storage);
    }
  }
  for (StorageId storage : activations.live_at_peak) add(graph.storage(storage));
  peak.node = activations.peak_node;
  return peak;
}

}  // namespace

Estimate estimateMemory(Graph& graph, const EstimateOptions& options) {
  Estimate estimate;
  estimate.semantics = options.semantics;
  for (const Storage& storage : graph.storages) {
    switch (storage.origin) {
      case StorageOrigin::kParameter:
        estimate.parameter_bytes += storage.bytes;
        break;
      case StorageOrigin::kBuffer:
        estimate.buffer_bytes += storage.bytes;
        break;
      case StorageOrigin::kConstant:
        estimate.constant_bytes += storage.bytes;
        break;
      case StorageOrigin::kInput:
        estimate.input_bytes += storage.bytes;
        break;
      case StorageOrigin::kOptimizerState:
        estimate.optimizer_state_bytes += storage.bytes;
        break;
      case StorageOrigin::kActivation:
      case StorageOrigin::kHost:
        break;
    }
  }
  countFlops(graph);
  for (const Node& node : graph.nodes) estimate.total_flops += node.flops;

  Lifetimes lifetimes = assignLifetimes(graph, options.semantics);
  std::vector<TimelineEvent> timeline = buildTimeline(graph, lifetimes);
  estimate.activations = simulateLiveBytes(graph, timeline);
  estimate.allocator =
      replayCachingAllocator(graph, timeline, options.profile, options.memory_limit_bytes);
  estimate.attribution = attributePeak(graph, estimate.activations.live_at_peak);
  estimate.requested_attribution = attributeRequestedPeak(
      graph, liveAfter(graph, timeline, estimate.allocator.peak_requested_events),
      estimate.allocator.peak_requested_workspaces);
  if (options.semantics == Semantics::kEager && !graph.unnamed_values.empty()) {
    auto peak_with = [&](const Lifetimes& other) {
      return simulateLiveBytes(graph, buildTimeline(graph, other)).peak_bytes;
    };
    EagerBracket bracket;
    bracket.at_last_use = peak_with(assignLifetimes(graph, Semantics::kTorchScript));
    bracket.low = std::min(estimate.activations.peak_bytes, bracket.at_last_use);
    bracket.high = std::max(estimate.activations.peak_bytes,
                            peak_with(assignLifetimes(graph, Semantics::kEager, true)));
    bracket.unnamed_values = graph.unnamed_values.size();
    estimate.eager_bracket = bracket;
  }
  if (graph.training_step) estimate.training = trainingPeak(graph, estimate.activations);
  estimate.unknown_ops = collectUnknownOps(graph);
  for (const Assumption& assumption : graph.assumptions) {
    if (assumption.kind != AssumptionKind::kApproximate) continue;
    if (!estimate.approximate) estimate.approximate = ApproximateBracket{};
    estimate.approximate->over_by += assumption.over_by_at_most;
    estimate.approximate->under_by += assumption.under_by_at_most;
    estimate.approximate->calls += 1;
  }
  estimate.lower_bound = graph.lowerBound();
  return estimate;
}

}  // namespace memtrace::estimator
