// The neutral graph every estimator pass runs on.
//
// Note [The neutral graph]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// The estimator's core never sees TorchScript. A front end runs the model abstractly (shapes
// only) and records what one forward pass executes as a flat list of nodes in execution order:
// control flow is already resolved (the branch an `if` takes, every iteration of a loop), so
// each node runs exactly once, like a torch.export graph. What the core needs per node is what
// a memory profiler would see:
//   - the storages it allocates, and the temporaries it allocates and releases inside itself,
//     in order (MemoryEvent);
//   - the values (tensor handles and containers) it reads and produces; a view or an in-place
//     op produces a value on an existing storage, so it allocates nothing;
//   - where it comes from: the Python stack (innermost first), the module instance path, and
//     the function-call scope it runs in.
// Storage is the unit of memory (what the caching allocator hands out); Value is the unit of
// liveness (what a program holds). A storage is freed when the last value on it dies; when a
// value dies depends on the execution semantics (Note [Eager and TorchScript lifetimes]).
//
// The TorchScript front end (torchscript/) is one producer; graph files (graph_file.h) are
// the other: a training step or a forward recorded on fake tensors
// (mem_tracer.estimator.step_graph), whose nodes say which storages they allocate and release, and
// whose storages say what they hold in training (a category, as the tracer's records name them).
#pragma once

#include <compare>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tracer/format/records.h"

namespace memtrace::estimator {

// A strongly typed index into one of Graph's tables; default-constructed means "none".
template <typename Tag>
struct Index {
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  uint32_t value = kNone;

  constexpr Index() = default;
  constexpr explicit Index(uint32_t index) : value(index) {}
  constexpr explicit Index(size_t index) : value(static_cast<uint32_t>(index)) {}
  constexpr bool valid() const { return value != kNone; }
  friend constexpr auto operator<=>(Index, Index) = default;
};
using NodeId = Index<struct NodeTag>;
using ValueId = Index<struct ValueTag>;
using StorageId = Index<struct StorageTag>;
using ScopeId = Index<struct ScopeTag>;

enum class StorageOrigin : uint8_t {
  kParameter,       // an nn.Parameter of the module tree, on the device before the forward
  kBuffer,          // a registered buffer of a module, on the device before the forward
  kConstant,        // a tensor baked into the code (frozen weights, traced constants)
  kInput,           // a forward argument: allocated by the caller, alive throughout
  kActivation,      // allocated by a node during the forward: outputs and temporaries
  kHost,            // stays in host memory when the model runs on a GPU (0-dim scalars, plain
                    // tensor attributes that Module.to() does not move): never device memory
  kOptimizerState,  // a training step's optimizer state: made by the first step, kept after
};

const char* originName(StorageOrigin origin);
inline bool isWeight(StorageOrigin origin) {
  return origin == StorageOrigin::kParameter || origin == StorageOrigin::kBuffer ||
         origin == StorageOrigin::kConstant;
}

struct Storage {
  StorageOrigin origin = StorageOrigin::kActivation;
  int64_t bytes = 0;  // what the program asks the allocator for (nbytes), before rounding
  NodeId producer;    // kActivation: the node that allocates it
  std::string name;   // weights and inputs: "layer1.0.conv1.weight", "input 0"
  // In a training step (graph files): what it holds, for its whole life.
  format::Category category = format::Category::kUnknown;
  // The module that owns it, whoever allocated it: a parameter's, and its gradient's and
  // optimizer state's (graph files: Note [Everything a parameter has is its module's] in
  // python/mem_tracer/training.py). Empty without `owned`: its producer's module, or, for a
  // weight, the module its name says (attributeRequestedPeak).
  std::string owner_module{};
  bool owned = false;
};

struct SourceFrame {
  std::string file;  // as Python's co_filename has it: absolute for imported modules
  int64_t line = 0;  // 0 when the IR carries no location
  std::string function;

