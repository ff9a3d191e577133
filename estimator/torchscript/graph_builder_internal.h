#pragma once

// The GraphBuilder behind buildGraph (graph_builder.h), shared by the files that implement it;
// not part of the estimator's API. Where to find what:
//   graph_builder.cpp           the driver: build() and the forward's inputs, node dispatch,
//                               calls into other graphs
//   graph_builder_branches.cpp  prim::If and prim::Loop, and where their values are dropped
//   graph_builder_data.cpp      ops whose size depends on the data (Note [Data-dependent
//                               sizes]), index values known on the host
//   graph_builder_devices.cpp   the device estimated for, and a trace's recorded devices
//                               (Note [Traces from any device])
//   python_names.cpp            Python stacks and names (PythonNames, a class of its own):
//                               locations, statements of traced graphs
//   graph_builder_ops.cpp       running one op: registered operators, interpreter instructions,
//                               constants, unsized ops, the four ways to size an op, the memory
//                               events of a node
//   graph_builder_values.cpp    weights, module attributes, the neutral value of a runtime one

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "estimator/eager_names.h"
#include "estimator/graph.h"
#include "estimator/input_spec.h"
#include "estimator/python_source.h"
#include "estimator/torchscript/graph_builder.h"
#include "estimator/torchscript/meta_allocation_recorder.h"
#include "estimator/torchscript/python_names.h"
#include "estimator/torchscript/shape_functions.h"
#include "estimator/torchscript/source_locations.h"

// Note [Abstract execution]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The front end executes forward the way the TorchScript interpreter would, on values that
// carry everything but data:
//   - each node's registered Operation runs on a stack of IValues in which tensors are meta
//     tensors (shapes, strides, dtypes and storage aliasing, no data) and everything else is
//     real: shape arithmetic such as x.size(-1) // self.heads is exact, and so are conditions
//     on shapes and module flags (self.training);
//   - calls (prim::CallMethod, prim::CallFunction) are followed into the callee's own graph
//     rather than inlined first: each invocation is a Scope with its own Python names, which
//     eager lifetimes need (Note [Eager and TorchScript lifetimes]), and the chain of call
//     sites is the Python stack of a scripted node;
//   - prim::If runs the branch its condition picks. A condition on tensor data (x.sum() > 0)
//     has no value on meta tensors: both branches run, the one that allocates more is kept,
//     and the estimate says so;
//   - prim::Loop runs every iteration of its trip count (the recorded graph is unrolled); a
//     loop whose continuation depends on tensor data stops where that becomes unknown, which
//     makes the estimate a lower bound;
//   - 0-dim tensors made from Python numbers (prim::NumToTensor, scalar constants of traced
//     graphs) stay real CPU tensors: they stay on the host when the model runs on a GPU, and
//     their values let aten::Int(...) recover sizes in traced graphs;
//   - an op without a meta kernel is sized by PyTorch's shape function for its schema
//     (ShapeFunctionSizer). An op with neither, or whose output size depends on data
//     (nonzero, item), gets outputs of unknown size: they count as 0 bytes, are listed, and
//     the estimate becomes a lower bound;
//   - every device argument of an op that makes tensors, whichever device a trace recorded,
//     is taken as meta, the device estimated for (the profile's: cuda:0 or cpu); prim::device,
//     is_cuda and is_cpu answer for that device, so the model runs as it would there, fast
//     paths included (Note [Traces from any device]);
//   - ops in the rule table (Note [Op rules]) are sized by their rule: fused kernels as the
//     profile's device runs them, the kernel chosen named in the output.
// What each op allocates, temporaries included, comes from the meta allocator
// (Note [Meta allocations]).

namespace memtrace::estimator::torchscript::internal {

namespace jit = torch::jit;

// A `raise` the model executes for the given inputs.
struct ModelRaised {
  std::string message;
  std::vector<SourceFrame> stack;
};

// The estimator's name of an ATen dtype (input_spec.h's canonical names), and back.
std::string dtypeName(at::ScalarType type);
at::ScalarType scalarTypeOf(std::string_view dtype);

bool holdsTensors(const c10::TypePtr& type);

// Whether input `index` of a node is a factory's `device=None` (Note [Traces from any device]).
bool isDefaultDevice(const jit::Node* node, size_t index, const c10::IValue& value);

class GraphBuilder {
 public:
  GraphBuilder(const jit::Module& module, BuildCaches& caches, const BuildOptions& options)
      : module_(module),
        options_(options),
        locations_(caches.locations),
        source_files_(caches.source_files),
        shape_functions_(caches.shape_functions),
        op_rules_(caches.op_rules),
        interpreter_graph_(caches.interpreter_graph) {}

  Graph build(const std::vector<InputSpec>& inputs);

