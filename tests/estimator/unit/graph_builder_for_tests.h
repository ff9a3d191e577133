// Small neutral graphs written by hand, for the core's unit tests.
#pragma once

#include <string>
#include <vector>

#include "estimator/graph.h"

namespace memtrace::estimator::testing {

class TestGraph {
 public:
  Graph graph;
  ScopeId root;

  TestGraph() { root = graph.addScope({ScopeId(), "forward"}); }

  ValueId input(int64_t bytes) {
    ValueId id = tensorOn(graph.addStorage({StorageOrigin::kInput, bytes, NodeId(), "input"}));
    graph.inputs.push_back(id);
    return id;
  }

  ValueId weight(int64_t bytes, StorageOrigin origin = StorageOrigin::kParameter) {
    return tensorOn(graph.addStorage({origin, bytes, NodeId(), "weight"}));
  }

  // A node reading `inputs` and allocating one new tensor of `bytes`.
  ValueId op(const std::vector<ValueId>& inputs, int64_t bytes, ScopeId scope = ScopeId(),
             const std::string& name = "aten::op", int line = 0) {
    NodeId node = addNode(inputs, scope, name, line);
    StorageId storage = graph.addStorage({StorageOrigin::kActivation, bytes, node, {}});
    graph.node(node).events.push_back({MemoryEventKind::kAllocate, storage});
    ValueId output = tensorOn(storage, node);
    graph.node(node).outputs.push_back(output);
    return output;
  }

  // A node that makes a temporary of `temporary_bytes` inside itself, then its output.
  ValueId opWithTemporary(const std::vector<ValueId>& inputs, int64_t bytes,
                          int64_t temporary_bytes) {
    NodeId node = addNode(inputs, ScopeId(), "aten::matmul", 0);
    StorageId temporary = graph.addStorage({StorageOrigin::kActivation, temporary_bytes, node, {}});
    StorageId storage = graph.addStorage({StorageOrigin::kActivation, bytes, node, {}});
    Node& added = graph.node(node);
    added.events.push_back({MemoryEventKind::kAllocate, temporary});
    added.events.push_back({MemoryEventKind::kAllocate, storage});
    added.events.push_back({MemoryEventKind::kRelease, temporary});
    ValueId output = tensorOn(storage, node);
    graph.node(node).outputs.push_back(output);
    return output;
  }

  // A view of `base`: a new value on the same storage, allocating nothing.
  ValueId view(ValueId base, ScopeId scope = ScopeId()) {
    NodeId node = addNode({base}, scope, "aten::view", 0);
    Value value;
    value.storage = graph.value(base).storage;
    value.producer = node;
    ValueId output = graph.addValue(value);
    graph.node(node).outputs.push_back(output);
    return output;
  }

  // A list holding `elements`, made by a node of its own.
  ValueId list(const std::vector<ValueId>& elements) {
    NodeId node = addNode(elements, ScopeId(), "prim::ListConstruct", 0);
    Value value;
    value.kind = ValueKind::kContainer;
    value.producer = node;
    value.elements = elements;
    ValueId output = graph.addValue(value);
    graph.node(node).outputs.push_back(output);
    return output;
  }

  // A node that only reads (aten::size, or a drop point with torch_script_only).
  NodeId use(const std::vector<ValueId>& inputs, ScopeId scope = ScopeId()) {
    return addNode(inputs, scope, "aten::size", 0);
  }

  ScopeId call(ScopeId parent, const std::string& function = "forward") {
    return graph.addScope({parent, function});
  }

  // Binds `value` to `name` in `scope` just after the last node so far.
  void bind(ValueId value, const std::string& name, ScopeId scope = ScopeId()) {
    NodeId after = graph.nodes.empty() ? NodeId() : NodeId(graph.nodes.size() - 1);
    graph.value(value).bindings.push_back({scope.valid() ? scope : root, name, after});
  }

  StorageId storageOf(ValueId value) const { return graph.value(value).storage; }

 private:
  NodeId addNode(const std::vector<ValueId>& inputs, ScopeId scope, const std::string& name,
                 int line) {
    Node node;
    node.op = name;
    node.inputs = inputs;
    node.scope = scope.valid() ? scope : root;
    if (line > 0) node.stack.push_back({"/models/model.py", line, "forward"});
    return graph.addNode(std::move(node));
  }

  ValueId tensorOn(StorageId storage, NodeId producer = NodeId()) {
    Value value;
    value.storage = storage;
    value.producer = producer;
    value.shape = {graph.storage(storage).bytes / 4};
    value.dtype = "float32";
    return graph.addValue(value);
  }
};

}  // namespace memtrace::estimator::testing
