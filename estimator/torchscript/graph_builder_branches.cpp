#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "estimator/torchscript/graph_builder_internal.h"

namespace memtrace::estimator::torchscript::internal {

namespace {

constexpr int64_t kMaxLoopIterations = 1'000'000;  // a guard against runaway while-loops

// What the estimate says about an `if` whose condition depends on tensor data. A branch that
// raised has -1 bytes.
std::string branchDetail(bool take_then, int64_t then_bytes, int64_t else_bytes,
                         size_t unknown_values) {
  std::string detail = "the condition depends on tensor data; ";
  if (then_bytes < 0 || else_bytes < 0) {
    detail += std::string("sizes follow the ") + (take_then ? "`if`" : "`else`") +
              " branch: the other one raises";
  } else {
    int64_t taken = take_then ? then_bytes : else_bytes;
    int64_t other = take_then ? else_bytes : then_bytes;
    detail += std::string("sizes follow the ") + (take_then ? "`if`" : "`else`") + " branch, " +
              (taken == other ? "as both allocate " + std::to_string(taken) + " bytes"
                              : "the one that allocates more (" + std::to_string(taken) +
                                    " bytes against " + std::to_string(other) + ")");
  }
  if (unknown_values > 0) {
    detail += "; " + std::to_string(unknown_values) +
              " non-tensor value(s) that differ between the branches are unknown";
  }
  return detail;
}

// Whether two non-tensor values a branch produces are the same value.
bool sameValue(const c10::IValue& first, const c10::IValue& second) {
  if (first.isObject() || second.isObject()) return first.is(second);
  try {
    return first == second;
  } catch (const std::exception&) {
    return false;  // not comparable: not known to be the same
  }
}

}  // namespace

std::vector<GraphBuilder::Slot> GraphBuilder::runBranch(jit::Block* block, Frame& frame,
                                                        Environment& environment) {
  runBlock(block, frame, environment);
  std::vector<Slot> outputs;
  for (const jit::Value* output : block->outputs()) outputs.push_back(environment.at(output));
  return outputs;
}

// Note [Unknown means unknown]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// When an `if` condition depends on tensor data, both branches run and the sizes follow the one
// that allocates more: an upper bound on memory that the estimate states. Its non-tensor
// results are another matter. Taking the constants of one branch as known would decide
// conditions further on that the model decides at run time, and can send the estimate down
// a path the model never takes (nn.MultiheadAttention: `any_nested = q.is_nested or ...` was
// taken as True, and the model "raised"). So a non-tensor output (a number, flag, string,
// device) whose value differs between the branches is unknown; conditions on it are in turn
// data-dependent, and uses of it are unsized. Tensor outputs keep the taken branch's sizes.

// The non-tensor outputs of an `if` whose value differs between its two branches.
std::vector<size_t> GraphBuilder::differingValues(const jit::Node* node,
                                                  const std::vector<Slot>& then_outputs,
                                                  const std::vector<Slot>& else_outputs) {
  std::vector<size_t> differing;
  for (size_t index = 0; index < node->outputs().size(); ++index) {
    if (holdsTensors(node->outputs()[index]->type())) continue;
    const Slot& first = then_outputs[index];
    const Slot& second = else_outputs[index];
    if (first.known && second.known && sameValue(first.value, second.value)) continue;
    differing.push_back(index);
  }
  return differing;
}

GraphBuilder::Snapshot GraphBuilder::snapshot() const {
  return {graph_,        tensor_values_, storages_, container_values_, attribute_writes_,
          meta_weights_, constants_};
}

void GraphBuilder::restore(Snapshot snapshot) {
  graph_ = std::move(snapshot.graph);
  tensor_values_ = std::move(snapshot.tensor_values);
  storages_ = std::move(snapshot.storages);
  container_values_ = std::move(snapshot.container_values);
  attribute_writes_ = std::move(snapshot.attribute_writes);
  meta_weights_ = std::move(snapshot.meta_weights);
  constants_ = std::move(snapshot.constants);
}

int64_t GraphBuilder::bytesAllocatedSince(size_t first_node) const {
  int64_t bytes = 0;
  for (size_t index = first_node; index < graph_.nodes.size(); ++index) {
    for (const MemoryEvent& event : graph_.nodes[index].events) {
      if (event.kind == MemoryEventKind::kAllocate) bytes += graph_.storage(event.storage).bytes;
    }
  }
  return bytes;
}

void GraphBuilder::runIf(jit::Node* node, Frame& frame, Environment& environment) {
  const Slot& condition = environment.at(node->input(0));
  Location location = names_.locate(node, frame);
  std::vector<Slot> outputs;
  if (condition.known) {
    outputs = runBranch(node->blocks()[condition.value.toBool() ? 0 : 1], frame, environment);
  } else {
    // Run both; keep the one that allocates more. A branch that raises is not taken.
    size_t first_node = graph_.nodes.size();
    Snapshot before = snapshot();
    Frame frame_before = frame;
    std::optional<std::vector<Slot>> then_outputs;
    std::optional<ModelRaised> then_raised;
    try {
      then_outputs = runBranch(node->blocks()[0], frame, environment);
    } catch (const ModelRaised& raised) {
      then_raised = raised;
    }
    int64_t then_bytes = then_outputs ? bytesAllocatedSince(first_node) : -1;
    Snapshot after_then = snapshot();
    Frame frame_after_then = frame;
    restore(std::move(before));
    frame = frame_before;
    std::optional<std::vector<Slot>> else_outputs;
    try {
      else_outputs = runBranch(node->blocks()[1], frame, environment);
    } catch (const ModelRaised&) {
      if (!then_outputs) throw;  // raises either way
    }
    int64_t else_bytes = else_outputs ? bytesAllocatedSince(first_node) : -1;
    bool take_then = then_bytes >= else_bytes;
    // Note [Unknown means unknown]
    std::vector<size_t> unknown = then_outputs && else_outputs
                                      ? differingValues(node, *then_outputs, *else_outputs)
                                      : std::vector<size_t>();
    if (take_then) {
      restore(std::move(after_then));
      frame = std::move(frame_after_then);
      outputs = std::move(*then_outputs);
    } else {
      outputs = std::move(*else_outputs);
    }
    for (size_t index : unknown) outputs[index] = Slot{c10::IValue(), false, ValueId()};
    graph_.assumptions.push_back({AssumptionKind::kDataDependentBranch, "prim::If", location.stack,
                                  branchDetail(take_then, then_bytes, else_bytes, unknown.size()),
                                  /*makes_lower_bound=*/false});
  }
  for (size_t index = 0; index < node->outputs().size(); ++index) {
    environment[node->outputs()[index]] = outputs[index];
  }
  emitDropPoint(node, location, frame, environment);
  bindOutputs(node, location, outputs);
}

void GraphBuilder::runLoop(jit::Node* node, Frame& frame, Environment& environment) {
  Location location = names_.locate(node, frame);
  const Slot& trip_count = environment.at(node->input(0));
  Slot condition = environment.at(node->input(1));
  std::vector<Slot> carried;
  for (size_t index = 2; index < node->inputs().size(); ++index) {
    carried.push_back(environment.at(node->input(index)));
  }
  jit::Block* body = node->blocks()[0];
  auto flag = [&](const std::string& detail) {
    graph_.assumptions.push_back({AssumptionKind::kDataDependentLoop, "prim::Loop", location.stack,
                                  detail, /*makes_lower_bound=*/true});
  };
  int64_t iterations = trip_count.known ? trip_count.value.toInt() : kMaxLoopIterations;
  // Note [A comprehension's own names]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // `q, k = [pad(t) for t in [q, k]]`, scripted, is a loop over the list in the forward's own
  // graph, and its `t` a name of the forward there: held, the last `t` (k's projection) lived
  // until forward returned (+21 % in eager semantics on the test model unpacked-comprehension).
  // In Python a comprehension is a scope of its own (a function before 3.12, inlined with its
  // names isolated since): its target and the iterator over the list are let go as it ends.
  // So a comprehension's loop runs in a scope of its own, a child of the enclosing one, which
  // ends with the loop's last node; the names its body binds (its targets) are bound there.
  ScopeId enclosing = frame.scope;
  if (names_.isComprehension(node)) frame.scope = graph_.addScope({enclosing, "<comprehension>"});
  bool running = true;
  int64_t iteration = 0;
  while (running && iteration < iterations) {
    if (!condition.known) {
      flag("the loop's continuation depends on tensor data; simulated " +
           std::to_string(iteration + 1) + " iteration(s), the true count may be higher");
      running = false;  // this one iteration still runs
    } else if (!condition.value.toBool()) {
      break;
    }
    if (iteration == kMaxLoopIterations - 1) {
      flag("stopped after " + std::to_string(kMaxLoopIterations) + " iterations");
      running = false;
    }
    environment[body->inputs()[0]] = Slot{c10::IValue(iteration), true, ValueId()};
    for (size_t index = 0; index < carried.size(); ++index) {
      environment[body->inputs()[index + 1]] = carried[index];
    }
    runBlock(body, frame, environment);
    condition = environment.at(body->outputs()[0]);
    for (size_t index = 0; index < carried.size(); ++index) {
      carried[index] = environment.at(body->outputs()[index + 1]);
    }
    ++iteration;
  }
  frame.scope = enclosing;
  for (size_t index = 0; index < node->outputs().size(); ++index) {
    environment[node->outputs()[index]] = carried[index];
  }
  emitDropPoint(node, location, frame, environment);
  bindOutputs(node, location, carried);
}

// The values defined outside an if or a loop that its blocks use, in first-use order.
const std::vector<const jit::Value*>& GraphBuilder::freeVariables(const jit::Node* node) {
  auto cached = free_variables_.find(node);
  if (cached != free_variables_.end()) return cached->second;
  std::unordered_set<const jit::Value*> defined;
  std::unordered_set<const jit::Value*> listed;
  std::vector<const jit::Value*> free;
  auto use = [&](const jit::Value* value) {
    if (!defined.count(value) && listed.insert(value).second) free.push_back(value);
  };
  std::function<void(const jit::Block*)> visit = [&](const jit::Block* block) {
    for (const jit::Value* input : block->inputs()) defined.insert(input);
    for (const jit::Node* inner : block->nodes()) {
      for (const jit::Value* input : inner->inputs()) use(input);
      for (const jit::Block* nested : inner->blocks()) visit(nested);
      for (const jit::Value* output : inner->outputs()) defined.insert(output);
    }
    for (const jit::Value* output : block->outputs()) use(output);
  };
  for (const jit::Block* block : node->blocks()) visit(block);
  return free_variables_.emplace(node, std::move(free)).first->second;
}

// The TorchScript interpreter drops a value whose last use is inside an if or a loop only once
// that if or loop is done, whichever branch ran (Note [Eager and TorchScript lifetimes]).
void GraphBuilder::emitDropPoint(const jit::Node* node, const Location& location,
                                 const Frame& frame, const Environment& environment) {
  std::vector<Slot> held;
  for (const jit::Value* value : freeVariables(node)) {
    auto slot = environment.find(value);
    if (slot != environment.end()) held.push_back(slot->second);
  }
  bool holds_values = std::any_of(held.begin(), held.end(),
                                  [&](const Slot& slot) { return !valuesOf(slot).empty(); });
  if (!holds_values) return;
  NodeId id = emitNode(node, location, frame, held);
  graph_.node(id).torch_script_only = true;
}

}  // namespace memtrace::estimator::torchscript::internal
