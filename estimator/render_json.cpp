#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

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
  object["module_path"] = node.module_path;
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

json groupsJson(const std::vector<LiveGroup>& groups, bool by_module) {
  json list = json::array();
  for (const LiveGroup& group : groups) {
    json entry = by_module ? json{{"module_path", group.module_path}} : frameJson(group.frame);
    if (entry.is_null()) entry = {{"file", nullptr}, {"line", nullptr}, {"function", nullptr}};
    entry["bytes"] = group.bytes;
    entry["tensors"] = group.tensors;
    list.push_back(std::move(entry));
  }
  return list;
}

json stepCallsJson(const std::vector<StepCallGroup>& calls) {
  json list = json::array();
  for (const StepCallGroup& call : calls)
    list.push_back({{"phase", format::trainingPhaseName(call.phase)},
                    {"bytes", call.bytes},
                    {"tensors", call.tensors}});
  return list;
}

json cellsJson(const std::vector<ModuleCategoryGroup>& cells) {
  json list = json::array();
  for (const ModuleCategoryGroup& cell : cells)
    list.push_back({{"module_path", cell.module_path},
                    {"category", format::categoryName(cell.category)},
                    {"bytes", cell.bytes}});
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

// null when the eager figure rests on recovered names only (or the semantics is torchscript).
json eagerBracketJson(const Estimate& estimate) {
  if (!estimate.eager_bracket) return nullptr;
  const EagerBracket& bracket = *estimate.eager_bracket;
  int64_t figure = estimate.activations.peak_bytes;
  return {{"activation_peak_low_bytes", bracket.low},
          {"activation_peak_high_bytes", bracket.high},
          {"at_last_use_activation_peak_bytes", bracket.at_last_use},
          {"off_by_at_most_bytes", std::max(figure - bracket.low, bracket.high - figure)},
          {"unnamed_values", bracket.unnamed_values}};
}

// null unless some call was not run as the device runs it (AssumptionKind::kApproximate): then
// the peak's bracket, for max_memory_allocated()'s figure and requested_bytes'.
json approximateJson(const Estimate& estimate) {
  if (!estimate.approximate) return nullptr;
  const ApproximateBracket& bracket = *estimate.approximate;
  const AllocatorReplay& allocator = estimate.allocator;
  return {{"calls", bracket.calls},
          {"over_by_at_most_bytes", bracket.over_by},
          {"under_by_at_most_bytes", bracket.under_by},
          {"peak_allocated_low_bytes",
           std::max<int64_t>(0, allocator.peak_allocated_bytes - bracket.over_by)},
          {"peak_allocated_high_bytes", allocator.peak_allocated_bytes + bracket.under_by},
          {"peak_requested_low_bytes",
           std::max<int64_t>(0, allocator.peak_requested_bytes - bracket.over_by)},
          {"peak_requested_high_bytes", allocator.peak_requested_bytes + bracket.under_by}};
}

json trainingBreakdownJson(const Estimate& estimate);

json summaryJson(const Estimate& estimate) {
  const AllocatorReplay& allocator = estimate.allocator;
  json bound = nullptr;
  if (allocator.convolution_workspace_bound_bytes > 0)
    bound = allocator.convolution_workspace_bound_bytes;
  return {
      {"parameter_bytes", estimate.parameter_bytes},
      {"buffer_bytes", estimate.buffer_bytes},
      {"constant_bytes", estimate.constant_bytes},
      {"weight_bytes", estimate.weightBytes()},
      {"input_bytes", estimate.input_bytes},
      {"activation_peak_requested_bytes", estimate.activations.peak_bytes},
      {"peak_delta_allocated_bytes",
       allocator.peak_allocated_bytes - allocator.baseline_allocated_bytes},
      {"baseline_requested_bytes", allocator.baseline_requested_bytes},
      {"baseline_allocated_bytes", allocator.baseline_allocated_bytes},
      {"baseline_reserved_bytes", allocator.baseline_reserved_bytes},
      {"peak_requested_bytes", allocator.peak_requested_bytes},
      {"peak_allocated_bytes", allocator.peak_allocated_bytes},
      {"peak_reserved_bytes", allocator.peak_reserved_bytes},
      {"cublas_workspace_bytes", allocator.cublas_workspace_bytes},
      {"cublaslt_workspace_bytes", allocator.cublaslt_workspace_bytes},
      {"convolution_workspace_bound_bytes", bound},
      {"segments", allocator.segments},
      {"total_flops", estimate.total_flops},
      {"optimizer_state_bytes", estimate.optimizer_state_bytes},
      {"training_peak_bytes",
       estimate.training ? json(estimate.training->peak_bytes) : json(nullptr)},
      {"training_breakdown", trainingBreakdownJson(estimate)},
  };
}

// The six categories a training step's storages fall in, at the step's peak.
json trainingBreakdownJson(const Estimate& estimate) {
  if (!estimate.training) return nullptr;
  json breakdown = json::object();
  for (uint8_t value = 1; value < static_cast<uint8_t>(format::Category::kCount); ++value) {
    auto category = static_cast<format::Category>(value);
    breakdown[format::categoryName(category)] = estimate.training->bytesOf(category);
  }
  return breakdown;
}

json stepJson(const Graph& graph, const Estimate& estimate, const RenderOptions& options) {
  if (!options.step) return nullptr;
  const StepInfo& step = *options.step;
  json object = {
      {"kind", step.training ? "training" : "inference"},
      {"model", step.model},
      {"device", step.device},
      {"optimizer", step.optimizer.empty() ? json(nullptr) : json(step.optimizer)},
      {"optimizer_implementation",
       step.optimizer_implementation.empty() ? json(nullptr) : json(step.optimizer_implementation)},
      {"recorded_for", step.profile.empty() ? json(nullptr) : json(step.profile)},
      {"loop", step.loop.empty() ? json(nullptr) : json(step.loop)},
      {"accumulate", step.accumulate},
      {"autocast", step.autocast.empty() ? json(nullptr) : json(step.autocast)}};
  NodeId peak = estimate.activations.peak_node;
  object["peak_phase"] =
      peak.valid() ? json(format::trainingPhaseName(graph.node(peak).phase)) : json(nullptr);
  object["budget"] = nullptr;
  if (step.budget_bytes) {
    object["budget"] = {
        {"budget_bytes", *step.budget_bytes},
        {"fits", step.fits_budget},
        {"breaks", step.budget_breaker.empty() ? json(nullptr) : json(step.budget_breaker)}};
  }
  return object;
}

json profileJson(const DeviceProfile& profile) {
  json bound = nullptr;
  if (profile.convolution_workspace_bound_bytes) bound = *profile.convolution_workspace_bound_bytes;
  return {{"name", profile.name},
          {"description", profile.description},
          {"torch_release",
           profile.torch_release ? json(torchReleaseText(*profile.torch_release)) : json(nullptr)},
          {"cublas_workspace_bytes", profile.cublas_workspace_bytes},
          {"cublaslt_workspace_bytes", profile.cublaslt_workspace_bytes},
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
    case AssumptionKind::kUnknownOp:
      return "unknown_op";
    case AssumptionKind::kDataDependentBranch:
      return "data_dependent_branch";
    case AssumptionKind::kDataDependentLoop:
      return "data_dependent_loop";
    case AssumptionKind::kUnsizedDependency:
      return "unsized_dependency";
    case AssumptionKind::kSemantics:
      return "semantics";
    case AssumptionKind::kDataDependentSize:
      return "data_dependent_size";
    case AssumptionKind::kApproximate:
      return "approximate";
  }
  return "unknown";
}

json estimateJson(const Graph& graph, const Estimate& estimate, const RenderOptions& options) {
  json document;
  document["format"] = "memtrace-estimate";
  document["version"] = kFormatVersion;
  document["model"] = options.model_path;
  document["semantics"] = semanticsName(estimate.semantics);
  document["device_profile"] = profileJson(options.profile);
  document["inputs"] = inputsJson(graph);
  document["lower_bound"] = estimate.lower_bound;
  document["summary"] = summaryJson(estimate);
  document["eager_approximate"] = eagerBracketJson(estimate);
  document["approximate"] = approximateJson(estimate);
  document["step"] = stepJson(graph, estimate, options);

  json peak = nodeJson(graph, estimate.activations.peak_node);
  if (peak.is_null()) peak = json::object();
  peak["live_activation_bytes"] = estimate.activations.peak_bytes;
  if (graph.training_step && estimate.activations.peak_node.valid()) {
    peak["phase"] = format::trainingPhaseName(graph.node(estimate.activations.peak_node).phase);
  }
  peak["by_frame"] = groupsJson(estimate.attribution.by_frame, false);
  peak["by_user_frame"] = groupsJson(estimate.attribution.by_user_frame, false);
  peak["by_module"] = groupsJson(estimate.attribution.by_module, true);
  json tensors = json::array();
  std::vector<ValueId> first_value = firstValueOfStorage(graph);
  for (StorageId id : estimate.attribution.storages) {
    const Storage& storage = graph.storage(id);
    json tensor = {{"bytes", storage.bytes}};
    if (first_value[id.value].valid()) {
      const Value& value = graph.value(first_value[id.value]);
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
  // Note [Workspaces on their lines]: where requested_bytes peaks, what the report puts beside
  // the measured lines.
  json requested = nodeJson(graph, estimate.allocator.peak_requested_node);
  if (requested.is_null()) requested = json::object();
  requested["requested_bytes"] = estimate.allocator.peak_requested_bytes;
  requested["by_frame"] = groupsJson(estimate.requested_attribution.by_frame, false);
  requested["by_user_frame"] = groupsJson(estimate.requested_attribution.by_user_frame, false);
  requested["by_module"] = groupsJson(estimate.requested_attribution.by_module, true);
  if (graph.training_step) {
    // Note [The step's own calls] in estimator/passes/attribute_peak.h.
    requested["by_step_call"] = stepCallsJson(estimate.requested_attribution.by_step_call);
  }
  // Note [Module x category predicted]: every byte there by owner and category.
  requested["by_module_category"] = cellsJson(estimate.requested_attribution.by_module_category);
  if (graph.training_step) {
    // Note [The step's workspaces] in estimator/passes/attribute_peak.h.
    const StepWorkspaceAttribution& apart = estimate.requested_attribution.step_workspaces;
    requested["step_workspaces"] = {{"bytes", apart.bytes},
                                    {"by_frame", groupsJson(apart.by_frame, false)},
                                    {"by_user_frame", groupsJson(apart.by_user_frame, false)},
                                    {"by_step_call", stepCallsJson(apart.by_step_call)},
                                    {"by_module", groupsJson(apart.by_module, true)},
                                    {"by_module_category", cellsJson(apart.by_module_category)}};
  }
  json workspaces = json::array();
  for (const Workspace& workspace : estimate.allocator.peak_requested_workspaces) {
    json entry = {{"library", workspace.library}, {"bytes", workspace.bytes}};
    if (workspace.node.valid()) {
      entry["node_index"] = workspace.node.value;
      entry["op"] = graph.node(workspace.node).op;
      addLocation(entry, graph.node(workspace.node));
    }
    workspaces.push_back(std::move(entry));
  }
  requested["workspaces"] = std::move(workspaces);
  document["requested_peak"] = std::move(requested);
  document["allocated_peak"] = nodeJson(graph, estimate.allocator.peak_allocated_node);
  document["cublas_workspace_node"] = nodeJson(graph, estimate.allocator.cublas_workspace_node);
  document["cublaslt_workspace_node"] = nodeJson(graph, estimate.allocator.cublaslt_workspace_node);

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
  for (const UnknownOp& op : estimate.unknown_ops) {
    unknown.push_back({{"op", op.op},
                       {"count", op.count},
                       {"frame", frameJson(innermostFrame(op.first_stack))},
                       {"user_frame", frameJson(innermostUserFrame(op.first_stack))},
                       {"detail", op.detail}});
  }
  document["unknown_ops"] = std::move(unknown);

  json assumptions = json::array();
  for (const Assumption& assumption : graph.assumptions) {
    if (assumption.kind == AssumptionKind::kUnknownOp) continue;
    assumptions.push_back({{"kind", assumptionKindName(assumption.kind)},
                           {"op", assumption.op},
                           {"frame", frameJson(innermostFrame(assumption.stack))},
                           {"user_frame", frameJson(innermostUserFrame(assumption.stack))},
                           {"detail", assumption.detail},
                           {"lower_bound", assumption.makes_lower_bound}});
    if (assumption.kind == AssumptionKind::kApproximate) {
      assumptions.back()["over_by_at_most_bytes"] = assumption.over_by_at_most;
      assumptions.back()["under_by_at_most_bytes"] = assumption.under_by_at_most;
    }
  }
  document["assumptions"] = std::move(assumptions);

  // Grouped by (op, kernel, why), in first-call order, with the first call's place.
  json kernels = json::array();
  std::map<std::tuple<std::string, std::string, std::string>, size_t> kernel_rows;
  for (const KernelChoice& choice : graph.kernel_choices) {
    auto [row, inserted] =
        kernel_rows.try_emplace({choice.op, choice.kernel, choice.why}, kernels.size());
    if (inserted) {
      kernels.push_back({{"op", choice.op},
                         {"kernel", choice.kernel},
                         {"why", choice.why},
                         {"count", 0},
                         {"frame", frameJson(innermostFrame(choice.stack))},
                         {"user_frame", frameJson(innermostUserFrame(choice.stack))}});
    }
    kernels[row->second]["count"] = kernels[row->second]["count"].get<int64_t>() + 1;
  }
  document["kernels"] = std::move(kernels);
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
  document["model"] = options.model_path;
  document["device_profile"] = profileJson(options.profile);
  auto point_json = [](const SweepPoint& point) {
    return json{{"batch", point.batch},
                {"input_shapes", point.input_shapes},
                {"semantics", semanticsName(point.estimate.semantics)},
                {"lower_bound", point.estimate.lower_bound},
                {"eager_approximate", eagerBracketJson(point.estimate)},
                {"approximate", approximateJson(point.estimate)},
                {"summary", summaryJson(point.estimate)}};
  };
  json sweep = json::array();
  for (const SweepPoint& point : points) sweep.push_back(point_json(point));
  document["sweep"] = std::move(sweep);
  if (budget) {
    json answer = {{"budget_bytes", budget->budget_bytes},
                   {"criterion", "no_out_of_memory_in_replay"},
                   {"search_limit", budget->search_limit},
                   {"largest_batch", nullptr}};
    if (budget->largest_batch) answer["largest_batch"] = *budget->largest_batch;
    if (budget->at_largest) answer["at_largest_batch"] = point_json(*budget->at_largest);
    if (budget->at_next) {
      answer["next_batch"] = point_json(*budget->at_next);
      std::string breaker = budgetBreaker(budget->at_next->estimate, budget->budget_bytes);
      answer["next_batch_breaks_budget"] = breaker.empty() ? json(nullptr) : json(breaker);
    }
    document["budget"] = std::move(answer);
  }
  return document.dump(2) + "\n";
}

}  // namespace memtrace::estimator
