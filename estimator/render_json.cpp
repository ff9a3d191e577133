#include <nlohmann/json.hpp>

#include "estimator/render.h"

namespace memtrace::estimator {

namespace {

using nlohmann::json;

constexpr int kFormatVersion = 1;

json frameJson(const SourceFrame& frame) {
  if (!frame.known()) return nullptr;
  return {{"file", frame.file}, {"line", frame.line}, {"function", frame.function}};
}

json stackJson(const std::vector<SourceFrame>& stack) {
  json frames = json::array();
  for (const SourceFrame& frame : stack) {
    frames.push_back({{"file", frame.file}, {"line", frame.line}, {"function", frame.function}});
  }
  return frames;
}

// Where a node comes from, in the keys the report joins on (Note [Two groupings by line]).
void addLocation(json& object, const Node& node) {
  object["module_path"] = node.modulePath;
  object["frame"] = frameJson(innermostFrame(node.stack));
  object["user_frame"] = frameJson(innermostUserFrame(node.stack));
}

json nodeJson(const Graph& graph, NodeId id) {
  if (!id.valid()) return nullptr;
  const Node& node = graph.node(id);
  json object = {{"node_index", id.value}, {"op", node.op}};
  addLocation(object, node);
  object["stack"] = stackJson(node.stack);
  return object;
}

json groupsJson(const std::vector<LiveGroup>& groups, bool byModule) {
  json list = json::array();
  for (const LiveGroup& group : groups) {
    json entry = byModule ? json{{"module_path", group.modulePath}} : frameJson(group.frame);
    if (entry.is_null()) entry = {{"file", nullptr}, {"line", nullptr}, {"function", nullptr}};
    entry["bytes"] = group.bytes;
    entry["tensors"] = group.tensors;
    list.push_back(std::move(entry));
  }
  return list;
}

// The first value on each storage: what a tensor "is" when listing storages.
std::vector<ValueId> firstValueOfStorage(const Graph& graph) {
  std::vector<ValueId> first(graph.storages.size());
  for (size_t index = 0; index < graph.values.size(); ++index) {
    StorageId storage = graph.values[index].storage;
    if (storage.valid() && !first[storage.value].valid()) first[storage.value] = ValueId(index);
  }
  return first;
}

json summaryJson(const Estimate& estimate) {
  const AllocatorReplay& allocator = estimate.allocator;
  json bound = nullptr;
  if (allocator.convolutionWorkspaceBoundBytes > 0)
    bound = allocator.convolutionWorkspaceBoundBytes;
  return {
      {"parameter_bytes", estimate.parameterBytes},
      {"buffer_bytes", estimate.bufferBytes},
      {"constant_bytes", estimate.constantBytes},
      {"weight_bytes", estimate.weightBytes()},
      {"input_bytes", estimate.inputBytes},
      {"activation_peak_requested_bytes", estimate.activations.peakBytes},
      {"peak_delta_allocated_bytes",
       allocator.peakAllocatedBytes - allocator.baselineAllocatedBytes},
      {"baseline_requested_bytes", allocator.baselineRequestedBytes},
      {"baseline_allocated_bytes", allocator.baselineAllocatedBytes},
      {"baseline_reserved_bytes", allocator.baselineReservedBytes},
      {"peak_requested_bytes", allocator.peakRequestedBytes},
      {"peak_allocated_bytes", allocator.peakAllocatedBytes},
      {"peak_reserved_bytes", allocator.peakReservedBytes},
      {"cublas_workspace_bytes", allocator.cublasWorkspaceBytes},
      {"convolution_workspace_bound_bytes", bound},
      {"segments", allocator.segments},
      {"total_flops", estimate.totalFlops},
  };
}

json profileJson(const DeviceProfile& profile) {
  json bound = nullptr;
  if (profile.convolutionWorkspaceBoundBytes) bound = *profile.convolutionWorkspaceBoundBytes;
  return {{"name", profile.name},
          {"description", profile.description},
          {"cublas_workspace_bytes", profile.cublasWorkspaceBytes},
          {"convolution_workspace_bound_bytes", bound}};
}

json inputsJson(const Graph& graph) {
  json inputs = json::array();
  for (ValueId id : graph.inputs) {
    const Value& value = graph.value(id);
    inputs.push_back({{"shape", value.shape},
                      {"dtype", value.dtype},
                      {"bytes", value.storage.valid() ? graph.storage(value.storage).bytes : 0}});
  }
  return inputs;
}

const char* assumptionKindName(AssumptionKind kind) {
  switch (kind) {
    case AssumptionKind::UnknownOp:
      return "unknown_op";
    case AssumptionKind::DataDependentBranch:
      return "data_dependent_branch";
    case AssumptionKind::DataDependentLoop:
      return "data_dependent_loop";
    case AssumptionKind::UnsizedDependency:
      return "unsized_dependency";
    case AssumptionKind::Semantics:
      return "semantics";
  }
  return "unknown";
}

json estimateJson(const Graph& graph, const Estimate& estimate, const RenderOptions& options) {
  json document;
  document["format"] = "memtrace-estimate";
  document["version"] = kFormatVersion;
  document["model"] = options.modelPath;
  document["semantics"] = semanticsName(estimate.semantics);
  document["device_profile"] = profileJson(options.profile);
  document["inputs"] = inputsJson(graph);
  document["lower_bound"] = estimate.lowerBound;
  document["summary"] = summaryJson(estimate);

  json peak = nodeJson(graph, estimate.activations.peakNode);
  if (peak.is_null()) peak = json::object();
  peak["live_activation_bytes"] = estimate.activations.peakBytes;
  peak["by_frame"] = groupsJson(estimate.attribution.byFrame, false);
  peak["by_user_frame"] = groupsJson(estimate.attribution.byUserFrame, false);
  peak["by_module"] = groupsJson(estimate.attribution.byModule, true);
  json tensors = json::array();
  std::vector<ValueId> firstValue = firstValueOfStorage(graph);
  for (StorageId id : estimate.attribution.storages) {
    const Storage& storage = graph.storage(id);
    json tensor = {{"bytes", storage.bytes}};
    if (firstValue[id.value].valid()) {
      const Value& value = graph.value(firstValue[id.value]);
      tensor["shape"] = value.shape;
      tensor["dtype"] = value.dtype;
    }
    if (storage.producer.valid()) {
      tensor["node_index"] = storage.producer.value;
      tensor["op"] = graph.node(storage.producer).op;
      addLocation(tensor, graph.node(storage.producer));
    }
    tensors.push_back(std::move(tensor));
  }
  peak["tensors"] = std::move(tensors);
  document["peak"] = std::move(peak);
  document["allocated_peak"] = nodeJson(graph, estimate.allocator.peakAllocatedNode);
  document["cublas_workspace_node"] = nodeJson(graph, estimate.allocator.cublasWorkspaceNode);

  json flops = json::array();
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    const Node& node = graph.nodes[index];
    if (node.flops == 0) continue;
    json entry = {{"node_index", index}, {"op", node.op}, {"flops", node.flops}};
    addLocation(entry, node);
    flops.push_back(std::move(entry));
  }
  document["flops"] = std::move(flops);

