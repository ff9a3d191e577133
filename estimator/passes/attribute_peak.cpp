#include "estimator/passes/attribute_peak.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

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

// Live bytes charged to the nodes that made them, grouped the three ways.
struct Groups {
  std::map<SourceFrame, LiveGroup> by_frame;
  std::map<SourceFrame, LiveGroup> by_user_frame;
  std::map<std::string, LiveGroup> by_module;
  // Note [The step's own calls]: set for a training step's requested peak.
  bool step_calls = false;
  std::set<SourceFrame> forward_lines;
  std::map<format::TrainingPhase, StepCallGroup> by_step_call;

  void charge(const Node* producer, int64_t bytes) {
    std::vector<SourceFrame> no_stack;
    const std::vector<SourceFrame>& stack = producer ? producer->stack : no_stack;
    SourceFrame frame = innermostFrame(stack);
    SourceFrame user_frame = innermostUserFrame(stack);
    std::string module = producer ? producer->module_path : std::string();
    memtrace::estimator::charge(by_frame, frame, LiveGroup{frame, {}, 0, 0}, bytes);
    bool own_call = step_calls && producer &&
                    (producer->phase == format::TrainingPhase::kBackward ||
                     producer->phase == format::TrainingPhase::kOptimizer) &&
                    !forward_lines.contains(user_frame);
    if (own_call) {
      StepCallGroup& group = by_step_call[producer->phase];
      group.phase = producer->phase;
      group.bytes += bytes;
      group.tensors += 1;
    } else {
      memtrace::estimator::charge(by_user_frame, user_frame, LiveGroup{user_frame, {}, 0, 0},
                                  bytes);
    }
    chargeModule(module, bytes);
  }
  void chargeModule(const std::string& module, int64_t bytes) {
    memtrace::estimator::charge(by_module, module, LiveGroup{{}, module, 0, 0}, bytes);
  }
  template <typename Attribution>
  void into(Attribution& attribution) const {
    attribution.by_frame = collect(by_frame);
    attribution.by_user_frame = collect(by_user_frame);
    attribution.by_module = collect(by_module);
    for (const auto& [phase, group] : by_step_call) attribution.by_step_call.push_back(group);
  }
};

// Note [The step's workspaces]: cuBLAS's and cuBLASLt's on a training step (a convolution's is
// taken by its call, in the step).
bool stepWorkspace(const Graph& graph, const Workspace& workspace) {
  std::string_view library = workspace.library;
  return graph.training_step && (library == "cuBLAS" || library == "cuBLASLt");
}

// The live activations, largest first, charged to their producers.
PeakAttribution attributeStorages(const Graph& graph, const std::vector<StorageId>& live,
                                  Groups& groups) {
  PeakAttribution attribution;
  for (StorageId id : live) {
    const Storage& storage = graph.storage(id);
    if (storage.bytes == 0) continue;
    attribution.storages.push_back(id);
    groups.charge(storage.producer.valid() ? &graph.node(storage.producer) : nullptr,
                  storage.bytes);
  }
  std::stable_sort(attribution.storages.begin(), attribution.storages.end(),
                   [&](StorageId left, StorageId right) {
                     return graph.storage(left).bytes > graph.storage(right).bytes;
                   });
  return attribution;
}

