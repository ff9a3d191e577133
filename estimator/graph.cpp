#include "estimator/graph.h"

#include <algorithm>
#include <string_view>

#include "tracer/common/user_code.h"

namespace memtrace::estimator {

const char* originName(StorageOrigin origin) {
  switch (origin) {
    case StorageOrigin::kParameter:
      return "parameter";
    case StorageOrigin::kBuffer:
      return "buffer";
    case StorageOrigin::kConstant:
      return "constant";
    case StorageOrigin::kInput:
      return "input";
    case StorageOrigin::kActivation:
      return "activation";
    case StorageOrigin::kHost:
      return "host";
    case StorageOrigin::kOptimizerState:
      return "optimizer_state";
  }
  return "unknown";
}

StorageId Graph::addStorage(Storage storage) {
  storages.push_back(std::move(storage));
  return StorageId(storages.size() - 1);
}

ValueId Graph::addValue(Value value) {
  values.push_back(std::move(value));
  return ValueId(values.size() - 1);
}

NodeId Graph::addNode(Node node) {
  nodes.push_back(std::move(node));
  return NodeId(nodes.size() - 1);
}

void Graph::assumeOnce(Assumption assumption) {
  bool noted = std::any_of(assumptions.begin(), assumptions.end(), [&](const Assumption& other) {
    return other.kind == assumption.kind && other.detail == assumption.detail;
  });
  if (!noted) assumptions.push_back(std::move(assumption));
}

ScopeId Graph::addScope(Scope scope) {
  scopes.push_back(std::move(scope));
  return ScopeId(scopes.size() - 1);
}

bool Graph::lowerBound() const {
  return std::any_of(assumptions.begin(), assumptions.end(),
                     [](const Assumption& assumption) { return assumption.makes_lower_bound; });
}

void noteTakenOut(Value& container, const std::vector<ValueId>& held, NodeId after) {
  auto holds = [&](ValueId id) { return std::find(held.begin(), held.end(), id) != held.end(); };
  std::erase_if(container.taken_out, [&](const auto& entry) { return holds(entry.first); });
  for (ValueId element : container.elements) {
    if (holds(element)) continue;
    bool noted = std::any_of(container.taken_out.begin(), container.taken_out.end(),
                             [&](const auto& entry) { return entry.first == element; });
    if (!noted) container.taken_out.emplace_back(element, after);
  }
}

bool isUserCode(const std::string& file) {
  return memtrace::isUserCode(file);
}

SourceFrame innermostUserFrame(const std::vector<SourceFrame>& stack) {
  for (const SourceFrame& frame : stack) {
    if (frame.known() && isUserCode(frame.file)) return frame;
  }
  return {};
}

SourceFrame innermostFrame(const std::vector<SourceFrame>& stack) {
  return stack.empty() ? SourceFrame{} : stack.front();
}

}  // namespace memtrace::estimator