  json unknown = json::array();
  for (const UnknownOp& op : estimate.unknownOps) {
    unknown.push_back({{"op", op.op},
                       {"count", op.count},
                       {"frame", frameJson(innermostFrame(op.firstStack))},
                       {"user_frame", frameJson(innermostUserFrame(op.firstStack))},
                       {"detail", op.detail}});
  }
  document["unknown_ops"] = std::move(unknown);

  json assumptions = json::array();
  for (const Assumption& assumption : graph.assumptions) {
    if (assumption.kind == AssumptionKind::UnknownOp) continue;
    assumptions.push_back({{"kind", assumptionKindName(assumption.kind)},
                           {"op", assumption.op},
                           {"frame", frameJson(innermostFrame(assumption.stack))},
                           {"user_frame", frameJson(innermostUserFrame(assumption.stack))},
                           {"detail", assumption.detail},
                           {"lower_bound", assumption.makesLowerBound}});
  }
  document["assumptions"] = std::move(assumptions);
  return document;
}

}  // namespace

std::string renderJson(const Graph& graph, const Estimate& estimate, const RenderOptions& options) {
  return estimateJson(graph, estimate, options).dump(2) + "\n";
}

std::string renderSweepJson(const std::vector<SweepPoint>& points,
                            const std::optional<BudgetAnswer>& budget,
                            const RenderOptions& options) {
  json document;
  document["format"] = "memtrace-estimate-sweep";
  document["version"] = kFormatVersion;
  document["model"] = options.modelPath;
  document["device_profile"] = profileJson(options.profile);
  auto pointJson = [](const SweepPoint& point) {
    return json{{"batch", point.batch},
                {"input_shapes", point.inputShapes},
                {"semantics", semanticsName(point.estimate.semantics)},
                {"lower_bound", point.estimate.lowerBound},
                {"summary", summaryJson(point.estimate)}};
  };
  json sweep = json::array();
  for (const SweepPoint& point : points) sweep.push_back(pointJson(point));
  document["sweep"] = std::move(sweep);
  if (budget) {
    json answer = {{"budget_bytes", budget->budgetBytes},
                   {"criterion", "no_out_of_memory_in_replay"},
                   {"search_limit", budget->searchLimit},
                   {"largest_batch", nullptr}};
    if (budget->largestBatch) answer["largest_batch"] = *budget->largestBatch;
    if (budget->atLargest) answer["at_largest_batch"] = pointJson(*budget->atLargest);
    document["budget"] = std::move(answer);
  }
  return document.dump(2) + "\n";
}

}  // namespace memtrace::estimator