// The module a weight belongs to, by its name: "blocks.0.attn.qkv.weight" is blocks.0.attn.qkv's,
// "weight" the root's ("").
std::string moduleOfWeight(const std::string& name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

// Note [Module x category predicted]: the owner of what a node allocates.
std::string nodeOwner(const Node* node) {
  if (node && node->in_module) return node->module_path;
  return node && node->phase == format::TrainingPhase::kOptimizer ? kOptimizerStep : kNoModule;
}

// Note [Module x category predicted]: a storage's category, named as a trace names it.
format::Category categoryOf(const Storage& storage) {
  if (storage.category != format::Category::kUnknown) return storage.category;
  if (isWeight(storage.origin)) return format::Category::kParameter;
  if (storage.origin == StorageOrigin::kInput) return format::Category::kInput;
  if (storage.origin == StorageOrigin::kOptimizerState) return format::Category::kOptimizerState;
  return format::Category::kTemporary;
}

using Cells = std::map<std::pair<std::string, format::Category>, int64_t>;

// Largest first.
std::vector<ModuleCategoryGroup> sortedCells(const Cells& cells) {
  std::vector<ModuleCategoryGroup> groups;
  for (const auto& [key, bytes] : cells) groups.push_back({key.first, key.second, bytes});
  std::stable_sort(groups.begin(), groups.end(),
                   [](const ModuleCategoryGroup& left, const ModuleCategoryGroup& right) {
                     return left.bytes > right.bytes;
                   });
  return groups;
}

// A library workspace's cell: a temporary of the node that took it.
void chargeWorkspaceCell(Cells& cells, const Graph& graph, const Workspace& workspace) {
  if (workspace.bytes > 0)
    cells[{nodeOwner(workspace.node.valid() ? &graph.node(workspace.node) : nullptr),
           format::Category::kTemporary}] += workspace.bytes;
}

// The cells of Note [Module x category predicted], largest first, without the step's
// workspaces (Note [The step's workspaces]).
std::vector<ModuleCategoryGroup> moduleCategories(const Graph& graph,
                                                  const std::vector<StorageId>& live,
                                                  const std::vector<Workspace>& workspaces) {
  Cells cells;
  auto owner = [&](const Storage& storage) {
    if (storage.owned) return storage.owner_module;
    if (storage.origin == StorageOrigin::kParameter || storage.origin == StorageOrigin::kBuffer)
      return moduleOfWeight(storage.name);
    if (storage.producer.valid()) return nodeOwner(&graph.node(storage.producer));
    return std::string(kNoModule);
  };
  for (StorageId id : live) {
    const Storage& storage = graph.storage(id);
    if (storage.bytes > 0) cells[{owner(storage), categoryOf(storage)}] += storage.bytes;
  }
  for (const Workspace& workspace : workspaces)
    if (!stepWorkspace(graph, workspace)) chargeWorkspaceCell(cells, graph, workspace);
  // What lives through the whole run: weights, inputs, optimizer state.
  for (const Storage& storage : graph.storages)
    if (storage.origin != StorageOrigin::kActivation && storage.origin != StorageOrigin::kHost &&
        storage.bytes > 0)
      cells[{owner(storage), categoryOf(storage)}] += storage.bytes;
  return sortedCells(cells);
}

}  // namespace

PeakAttribution attributePeak(const Graph& graph, const std::vector<StorageId>& live) {
  Groups groups;
  PeakAttribution attribution = attributeStorages(graph, live, groups);
  groups.into(attribution);
  return attribution;
}

PeakAttribution attributeRequestedPeak(const Graph& graph, const std::vector<StorageId>& live,
                                       const std::vector<Workspace>& workspaces) {
  Groups groups;
  if (graph.training_step) {
    groups.step_calls = true;
    for (const Node& node : graph.nodes) {
      if (node.phase != format::TrainingPhase::kForward) continue;
      SourceFrame line = innermostUserFrame(node.stack);
      if (line.known()) groups.forward_lines.insert(line);
    }
  }
  PeakAttribution attribution = attributeStorages(graph, live, groups);
  // Note [The step's workspaces]: grouped as the rest is, apart.
  Groups step_workspaces;
  step_workspaces.step_calls = groups.step_calls;
  step_workspaces.forward_lines = groups.forward_lines;
  Cells step_workspace_cells;
  for (const Workspace& workspace : workspaces) {
    if (workspace.bytes <= 0) continue;
    if (stepWorkspace(graph, workspace)) {
      attribution.step_workspaces.bytes += workspace.bytes;
      chargeWorkspaceCell(step_workspace_cells, graph, workspace);
      step_workspaces.charge(workspace.node.valid() ? &graph.node(workspace.node) : nullptr,
                             workspace.bytes);
    } else if (workspace.node.valid()) {
      groups.charge(&graph.node(workspace.node), workspace.bytes);
    }
  }
  step_workspaces.into(attribution.step_workspaces);
  attribution.step_workspaces.by_module_category = sortedCells(step_workspace_cells);
  for (const Storage& storage : graph.storages)
    if ((storage.origin == StorageOrigin::kParameter || storage.origin == StorageOrigin::kBuffer) &&
        storage.bytes > 0)
      groups.chargeModule(moduleOfWeight(storage.name), storage.bytes);
  groups.into(attribution);
  attribution.by_module_category = moduleCategories(graph, live, workspaces);
  return attribution;
}

}  // namespace memtrace::estimator