 private:
  // What a TorchScript value holds during abstract execution. `known` is false when its value
  // depends on tensor data or on an op that could not be sized; a tensor or container of
  // unknown content still has a neutral Value (`unknown_value`) so that uses are recorded.
  struct Slot {
    c10::IValue value;
    bool known = true;
    ValueId unknown_value;
  };
  using Environment = std::unordered_map<const jit::Value*, Slot>;

  // What an If needs to put back before trying its other branch.
  struct Snapshot {
    Graph graph;
    std::unordered_map<const c10::TensorImpl*, ValueId> tensor_values;
    std::unordered_map<const c10::StorageImpl*, StorageId> storages;
    std::unordered_map<const void*, ValueId> container_values;
    std::map<std::pair<const void*, std::string>, Slot> attribute_writes;
    // Weights and constants met for the first time inside a branch go with it.
    std::unordered_map<const c10::TensorImpl*, at::Tensor> meta_weights;
    std::unordered_map<const jit::Node*, c10::IValue> constants;
  };

  void registerModuleTensors(const jit::Module& module, const std::string& path);
  ValueId registerWeight(const at::Tensor& tensor, StorageOrigin origin, const std::string& name);
  c10::IValue attributeValue(const c10::IValue& value, const std::string& name);

  std::vector<Slot> callGraph(jit::Graph& graph, std::vector<Slot> arguments, Frame& frame);
  void runBlock(jit::Block* block, Frame& frame, Environment& environment);
  void runNode(jit::Node* node, Frame& frame, Environment& environment);
  void runConstant(jit::Node* node, Environment& environment);
  void runGetAttr(jit::Node* node, Environment& environment);
  void runSetAttr(jit::Node* node, Environment& environment);
  void runCall(jit::Node* node, Frame& frame, Environment& environment);
  void runIf(jit::Node* node, Frame& frame, Environment& environment);
  void runLoop(jit::Node* node, Frame& frame, Environment& environment);
  void runOperator(jit::Node* node, Frame& frame, Environment& environment);
  // An op's outputs, and what its kernels allocated and released making them.
  struct SizedOp {
    std::vector<c10::IValue> outputs;
    std::vector<MetaAllocationEvent> allocations;
  };
  // The four ways runOperator sizes an op, each with the meta allocator recording. Nothing
  // from sizeByCount and sizeByShapeFunction: the size is unknown; from sizeByRule: the rule
  // declined; from sizeByMetaKernel: the op has no meta kernel.
  std::optional<SizedOp> sizeByCount(jit::Node* node, Frame& frame, const std::vector<Slot>& inputs,
                                     const jit::Stack& stack);
  std::optional<SizedOp> sizeByRule(jit::Node* node, Frame& frame, const std::vector<Slot>& inputs,
                                    const c10::FunctionSchema& schema, const jit::Stack& stack);
  std::optional<SizedOp> sizeByMetaKernel(jit::Node* node, Frame& frame,
                                          const std::vector<Slot>& inputs,
                                          const std::optional<jit::Operation>& instruction,
                                          jit::Stack& stack);
  std::optional<SizedOp> sizeByShapeFunction(jit::Node* node, Frame& frame,
                                             const std::vector<Slot>& inputs);
  // The temporaries the device's kernel of this op takes and frees inside itself, added to
  // what sizing it allocated (Note [What a CUDA kernel allocates inside itself]).
  void addKernelTemporaries(const c10::FunctionSchema& schema, const std::vector<Slot>& inputs,
                            SizedOp& sized);
  // Runs `size` with the meta allocator recording, and returns what it allocated and released;
  // what it throws fails the op, its message after `failure` when one is given.
  std::vector<MetaAllocationEvent> recordSizing(jit::Node* node, Frame& frame,
                                                const std::vector<Slot>& inputs,
                                                const std::function<void()>& size,
                                                const std::string& failure = "");
  // The op's outputs into the environment, and its node into the graph when it touches tensors.
  void finishOperator(jit::Node* node, Frame& frame, Environment& environment,
                      const std::vector<Slot>& inputs, const SizedOp& sized, bool data_dependent);
  void runUnsized(jit::Node* node, Frame& frame, Environment& environment,
                  const std::vector<Slot>& inputs, const std::string& reason, AssumptionKind kind);
  std::vector<Slot> runBranch(jit::Block* block, Frame& frame, Environment& environment);
  std::vector<size_t> differingValues(const jit::Node* node, const std::vector<Slot>& then_outputs,
                                      const std::vector<Slot>& else_outputs);