  bool known() const { return !file.empty() && line > 0; }
  friend auto operator<=>(const SourceFrame&, const SourceFrame&) = default;
};

// A Python name holding a value in one function-call scope, from just after node `after`
// (none: from the scope's start) until the name is bound again or the scope returns.
// Only eager semantics looks at bindings; Note [Eager and TorchScript lifetimes].
struct Binding {
  ScopeId scope;
  std::string variable;
  NodeId after;
};

enum class ValueKind : uint8_t {
  kTensor,
  kContainer,  // a list, tuple or dict: holds its elements alive for as long as it lives
};

struct Value {
  ValueKind kind = ValueKind::kTensor;
  StorageId storage;              // none for containers and for tensors of unknown size
  std::vector<int64_t> shape;     // tensors
  std::string dtype;              // tensors: "float32", "int64", ...
  bool size_known = true;         // false: an op the front end could not size produced it
  NodeId producer;                // none for inputs, weights and constants
  std::vector<ValueId> elements;  // containers: the values they hold
  // Containers: elements taken out again (list.pop(), clear, an overwritten slot), each held
  // by the container only until the node after which it was taken out.
  std::vector<std::pair<ValueId, NodeId>> taken_out;
  std::vector<Binding> bindings;  // eager semantics: the Python names that hold it
};

enum class MemoryEventKind : uint8_t {
  kAllocate,  // the node asks the allocator for this storage
  kRelease,   // the node gives back a temporary it allocated itself
};

struct MemoryEvent {
  MemoryEventKind kind;
  StorageId storage;
};

struct Node {
  std::string op;                   // "aten::conv2d", "prim::ListConstruct"
  std::vector<ValueId> inputs;      // tensors and containers it reads
  std::vector<ValueId> outputs;     // tensors and containers it returns (may be existing values)
  std::vector<MemoryEvent> events;  // in the order the node performs them
  std::vector<SourceFrame> stack;   // innermost first
  std::string module_path;          // "layer1.0.conv1"; "" for the root module
  ScopeId scope;                    // the innermost function-call scope it runs in
  int64_t flops = 0;                // filled by countFlops()
  bool size_unknown = false;        // its tensor outputs could not be sized
  // A drop point of the TorchScript interpreter rather than an op: the end of an if or a loop,
  // which holds every outer value its blocks use (Note [Eager and TorchScript lifetimes]).
  // Its inputs are uses in TorchScript semantics only.
  bool torch_script_only = false;
  format::TrainingPhase phase = format::TrainingPhase::kNone;  // graph files of a training step
  // False for a node that runs outside every module (a graph file's "module": null: the loss,
  // the optimizer's step); module_path is then "".
  bool in_module = true;
};

// One function invocation (module forward, functional, helper). Scopes nest dynamically.
struct Scope {
  ScopeId parent;
  std::string function;
};

enum class AssumptionKind : uint8_t {
  kUnknownOp,            // outputs could not be sized: the estimate is a lower bound
  kDataDependentBranch,  // an `if` on tensor data: the larger branch was taken
  kDataDependentLoop,    // a loop whose trip count depends on tensor data
  kUnsizedDependency,    // outputs unsized because an input was (counted, not listed)
  kSemantics,            // how a semantics was approximated for this graph
  kDataDependentSize,    // how many elements nonzero or a mask selects: example or worst case
  kApproximate,          // a kernel the recording could not run as the device does: bracketed
};

struct Assumption {
  AssumptionKind kind;
  std::string op;
  std::vector<SourceFrame> stack;
  std::string detail;
  bool makes_lower_bound = false;
  // kApproximate: how far the peak may lie above (under_by) or below (over_by) the figure for
  // this call (Note [cuDNN's RNN reserve, bracketed] in device_kernels.py).
  int64_t over_by_at_most = 0;
  int64_t under_by_at_most = 0;
};

// Eager semantics: a value some Python name may hold that the front end could not name (the
// statement's source file cannot be read). The eager figure frees it at its last use; held
// until `scope` ends, it gives the other end of the bracket (Note [Eager and TorchScript
// lifetimes]).
struct UnnamedValue {
  ValueId value;
  ScopeId scope;
};

// A fused kernel the estimate assumes the device runs (sdpa: flash, efficient, cudnn,
// flash_cpu or math), and why: the profile's rules for the call's inputs.
struct KernelChoice {
  std::string op;
  std::string kernel;
  std::string why;
  std::vector<SourceFrame> stack;
};

struct Graph {
  std::vector<Storage> storages;
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<Scope> scopes;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;  // alive when the forward returns
  std::vector<Assumption> assumptions;
  std::vector<UnnamedValue> unnamed_values;
  // A training step's graph (graph files): storages have categories, nodes phases, and the
  // estimate reports the step's peak by category (Estimate::training).
  bool training_step = false;
  // The front end counted each node's FLOPs itself (graph files): countFlops keeps them.
  bool flops_counted = false;
  std::vector<KernelChoice> kernel_choices;

  Storage& storage(StorageId id) { return storages[id.value]; }
  const Storage& storage(StorageId id) const { return storages[id.value]; }
  Value& value(ValueId id) { return values[id.value]; }
  const Value& value(ValueId id) const { return values[id.value]; }
  Node& node(NodeId id) { return nodes[id.value]; }
  const Node& node(NodeId id) const { return nodes[id.value]; }
  Scope& scope(ScopeId id) { return scopes[id.value]; }
  const Scope& scope(ScopeId id) const { return scopes[id.value]; }

  StorageId addStorage(Storage storage);
  ValueId addValue(Value value);
  NodeId addNode(Node node);
  ScopeId addScope(Scope scope);
  // Adds `assumption` unless one of its kind saying the same is there already.
  void assumeOnce(Assumption assumption);

  bool lowerBound() const;
};

// Records what `container` no longer holds, given what it holds now (`held`), as taken out after
// node `after`; an element it holds again is held for as long as the container lives.
void noteTakenOut(Value& container, const std::vector<ValueId>& held, NodeId after);

// Whether a file belongs to the user's own code: tracer/common/user_code.h, the one rule the
// report's "innermost frame in user code" grouping uses too, so both sides name the same line.
bool isUserCode(const std::string& file);

// The innermost frame of `stack` in user code, or an unknown frame if there is none.
SourceFrame innermostUserFrame(const std::vector<SourceFrame>& stack);

// The innermost frame, or an unknown frame for an empty stack.
SourceFrame innermostFrame(const std::vector<SourceFrame>& stack);

}  // namespace memtrace::estimator
