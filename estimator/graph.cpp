#include "estimator/graph.h"

#include <algorithm>
#include <string_view>

#include "common/user_code.h"

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

ScopeId Graph::addScope(Scope scope) {
  scopes.push_back(std::move(scope));
  return ScopeId(scopes.size() - 1);
}

bool Graph::lowerBound() const {
  return std::any_of(assumptions.begin(), assumptions.end(),
                     [](const Assumption& assumption) { return assumption.makes_lower_bound; });
}

bool isUserCode(const std::string& file) { return memtrace::isUserCode(file); }

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