  // Python names (PythonNames) of a node's outputs, from their slots.
  void bindOutputs(const jit::Node* node, const Location& location,
                   const std::vector<Slot>& outputs) {
    names_.bindOutputs(node, location, outputs.size(),
                       [&](size_t index) { return valuesOf(outputs[index]); });
  }
  void bindReturnedNames(const Frame& callee, const Location& location,
                         const std::vector<Slot>& outputs) {
    names_.bindReturnedNames(callee, location, outputs.size(),
                             [&](size_t index) { return valuesOf(outputs[index]); });
  }
  void emitDropPoint(const jit::Node* node, const Location& location, const Frame& frame,
                     const Environment& environment);
  const std::vector<const jit::Value*>& freeVariables(const jit::Node* node);
  NodeId emitNode(const jit::Node* node, const Location& location, const Frame& frame,
                  const std::vector<Slot>& inputs);
  void recordOutputs(NodeId id, const std::vector<c10::IValue>& outputs,
                     const std::vector<MetaAllocationEvent>& allocations);
  std::vector<ValueId> valuesOf(const Slot& slot);
  ValueId valueOf(const c10::IValue& value, NodeId producer);
  ValueId tensorValue(const at::Tensor& tensor, NodeId producer);
  void refreshContainer(ValueId container, const c10::IValue& value, NodeId producer);
  void collectValues(const c10::IValue& value, std::vector<ValueId>& ids);
  NodeId lastNode() const;
  Snapshot snapshot() const;
  void restore(Snapshot snapshot);
  int64_t bytesAllocatedSince(size_t first_node) const;
  void forgetNamesIfFrozen();
  // Note [Data-dependent sizes]
  bool isDataDependent(const jit::Node* node, const jit::Stack& stack) const;
  std::optional<int64_t> countFor(const jit::Node* node, int64_t elements, std::string& how);
  std::optional<std::vector<c10::IValue>> sizeDataDependent(const jit::Node* node,
                                                            const jit::Stack& stack,
                                                            std::string& how);
  // Note [Index values known on the host]
  void checkIndexBounds(const jit::Node* node, const std::vector<Slot>& inputs, Frame& frame);
  void trackKnownValues(jit::Node* node, const std::vector<Slot>& inputs,
                        const std::vector<c10::IValue>& outputs);
  std::optional<at::Tensor> knownValue(const c10::IValue& value) const;
  // Note [Traces from any device]
  c10::Device estimatedDevice() const;
  bool keepsHostDevice(const jit::Node* node, const std::vector<Slot>& inputs) const;
  std::optional<c10::IValue> tensorProperty(const jit::Node* node,
                                            const std::vector<Slot>& inputs) const;
  [[noreturn]] void failOp(const jit::Node* node, const Location& location,
                           const std::vector<Slot>& inputs, const std::string& why);

  const jit::Module& module_;
  const BuildOptions& options_;
  Graph graph_;
  MetaAllocationRecorder recorder_;
  SourceLocations& locations_;
  SourceFileCache& source_files_;
  ShapeFunctionSizer& shape_functions_;
  const OpRules& op_rules_;
  std::shared_ptr<jit::Graph>& interpreter_graph_;  // BuildCaches', shared by every build

  // Identity of runtime objects: tensors by TensorImpl, storages by StorageImpl (meta storages
  // and, for weights, the real ones), lists, tuples and dicts by their payload. Every IValue
  // the builder has seen is kept alive, so no address is reused while it runs.
  std::unordered_map<const c10::TensorImpl*, ValueId> tensor_values_;
  std::unordered_map<const c10::StorageImpl*, StorageId> storages_;
  std::unordered_map<const void*, ValueId> container_values_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> meta_weights_;
  std::unordered_map<const c10::ivalue::Object*, std::string> module_paths_;
  std::map<std::pair<const void*, std::string>, Slot> attribute_writes_;
  std::unordered_map<const jit::Node*, c10::IValue> constants_;
  std::unordered_map<const jit::Node*, jit::Operation> operations_;
  std::unordered_set<const c10::FunctionSchema*> without_meta_kernel_;
  std::unordered_map<const jit::Node*, std::vector<const jit::Value*>> free_variables_;
  std::vector<c10::IValue> keep_alive_;
  size_t next_example_count_ = 0;  // into options_.example_counts
  // Host copies of small integer meta tensors whose values follow from constants and shapes
  // (Note [Index values known on the host]).
  std::unordered_map<const c10::TensorImpl*, at::Tensor> known_values_;
  // kActivation storages registered since the current node started, with their meta storage.
  std::vector<std::pair<StorageId, const c10::StorageImpl*>> new_storages_;
  // Which Python name holds each value (python_names.h); last, as it refers to the members
  // above.
  PythonNames names_{module_, graph_, locations_, source_files_, module_paths_};
};

}  // namespace memtrace::estimator::torchscript::internal
