#include "estimator/graph.h"

#include <algorithm>
#include <string_view>

namespace memtrace::estimator {

const char* originName(StorageOrigin origin) {
  switch (origin) {
    case StorageOrigin::Parameter:
      return "parameter";
    case StorageOrigin::Buffer:
      return "buffer";
    case StorageOrigin::Constant:
      return "constant";
    case StorageOrigin::Input:
      return "input";
    case StorageOrigin::Activation:
      return "activation";
    case StorageOrigin::Host:
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
                     [](const Assumption& assumption) { return assumption.makesLowerBound; });
}

namespace {

bool isStandardLibrary(std::string_view file) {
  // CPython installs its library as .../lib/pythonX.Y/<module>.py; packages live further down
  // in site-packages or dist-packages, which are caught separately.
  size_t at = file.find("/lib/python");
  if (at == std::string_view::npos) return false;
  size_t rest = at + std::string_view("/lib/python").size();
  return rest < file.size() && (file[rest] >= '0' && file[rest] <= '9');
}

}  // namespace

bool isUserCode(const std::string& file) {
  std::string_view path(file);
  if (path.empty() || path.front() == '<') return false;  // <string>, <frozen importlib...>
  if (path.find("/site-packages/") != std::string_view::npos) return false;
  if (path.find("/dist-packages/") != std::string_view::npos) return false;
  if (isStandardLibrary(path)) return false;
  // PyTorch run from a source checkout rather than installed.
  if (path.find("/torch/nn/") != std::string_view::npos ||
      path.find("/torch/jit/") != std::string_view::npos ||
      path.find("/torch/_tensor.py") != std::string_view::npos ||
      path.find("/torch/functional.py") != std::string_view::npos) {
    return false;
  }
  return true;
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
