#include "estimator/torchscript/graph_builder.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/canonicalize_graph_fuser_ops.h>
#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/decompose_ops.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/loop_unrolling.h>
#include <torch/csrc/jit/passes/lower_grad_of.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/peephole.h>
#include <torch/csrc/jit/passes/remove_expands.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "estimator/errors.h"
#include "estimator/torchscript/graph_builder_internal.h"

// The builder's driver: what buildGraph runs, how it enters forward, dispatches each node
// and follows calls. The rest of GraphBuilder is in the files graph_builder_internal.h lists.

namespace memtrace::estimator::torchscript::internal {

void GraphBuilder::runNode(jit::Node* node, Frame& frame, Environment& environment) {
  switch (node->kind()) {
    case jit::prim::Constant:
      return runConstant(node, environment);
    case jit::prim::GetAttr:
      return runGetAttr(node, environment);
    case jit::prim::SetAttr:
      return runSetAttr(node, environment);
    case jit::prim::CallMethod:
    case jit::prim::CallFunction:
      return runCall(node, frame, environment);
    case jit::prim::If:
      return runIf(node, frame, environment);
    case jit::prim::Loop:
      return runLoop(node, frame, environment);
    case jit::prim::Uninitialized:
      environment[node->output()] = Slot{c10::IValue(), false, ValueId()};
      return;
    case jit::prim::RaiseException: {
      Location location = names_.locate(node, frame);
      const Slot& message = environment.at(node->input(0));
      throw ModelRaised{message.known && message.value.isString()
                            ? message.value.toStringRef()
                            : std::string("(message depends on tensor data)"),
                        location.stack};
    }
    case jit::prim::Print:
    case jit::aten::warn:
      return;  // side effects only
    default:
      return runOperator(node, frame, environment);
  }
}

std::vector<GraphBuilder::Slot> GraphBuilder::callGraph(jit::Graph& graph,
                                                        std::vector<Slot> arguments, Frame& frame) {
  Environment environment;
  for (size_t index = 0; index < graph.inputs().size() && index < arguments.size(); ++index) {
    environment[graph.inputs()[index]] = std::move(arguments[index]);
  }
  runBlock(graph.block(), frame, environment);
  names_.finishStatements(frame, 0);
  std::vector<Slot> outputs;
  for (const jit::Value* output : graph.outputs()) outputs.push_back(environment.at(output));
  return outputs;
}

void GraphBuilder::runBlock(jit::Block* block, Frame& frame, Environment& environment) {
  for (jit::Node* node : block->nodes()) runNode(node, frame, environment);
}

void GraphBuilder::runCall(jit::Node* node, Frame& frame, Environment& environment) {
  std::vector<Slot> arguments;
  for (const jit::Value* input : node->inputs()) arguments.push_back(environment.at(input));
  jit::Function* function = nullptr;
  std::string module_path = frame.module_path;
  if (node->kind() == jit::prim::CallMethod) {
    const Slot& self = arguments.front();
    if (!self.known || !self.value.isObject()) {
      throw EstimateError("cannot follow a method call whose object is unknown");
    }
    const c10::intrusive_ptr<c10::ivalue::Object>& object = self.value.toObject();
    function = &object->type()->getMethod(node->s(jit::attr::name));
    auto path = module_paths_.find(object.get());
    if (path != module_paths_.end()) module_path = path->second;
  } else {
    function = node->input(0)->type()->expect<c10::FunctionType>()->function();
    arguments.erase(arguments.begin());  // the function constant itself
  }

  Location location = names_.locate(node, frame);
  Frame callee;
  callee.scope = graph_.addScope({frame.scope, function->name()});
  callee.module_path = module_path;
  callee.function = function->name();
  callee.module_depth = frame.module_depth + (node->kind() == jit::prim::CallMethod ? 1 : 0);
  SourceFrame call_site = innermostFrame(location.stack);
  if (call_site.known() && !frame.last_traced) {
    callee.callers.reserve(frame.callers.size() + 1);
    callee.callers.push_back(call_site);
    callee.callers.insert(callee.callers.end(), frame.callers.begin(), frame.callers.end());
  }
  // The caller holds every argument until the call returns (Note [Eager and TorchScript
  // lifetimes]); `self` holds nothing the module does not.
  NodeId after = lastNode();
  size_t first = node->kind() == jit::prim::CallMethod ? 1 : 0;
  for (size_t index = first; index < arguments.size(); ++index) {
    for (ValueId id : valuesOf(arguments[index])) {
      graph_.value(id).bindings.push_back({callee.scope, argumentHoldName(index), after});
    }
  }
  std::vector<Slot> outputs =
      callGraph(*jit::toGraphFunction(*function).graph(), std::move(arguments), callee);
  for (size_t index = 0; index < node->outputs().size(); ++index) {
    environment[node->outputs()[index]] = outputs[index];
  }
  // A traced module call has no source range of its own, but every node the callee ran has
  // the caller's statement in its stack.
  if (!locations_.resolve(node->sourceRange()).known && !callee.first_traced_stack.empty()) {
    names_.enterStatements(frame, callee.first_traced_stack, location, &callee.module_path);
    // The call belongs to the statement found only now, perhaps in a function the forward
    // called (`feed_forward_chunk`): that function's scope lasts until the module returns.
    if (location.scope.valid()) graph_.scope(callee.scope).parent = location.scope;
    std::vector<ValueId> values;
    for (const Slot& output : outputs) {
      for (ValueId id : valuesOf(output)) values.push_back(id);
    }
    names_.noteStatementValues(frame, values);
    frame.last_traced = true;
  }
  if (frame.first_traced_stack.empty()) frame.first_traced_stack = callee.first_traced_stack;
  bindOutputs(node, location, outputs);
  if (location.traced) bindReturnedNames(callee, location, outputs);
}

// torch.jit.freeze turns the weights into constants and inlines every call into forward, and
// the saved file keeps no inlined call stacks: the Python functions whose names held the values
// are gone. Names would then all live until forward returns, a gross overestimate of a run
// that never happens (a frozen module only runs in the TorchScript interpreter), so eager
// semantics falls back to freeing at last use, and says so.
void GraphBuilder::forgetNamesIfFrozen() {
  bool parameters = false;
  bool constants = false;
  for (const Storage& storage : graph_.storages) {
    parameters = parameters || storage.origin == StorageOrigin::kParameter;
    constants = constants || storage.origin == StorageOrigin::kConstant;
  }
  if (parameters || !constants) return;
  for (Value& value : graph_.values) value.bindings.clear();
  graph_.assumptions.push_back(
      {AssumptionKind::kSemantics,
       "",
       {},
       "the module is frozen (weights are constants, calls inlined before saving): Python's "
       "variable lifetimes cannot be recovered, so eager semantics frees at last use like the "
       "TorchScript interpreter that runs frozen modules",
       /*makes_lower_bound=*/false});
}

// Note [The interpreter's graph]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The TorchScript interpreter does not run the graph torch.jit.save wrote: its executor first
// inlines every call (each callee's optimized_graph(), itself inlined and peephole-optimized)
// and runs the profiling-insensitive passes of ProfilingGraphExecutorImpl
// (runtime/profiling_graph_executor_impl.cpp) over the result, on the first run already. The
// two differ in memory where a traced module's graphs were cut at module calls: a Llama KV
// cache's `cat([empty, past])` passed into the decoder is, once inlined, folded into the cat
// with the new keys, and never made (+45 % on the zoo's llama-kv-cache before this). After its
// profiling run (one, by default) the executor runs the plan it optimizes from that graph
// (runPreAutodiffPassPipeline, then, no gradient being needed, runNoGradOptimizations), and
// that plan is what every later call runs: it unrolls small loops and turns a list filled by
// append in them into a list display, and drops what the unrolled code no longer reads (a
// scripted `q, k = [pad(t) for t in [q, k]]`: each input freed at its last use inside the
// loop, not when the loop ends: +26 % on the test model unpacked-comprehension before this).
// So the TorchScript semantics walks that plan: Inline, then the same passes in the same order.
// Left out: BatchMM and the fusers (CPU fusion is off by default, and a CUDA fusion group's
// buffers are not modelled), specializeAutogradZero and the guards (no gradient here).
// Module paths and Python stacks then come from each node's inlined call stack
// (locateInlined). The eager semantics keeps the saved graph and its calls: Python runs the
// code as written, and its names live in the scopes of those calls.
namespace {

std::shared_ptr<jit::Graph> interpreterGraph(jit::Graph& saved) {
  std::shared_ptr<jit::Graph> graph = saved.copy();
  jit::Inline(*graph);
  jit::LowerGradOf(*graph);
  jit::RemoveExpands(graph);
  jit::CanonicalizeOps(graph);
  jit::EliminateDeadCode(graph);
  jit::DecomposeOps(graph);
  jit::ConstantPropagation(graph);
  jit::EliminateDeadCode(graph);
  jit::EliminateCommonSubexpression(graph);
  jit::ConstantPooling(graph);
  jit::PeepholeOptimize(graph);
  jit::EliminateDeadCode(graph);
  jit::LowerSimpleTuples(graph);
  // The optimized plan, after the profiling run (runPreAutodiffPassPipeline's passes that
  // change a forward graph, in its order; then runNoGradOptimizations' LowerSimpleTuples).
  jit::RemoveExpands(graph);
  jit::CanonicalizeOps(graph);
  jit::EliminateDeadCode(graph);
  jit::PeepholeOptimize(graph);
  jit::ConstantPropagation(graph);
  jit::EliminateDeadCode(graph);
  jit::EliminateCommonSubexpression(graph);
  jit::PeepholeOptimize(graph);
  jit::ConstantPropagation(graph);
  jit::ConstantPooling(graph);
  jit::UnrollLoops(graph);
  jit::RemoveListMutation(graph);
  jit::PeepholeOptimize(graph);
  jit::ConstantPropagation(graph);
  jit::EliminateCommonSubexpression(graph);
  jit::LowerSimpleTuples(graph);
  jit::EliminateDeadCode(graph);
  return graph;
}

}  // namespace

Graph GraphBuilder::build(const std::vector<InputSpec>& inputs) {
  // No autograd bookkeeping: nothing here is differentiated, and inference is what is estimated.
  c10::InferenceMode inference;
  registerModuleTensors(module_, "");
  jit::Method forward = module_.get_method("forward");
  const c10::FunctionSchema& schema = forward.function().getSchema();
  std::vector<Slot> arguments;
  arguments.push_back(Slot{module_._ivalue(), true, ValueId()});
  size_t declared = schema.arguments().size() - 1;  // without self
  size_t required = 0;
  for (size_t index = 1; index < schema.arguments().size(); ++index) {
    if (!schema.arguments()[index].default_value()) required = index;
  }
  if (inputs.size() < required || inputs.size() > declared) {
    throw EstimateError("the model's forward takes " +
                        (required == declared
                             ? std::to_string(declared)
                             : std::to_string(required) + " to " + std::to_string(declared)) +
                        " input(s), " + std::to_string(inputs.size()) + " --input given");
  }
  for (size_t index = 1; index < schema.arguments().size(); ++index) {
    const c10::Argument& argument = schema.arguments()[index];
    if (index - 1 >= inputs.size()) {
      arguments.push_back(Slot{*argument.default_value(), true, ValueId()});
      continue;
    }
    c10::TypePtr type = argument.type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    if (!type->cast<c10::TensorType>()) {
      throw EstimateError("input " + std::to_string(index) + " of forward ('" + argument.name() +
                          "') is " + argument.type()->str() +
                          "; only tensor inputs can be given with --input");
    }
    const InputSpec& spec = inputs[index - 1];
    at::Tensor tensor = at::empty(
        spec.shape, at::TensorOptions().device(at::kMeta).dtype(scalarTypeOf(spec.dtype)));
    StorageId storage =
        graph_.addStorage({StorageOrigin::kInput, static_cast<int64_t>(tensor.storage().nbytes()),
                           NodeId(), "input " + argument.name()});
    storages_[tensor.storage().unsafeGetStorageImpl()] = storage;
    Value value;
    value.storage = storage;
    value.shape = spec.shape;
    value.dtype = spec.dtype;
    ValueId id = graph_.addValue(std::move(value));
    tensor_values_[tensor.unsafeGetTensorImpl()] = id;
    keep_alive_.push_back(tensor);
    graph_.inputs.push_back(id);
    arguments.push_back(Slot{tensor, true, ValueId()});
  }

  Frame root;
  root.scope = graph_.addScope({ScopeId(), "forward"});
  root.function = "forward";
  std::vector<Slot> outputs;
  try {
    if (options_.interpreter_graph && !interpreter_graph_) {
      interpreter_graph_ = interpreterGraph(*forward.graph());
    }
    std::shared_ptr<jit::Graph> graph =
        options_.interpreter_graph ? interpreter_graph_ : forward.graph();
    outputs = callGraph(*graph, std::move(arguments), root);
  } catch (const ModelRaised& raised) {
    SourceFrame user = innermostUserFrame(raised.stack);
    SourceFrame where = user.known() ? user : innermostFrame(raised.stack);
    throw EstimateError(
        "the model raises an exception for these inputs" +
        (where.known() ? " at " + where.file + ":" + std::to_string(where.line) : std::string()) +
        ": " + firstLineOf(raised.message));
  }
  for (const Slot& output : outputs) {
    for (ValueId id : valuesOf(output)) graph_.outputs.push_back(id);
  }
  names_.noteDroppedStores();
  resolveObjectStores(graph_);
  forgetNamesIfFrozen();
  return std::move(graph_);
}

}  // namespace memtrace::estimator::torchscript::internal

namespace memtrace::estimator::torchscript {

Graph buildGraph(const torch::jit::Module& module, const std::vector<InputSpec>& inputs,
                 BuildCaches& caches, const BuildOptions& options) {
  internal::GraphBuilder builder(module, caches, options);
  return builder.build(inputs);
}

}  // namespace memtrace::estimator::torchscript
