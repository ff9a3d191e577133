#include "estimator/torchscript/graph_builder.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/jit_exception.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "estimator/errors.h"
#include "estimator/torchscript/meta_allocation_recorder.h"

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
//   - a device argument naming CUDA or the profile's device is taken as meta, and
//     prim::device, is_cuda and is_cpu answer for the profile's device (cuda:0 or cpu): the
//     model runs as on the device it is estimated for, fast paths included;
//   - ops in the rule table (Note [Op rules]) are sized by their rule: fused kernels as the
//     profile's device runs them, the kernel chosen named in the output.
// What each op allocates, temporaries included, comes from the meta allocator
// (Note [Meta allocations]).

namespace memtrace::estimator::torchscript {

namespace {

namespace jit = torch::jit;

constexpr int64_t kMaxLoopIterations = 1'000'000;  // a guard against runaway while-loops

// A `raise` the model executes for the given inputs.
struct ModelRaised {
  std::string message;
  std::vector<SourceFrame> stack;
};

// The dtypes the estimator names (input_spec.h's canonical names) and their ATen types.
constexpr std::pair<std::string_view, at::ScalarType> kDtypes[] = {
    {"float32", at::kFloat},
    {"float16", at::kHalf},
    {"bfloat16", at::kBFloat16},
    {"float64", at::kDouble},
    {"int64", at::kLong},
    {"int32", at::kInt},
    {"int16", at::kShort},
    {"int8", at::kChar},
    {"uint8", at::kByte},
    {"bool", at::kBool},
    {"complex64", at::kComplexFloat},
    {"complex128", at::kComplexDouble},
};

std::string dtypeName(at::ScalarType type) {
  for (const auto& [name, scalar_type] : kDtypes) {
    if (scalar_type == type) return std::string(name);
  }
  return c10::toString(type);  // one --input cannot name, but a model may make
}

at::ScalarType scalarTypeOf(std::string_view dtype) {
  for (const auto& [name, scalar_type] : kDtypes) {
    if (name == dtype) return scalar_type;
  }
  throw EstimateError("dtype " + std::string(dtype) + " has no ATen type");
}

std::string shapeText(const at::Tensor& tensor) {
  std::string text = "[";
  for (int64_t dimension : tensor.sizes()) {
    text += (text.size() > 1 ? ", " : "") + std::to_string(dimension);
  }
  return text + "]";
}

bool isMetaLimitation(const std::exception& error) {
  if (dynamic_cast<const c10::NotImplementedError*>(&error)) return true;
  std::string message = error.what();
  return message.find("Meta tensors") != std::string::npos ||
         message.find("meta tensor") != std::string::npos ||
         message.find("'Meta' backend") != std::string::npos ||
         message.find("convolution_overrideable") != std::string::npos;
}

std::string errorMessage(const std::exception& error) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    return firstLineOf(c10_error->what_without_backtrace());
  }
  return firstLineOf(error.what());
}

bool holdsTensors(const c10::TypePtr& type) {
  if (type->cast<c10::TensorType>()) return true;
  for (const c10::TypePtr& contained : type->containedTypes()) {
    if (holdsTensors(contained)) return true;
  }
  return false;
}

// Strips the digits TorchScript's printer appends to make a rebound name unique (att, att0,
// att1 in the saved code are all Python's `att`).
std::string withoutTrailingDigits(std::string name) {
  while (!name.empty() && std::isdigit(static_cast<unsigned char>(name.back()))) name.pop_back();
  return name;
}

// Pops the last `count` values of a stack, in order.
std::vector<c10::IValue> popValues(jit::Stack& stack, size_t count) {
  std::vector<c10::IValue> values(std::make_move_iterator(stack.end() - count),
                                  std::make_move_iterator(stack.end()));
  stack.resize(stack.size() - count);
  return values;
}

// Python's str.format for the messages models build before they raise: "{}" placeholders.
std::string formatMessage(const std::string& pattern, const std::vector<c10::IValue>& values) {
  std::string text;
  size_t next = 0;
  for (size_t at = 0; at < pattern.size(); ++at) {
    if (pattern.compare(at, 2, "{}") == 0 && next < values.size()) {
      std::ostringstream value;
      value << values[next++];
      text += value.str();
      ++at;
    } else {
      text += pattern[at];
    }
  }
  return text;
}

// The nodes the TorchScript interpreter runs as instructions of its own rather than as
// registered operators (runtime/interpreter/code_impl.h). LibTorch does not export the
// functions behind them (runtime/vararg_functions.h); these do the same.
std::optional<jit::Operation> interpreterInstruction(const jit::Node* node) {
  size_t inputs = node->inputs().size();
  switch (node->kind()) {
    case jit::prim::ListUnpack: {
      size_t outputs = node->outputs().size();
      return [outputs](jit::Stack& stack) {
        c10::List<c10::IValue> list = stack.back().toList();
        TORCH_CHECK(list.size() == outputs, "expected ", outputs, " values to unpack, got ",
                    list.size());
        stack.pop_back();
        for (const c10::IValue& element : list) stack.push_back(element);
      };
    }
    case jit::prim::TupleConstruct: {
      c10::TupleTypePtr type = node->output()->type()->expect<c10::TupleType>();
      return [type, inputs](jit::Stack& stack) {
        std::vector<c10::IValue> elements = popValues(stack, inputs);
        stack.emplace_back(type->name() ? c10::ivalue::Tuple::createNamed(std::move(elements), type)
                                        : c10::ivalue::Tuple::create(std::move(elements)));
      };
    }
    case jit::prim::ListConstruct: {
      c10::TypePtr element = node->output()->type()->expectRef<c10::ListType>().getElementType();
      return [element, inputs](jit::Stack& stack) {
        c10::impl::GenericList list(element);
        for (c10::IValue& value : popValues(stack, inputs)) list.push_back(std::move(value));
        stack.emplace_back(std::move(list));
      };
    }
    case jit::prim::DictConstruct: {
      const auto& type = node->output()->type()->expectRef<c10::DictType>();
      c10::TypePtr key = type.getKeyType();
      c10::TypePtr value = type.getValueType();
      return [key, value, inputs](jit::Stack& stack) {
        c10::impl::GenericDict dict(key, value);
        std::vector<c10::IValue> values = popValues(stack, inputs);
        for (size_t at = 0; at + 1 < values.size(); at += 2) {
          dict.insert_or_assign(values[at], values[at + 1]);
        }
        stack.emplace_back(std::move(dict));
      };
    }
    case jit::prim::CreateObject: {
      c10::ClassTypePtr type = node->output()->type()->expect<c10::ClassType>();
      return [type](jit::Stack& stack) {
        stack.emplace_back(c10::ivalue::Object::create(
            c10::StrongTypePtr(type->compilation_unit(), type), type->numAttributes()));
      };
    }
    case jit::prim::isinstance: {
      std::vector<c10::TypePtr> types = node->tys(jit::attr::types);
      return [types](jit::Stack& stack) {
        c10::TypePtr type = stack.back().type();
        stack.pop_back();
        bool matches = std::any_of(types.begin(), types.end(), [&](const c10::TypePtr& candidate) {
          return type->isSubtypeOf(*candidate);
        });
        stack.emplace_back(matches);
      };
    }
    case jit::prim::TupleSlice: {
      int64_t begin = node->i(jit::attr::beg);
      int64_t end = node->i(jit::attr::end);
      return [begin, end](jit::Stack& stack) {
        const auto& elements = stack.back().toTupleRef().elements();
        std::vector<c10::IValue> slice(elements.begin() + begin, elements.begin() + end);
        stack.pop_back();
        stack.emplace_back(c10::ivalue::Tuple::create(std::move(slice)));
      };
    }
    case jit::aten::format:
      return [inputs](jit::Stack& stack) {
        std::vector<c10::IValue> values = popValues(stack, inputs);
        std::string pattern = values.front().toStringRef();
        values.erase(values.begin());
        stack.emplace_back(formatMessage(pattern, values));
      };
    default:
      return std::nullopt;
  }
}

// A module path split before its last component: "layers.0" -> {"layers", "0"}.
std::pair<std::string_view, std::string_view> splitLastComponent(std::string_view path) {
  size_t dot = path.rfind('.');
  if (dot == std::string_view::npos) return {{}, path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

// Whether two module paths are one module, or two entries of one container (`layers.0` and
// `layers.1`).
bool isRepeatedCall(std::string_view previous, std::string_view next) {
  if (previous.empty() || next.empty()) return false;
  if (previous == next) return true;
  auto numeric = [](std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char character) {
      return std::isdigit(static_cast<unsigned char>(character));
    });
  };
  auto [previous_parent, previous_last] = splitLastComponent(previous);
  auto [next_parent, next_last] = splitLastComponent(next);
  return previous_parent == next_parent && numeric(previous_last) && numeric(next_last);
}

class GraphBuilder {
 public:
  GraphBuilder(const jit::Module& module, BuildCaches& caches)
      : module_(module),
        locations_(caches.locations),
        source_files_(caches.source_files),
        shape_functions_(caches.shape_functions),
        op_rules_(caches.op_rules) {}

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

  // A statement of a traced model's Python code that is still running, and the values its last
  // node so far produced (after node `after`): when the next node belongs to another statement,
  // those are what the statement assigns.
  struct PendingStatement {
    SourceFrame statement;
    ScopeId scope;
    std::vector<ValueId> values;
    NodeId after;
    std::string last_callee;  // the module the statement last called
  };

  // One function invocation.
  struct Frame {
    ScopeId scope;
    std::string module_path;
    std::string function;
    std::vector<SourceFrame> callers;  // call sites, innermost first (scripted code)
    std::vector<SourceFrame> last_stack;
    std::string last_statement;
    bool last_traced = false;
    size_t module_depth = 0;                      // nn.Module calls from the root module
    std::vector<SourceFrame> first_traced_stack;  // of the first traced node run in this call
    // Traced graphs (Note [Names in traced graphs]): the statements the last node belongs to,
    // outermost first, and the scopes of the Python functions they are in.
    std::vector<PendingStatement> statements;
    std::map<std::string, ScopeId> traced_scopes;
  };

  // Where a node runs: its Python stack, the statement it belongs to, the scope it binds in.
  struct Location {
    std::vector<SourceFrame> stack;
    std::vector<std::string> targets;  // names the statement binds
    ScopeId scope;
    std::string module_path;
    bool traced = false;
  };

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
  // prim::device, is_cuda and is_cpu of a meta tensor answer for the profile's device.
  c10::Device profileDevice() const {
    return op_rules_.kernels().device == "cpu" ? c10::Device(at::kCPU) : c10::Device(at::kCUDA, 0);
  }
  static bool answersDevice(const jit::Node* node) {
    static const c10::Symbol kIsCpu = c10::Symbol::fromQualString("prim::is_cpu");
    return node->kind() == jit::prim::device || node->kind() == jit::prim::is_cuda ||
           node->kind() == kIsCpu;
  }
  c10::IValue deviceAnswer(const jit::Node* node) const {
    if (node->kind() == jit::prim::device) return profileDevice();
    return (node->kind() == jit::prim::is_cuda) == profileDevice().is_cuda();
  }
  void runUnsized(jit::Node* node, Frame& frame, Environment& environment,
                  const std::vector<Slot>& inputs, const std::string& reason, AssumptionKind kind);
  std::vector<Slot> runBranch(jit::Block* block, Frame& frame, Environment& environment);

  Location locate(const jit::Node* node, Frame& frame);
  std::vector<std::string> targetsOf(const SourceFrame& statement);
  void enterStatements(Frame& frame, const std::vector<SourceFrame>& stack, Location& location,
                       const std::string* callee = nullptr);
  void noteStatementValues(Frame& frame, const std::vector<ValueId>& values);
  void finishStatements(Frame& frame, size_t keep);
  void emitDropPoint(const jit::Node* node, const Location& location, const Frame& frame,
                     const Environment& environment);
  const std::vector<const jit::Value*>& freeVariables(const jit::Node* node);
  void bindOutputs(const jit::Node* node, const Location& location,
                   const std::vector<Slot>& outputs);
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
  [[noreturn]] void failOp(const jit::Node* node, const Location& location,
                           const std::vector<Slot>& inputs, const std::string& why);

  const jit::Module& module_;
  Graph graph_;
  MetaAllocationRecorder recorder_;
  SourceLocations& locations_;
  SourceFileCache& source_files_;
  ShapeFunctionSizer& shape_functions_;
  const OpRules& op_rules_;

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
  // kActivation storages registered since the current node started, with their meta storage.
  std::vector<std::pair<StorageId, const c10::StorageImpl*>> new_storages_;
};

// ---------------------------------------------------------------------------------------------
// Weights and inputs

void GraphBuilder::registerModuleTensors(const jit::Module& module, const std::string& path) {
  module_paths_.emplace(module._ivalue().get(), path);
  // Module._apply, which Module.to(device) runs, converts the children first, then the
  // module's own parameters, then its buffers: the order they reach the device.
  const c10::ClassTypePtr& type = module.type();
  const c10::intrusive_ptr<c10::ivalue::Object>& object = module._ivalue();
  for (size_t slot = 0; slot < type->numAttributes(); ++slot) {
    const c10::IValue& value = object->getSlot(slot);
    if (!value.isObject() || !value.toObject()->type()->is_module()) continue;
    std::string name = type->getAttributeName(slot);
    registerModuleTensors(jit::Module(value.toObject()), path.empty() ? name : path + "." + name);
  }
  for (bool parameters : {true, false}) {
    for (size_t slot = 0; slot < type->numAttributes(); ++slot) {
      bool wanted = parameters ? type->is_parameter(slot) : type->is_buffer(slot);
      const c10::IValue& value = object->getSlot(slot);
      if (!wanted || !value.isTensor()) continue;
      std::string name = type->getAttributeName(slot);
      registerWeight(value.toTensor(),
                     parameters ? StorageOrigin::kParameter : StorageOrigin::kBuffer,
                     path.empty() ? name : path + "." + name);
    }
  }
}

ValueId GraphBuilder::registerWeight(const at::Tensor& tensor, StorageOrigin origin,
                                     const std::string& name) {
  auto known = meta_weights_.find(tensor.unsafeGetTensorImpl());
  if (known != meta_weights_.end()) return tensor_values_.at(known->second.unsafeGetTensorImpl());
  // Shared storage (tied weights) is counted and allocated once, under its first name.
  const c10::StorageImpl* real = tensor.storage().unsafeGetStorageImpl();
  auto [storage, inserted] = storages_.try_emplace(real);
  if (inserted) {
    storage->second = graph_.addStorage(
        {origin, static_cast<int64_t>(tensor.storage().nbytes()), NodeId(), name});
  }
  at::Tensor meta = at::empty_strided(tensor.sizes(), tensor.strides(),
                                      tensor.options().device(at::kMeta).requires_grad(false));
  storages_[meta.storage().unsafeGetStorageImpl()] = storage->second;
  meta_weights_.emplace(tensor.unsafeGetTensorImpl(), meta);
  keep_alive_.push_back(tensor);
  keep_alive_.push_back(meta);
  Value value;
  value.storage = storage->second;
  value.shape = meta.sizes().vec();
  value.dtype = dtypeName(meta.scalar_type());
  ValueId id = graph_.addValue(std::move(value));
  tensor_values_[meta.unsafeGetTensorImpl()] = id;
  return id;
}

// A module attribute as the abstract execution sees it: tensors become their meta twins.
c10::IValue GraphBuilder::attributeValue(const c10::IValue& value, const std::string& name) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    auto known = meta_weights_.find(tensor.unsafeGetTensorImpl());
    if (known != meta_weights_.end()) return known->second;
    if (!tensor.defined()) return value;
    if (tensor.dim() == 0) {
      // A plain 0-dim tensor attribute is a number in disguise; Module.to() leaves it on the
      // host, and so does the estimate.
      if (!tensor_values_.count(tensor.unsafeGetTensorImpl())) {
        StorageId storage =
            graph_.addStorage({StorageOrigin::kHost,
                               static_cast<int64_t>(tensor.storage().nbytes()), NodeId(), name});
        Value host;
        host.storage = storage;
        host.dtype = dtypeName(tensor.scalar_type());
        tensor_values_[tensor.unsafeGetTensorImpl()] = graph_.addValue(std::move(host));
        keep_alive_.push_back(tensor);
      }
      return value;
    }
    // A tensor attribute that is neither parameter nor buffer: counted with the buffers.
    registerWeight(tensor, StorageOrigin::kBuffer, name);
    return meta_weights_.at(tensor.unsafeGetTensorImpl());
  }
  if (value.isList()) {
    c10::impl::GenericList converted(value.toList().elementType());
    for (const c10::IValue& element : value.toList()) {
      converted.push_back(attributeValue(element, name));
    }
    return converted;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      elements.push_back(attributeValue(element, name));
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Values

NodeId GraphBuilder::lastNode() const {
  return graph_.nodes.empty() ? NodeId() : NodeId(graph_.nodes.size() - 1);
}

ValueId GraphBuilder::tensorValue(const at::Tensor& tensor, NodeId producer) {
  auto known = tensor_values_.find(tensor.unsafeGetTensorImpl());
  if (known != tensor_values_.end()) return known->second;
  Value value;
  value.producer = producer;
  value.shape = tensor.sizes().vec();
  value.dtype = dtypeName(tensor.scalar_type());
  if (tensor.has_storage()) {
    const c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
    auto [storage, inserted] = storages_.try_emplace(impl);
    if (inserted) {
      StorageOrigin origin = tensor.is_meta() ? StorageOrigin::kActivation : StorageOrigin::kHost;
      storage->second = graph_.addStorage(
          {origin, static_cast<int64_t>(tensor.storage().nbytes()), producer, {}});
      if (origin == StorageOrigin::kActivation) new_storages_.emplace_back(storage->second, impl);
    }
    value.storage = storage->second;
  } else {
    value.size_known = false;  // sparse or nested layouts: no single storage to count
  }
  ValueId id = graph_.addValue(std::move(value));
  tensor_values_[tensor.unsafeGetTensorImpl()] = id;
  keep_alive_.push_back(tensor);
  return id;
}

void GraphBuilder::collectValues(const c10::IValue& value, std::vector<ValueId>& ids) {
  if (value.isTensor()) {
    if (value.toTensor().defined()) {
      auto known = tensor_values_.find(value.toTensor().unsafeGetTensorImpl());
      if (known != tensor_values_.end()) ids.push_back(known->second);
    }
  } else if (value.isList() || value.isTuple() || value.isGenericDict()) {
    auto known = container_values_.find(value.internalToPointer());
    if (known != container_values_.end()) ids.push_back(known->second);
  }
}

// The neutral value of a runtime value, registering what is new (produced by `producer`).
// Nothing (an invalid id) for values that are neither tensors nor containers of them.
ValueId GraphBuilder::valueOf(const c10::IValue& value, NodeId producer) {
  if (value.isTensor()) {
    if (!value.toTensor().defined()) return ValueId();
    return tensorValue(value.toTensor(), producer);
  }
  if (!(value.isList() || value.isTuple() || value.isGenericDict())) return ValueId();
  if (value.isList() && !holdsTensors(value.toList().elementType())) return ValueId();
  auto [entry, inserted] = container_values_.try_emplace(value.internalToPointer());
  if (inserted) {
    Value container;
    container.kind = ValueKind::kContainer;
    container.producer = producer;
    entry->second = graph_.addValue(std::move(container));
    keep_alive_.push_back(value);
  }
  refreshContainer(entry->second, value, producer);
  return entry->second;
}

// Lists grow (aten::append): whatever a container holds now, it keeps alive.
void GraphBuilder::refreshContainer(ValueId container, const c10::IValue& value, NodeId producer) {
  auto add = [&](const c10::IValue& element) {
    ValueId id = valueOf(element, producer);
    if (!id.valid()) return;
    std::vector<ValueId>& elements = graph_.value(container).elements;
    if (std::find(elements.begin(), elements.end(), id) == elements.end()) {
      elements.push_back(id);
    }
  };
  if (value.isList()) {
    for (const c10::IValue& element : value.toList()) add(element);
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) add(element);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      add(entry.key());
      add(entry.value());
    }
  }
}

std::vector<ValueId> GraphBuilder::valuesOf(const Slot& slot) {
  std::vector<ValueId> ids;
  if (!slot.known) {
    if (slot.unknown_value.valid()) ids.push_back(slot.unknown_value);
    return ids;
  }
  collectValues(slot.value, ids);
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Locations and names

// Note [Names in traced graphs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A traced graph keeps no reliable Python names: a value is named after whichever variable the
// tracer found holding it (F.softmax's parameter `input`, say), most values not at all, and
// module calls have no source range. What it keeps is the whole Python stack of every op, and
// the model's source file is usually still on disk. So the front end follows statements: the
// frames of this module's segment of the stack (splitByModuleCalls), outermost first, are the
// statements running at each level of Python calls (the forward's line, then the line in a
// helper it called). A statement's value is what its last node produced; when the next node
// belongs to another statement at that level, the statement is done and its value is bound to
// the name on the left of its `=` (read from the file), in the scope of the function the
// statement is in. A module call is a node of its caller's statement, found in the stack of
// the first node the callee ran. Statements that unpack into several names use the debug
// names, which the tracer sets from those very variables.

std::vector<std::string> GraphBuilder::targetsOf(const SourceFrame& statement) {
  if (!statement.known()) return {};
  std::optional<std::string> line = source_files_.line(statement.file, statement.line);
  return line ? assignmentTargets(*line) : std::vector<std::string>();
}

void GraphBuilder::enterStatements(Frame& frame, const std::vector<SourceFrame>& stack,
                                   Location& location, const std::string* callee) {
  std::vector<std::vector<SourceFrame>> segments = splitByModuleCalls(stack);
  std::vector<SourceFrame> levels;
  if (frame.module_depth + 1 < segments.size()) {
    levels.assign(segments[frame.module_depth + 1].rbegin(),
                  segments[frame.module_depth + 1].rend());
  }
  size_t common = 0;
  while (common < levels.size() && common < frame.statements.size() &&
         frame.statements[common].statement == levels[common]) {
    ++common;
  }
  // The same line calling the same module again, or the next one of a ModuleList or Sequential,
  // is a loop going round (`for layer in self.layers: x = layer(x)`), not one statement calling
  // two modules (`x = self.pool(self.conv(x))`): the previous round's assignment is done.
  if (callee && common == levels.size() && common > 0 &&
      isRepeatedCall(frame.statements[common - 1].last_callee, *callee)) {
    --common;
  }
  finishStatements(frame, common);
  // The outermost level is the module's forward, which is this frame's own scope (module calls
  // it makes are scopes inside it); the functions it calls get scopes of their own.
  std::string key;
  for (size_t level = 0; level < levels.size(); ++level) {
    key += levels[level].file + ":" + levels[level].function + "/";
    if (level < common) continue;
    ScopeId scope = frame.scope;
    if (level > 0) {
      auto [entry, inserted] = frame.traced_scopes.try_emplace(key);
      if (inserted) {
        entry->second =
            graph_.addScope({frame.statements[level - 1].scope, levels[level].function});
      }
      scope = entry->second;
    }
    frame.statements.push_back({levels[level], scope, {}, NodeId(), {}});
  }
  if (callee && !frame.statements.empty()) frame.statements.back().last_callee = *callee;
  location.traced = true;
  location.scope = frame.statements.empty() ? frame.scope : frame.statements.back().scope;
  location.targets =
      frame.statements.empty() ? std::vector<std::string>() : targetsOf(levels.back());
}

void GraphBuilder::noteStatementValues(Frame& frame, const std::vector<ValueId>& values) {
  if (values.empty()) return;
  for (PendingStatement& pending : frame.statements) {
    pending.values = values;
    pending.after = lastNode();
  }
}

// Binds what the finished statements (those past the first `keep`) assigned.
void GraphBuilder::finishStatements(Frame& frame, size_t keep) {
  while (frame.statements.size() > keep) {
    PendingStatement& pending = frame.statements.back();
    std::vector<std::string> targets = targetsOf(pending.statement);
    if (targets.size() == 1) {
      for (ValueId id : pending.values) {
        graph_.value(id).bindings.push_back({pending.scope, targets.front(), pending.after});
      }
    }
    frame.statements.pop_back();
  }
}

GraphBuilder::Location GraphBuilder::locate(const jit::Node* node, Frame& frame) {
  const RangeLocation& range = locations_.resolve(node->sourceRange());
  Location location;
  location.scope = frame.scope;
  location.module_path = frame.module_path;
  if (!range.known) {
    // prim nodes (ListUnpack, GetAttr) carry no range: they belong to the statement before.
    location.stack = frame.last_stack.empty() ? frame.callers : frame.last_stack;
    if (frame.last_traced && !frame.statements.empty()) {
      location.traced = true;
      location.scope = frame.statements.back().scope;
      location.targets = targetsOf(frame.statements.back().statement);
    } else {
      location.targets = assignmentTargets(frame.last_statement);
    }
    return location;
  }
  if (range.traced) {
    location.stack = range.frames;
    enterStatements(frame, location.stack, location);
    if (frame.first_traced_stack.empty()) frame.first_traced_stack = location.stack;
    frame.last_statement.clear();
  } else {
    SourceFrame here = range.frames.front();
    here.function = frame.function;
    location.stack.reserve(frame.callers.size() + 1);
    location.stack.push_back(std::move(here));
    location.stack.insert(location.stack.end(), frame.callers.begin(), frame.callers.end());
    location.targets = assignmentTargets(range.statement);
    frame.last_statement = range.statement;
  }
  frame.last_stack = location.stack;
  frame.last_traced = range.traced;
  return location;
}

// Eager lifetimes need to know which Python name holds each value (Note [Eager and
// TorchScript lifetimes]). TorchScript keeps the names as debug names (`out.1`, renamed
// `out0` when the saved code binds `out` again); the statement the node comes from says which
// names it binds, and settles what a debug name does not (a traced value is named after the
// first variable the tracer found holding it).
void GraphBuilder::bindOutputs(const jit::Node* node, const Location& location,
                               const std::vector<Slot>& outputs) {
  NodeId after = lastNode();
  for (size_t index = 0; index < node->outputs().size() && index < outputs.size(); ++index) {
    const jit::Value* output = node->outputs()[index];
    if (!output->hasDebugName()) continue;
    std::vector<ValueId> ids = valuesOf(outputs[index]);
    if (ids.empty()) continue;
    std::string name = output->debugNameBase();
    const std::vector<std::string>& targets = location.targets;
    auto bound = [&](const std::string& candidate) {
      return std::find(targets.begin(), targets.end(), candidate) != targets.end();
    };
    if (!bound(name) && bound(withoutTrailingDigits(name))) name = withoutTrailingDigits(name);
    if (location.traced) {
      // Only unpacking statements are left to debug names (Note [Names in traced graphs]).
      if (targets.size() < 2 || !bound(name)) continue;
    } else if (!bound(name) && targets.size() == 1) {
      name = targets.front();
    }
    for (ValueId id : ids) graph_.value(id).bindings.push_back({location.scope, name, after});
  }
}

// ---------------------------------------------------------------------------------------------
// Nodes

NodeId GraphBuilder::emitNode(const jit::Node* node, const Location& location, const Frame& frame,
                              const std::vector<Slot>& inputs) {
  Node neutral;
  neutral.op = node->kind().toQualString();
  for (const Slot& slot : inputs) {
    for (ValueId id : valuesOf(slot)) {
      if (std::find(neutral.inputs.begin(), neutral.inputs.end(), id) == neutral.inputs.end()) {
        neutral.inputs.push_back(id);
      }
    }
  }
  neutral.stack = location.stack;
  neutral.module_path = frame.module_path;
  neutral.scope = location.scope;
  return graph_.addNode(std::move(neutral));
}

// Registers a node's outputs and turns the meta allocations seen while it ran into its memory
// events: storages its outputs live on are allocated by it (in the order it allocated them),
// and what it allocated and dropped again are its temporaries.
void GraphBuilder::recordOutputs(NodeId id, const std::vector<c10::IValue>& outputs,
                                 const std::vector<MetaAllocationEvent>& allocations) {
  new_storages_.clear();
  std::vector<ValueId> output_ids;
  for (const c10::IValue& output : outputs) {
    ValueId value = valueOf(output, id);
    if (value.valid()) output_ids.push_back(value);
  }
  // New storages, by the id the meta allocator gave them.
  std::unordered_map<uint64_t, StorageId> output_storages;
  std::vector<StorageId> unrecorded;
  for (const auto& [storage, impl] : new_storages_) {
    uint64_t allocation = MetaAllocationRecorder::allocationId(impl->data_ptr());
    if (allocation != 0)
      output_storages.emplace(allocation, storage);
    else
      unrecorded.push_back(storage);
  }
  std::unordered_set<uint64_t> released;
  for (const MetaAllocationEvent& event : allocations) {
    if (!event.allocate) released.insert(event.id);
  }
  std::vector<MemoryEvent> events;
  std::unordered_map<uint64_t, StorageId> temporaries;
  std::vector<StorageId> left_over;
  std::unordered_set<uint64_t> emitted;
  for (const MetaAllocationEvent& event : allocations) {
    if (event.allocate) {
      auto output = output_storages.find(event.id);
      if (output != output_storages.end()) {
        events.push_back({MemoryEventKind::kAllocate, output->second});
        emitted.insert(event.id);
        continue;
      }
      StorageId temporary = graph_.addStorage({StorageOrigin::kActivation, event.bytes, id, {}});
      temporaries.emplace(event.id, temporary);
      events.push_back({MemoryEventKind::kAllocate, temporary});
      if (!released.count(event.id)) left_over.push_back(temporary);
    } else {
      auto temporary = temporaries.find(event.id);
      if (temporary != temporaries.end()) {
        events.push_back({MemoryEventKind::kRelease, temporary->second});
      }
    }
  }
  for (const auto& [allocation, storage] : output_storages) {
    if (!emitted.count(allocation)) unrecorded.push_back(storage);
  }
  std::sort(unrecorded.begin(), unrecorded.end());
  for (StorageId storage : unrecorded) events.push_back({MemoryEventKind::kAllocate, storage});
  // Kept by something other than the outputs (an op's cache): charged to the op while it runs.
  for (StorageId storage : left_over) events.push_back({MemoryEventKind::kRelease, storage});
  Node& node = graph_.node(id);
  node.events = std::move(events);
  node.outputs = std::move(output_ids);
}

void GraphBuilder::failOp(const jit::Node* node, const Location& location,
                          const std::vector<Slot>& inputs, const std::string& why) {
  std::string shapes;
  for (const Slot& slot : inputs) {
    if (slot.known && slot.value.isTensor() && slot.value.toTensor().defined()) {
      shapes += (shapes.empty() ? "" : ", ") + shapeText(slot.value.toTensor());
    }
  }
  SourceFrame user = innermostUserFrame(location.stack);
  SourceFrame where = user.known() ? user : innermostFrame(location.stack);
  std::string message = std::string(node->kind().toQualString());
  if (where.known()) message += " at " + where.file + ":" + std::to_string(where.line);
  if (!location.module_path.empty()) message += " (module " + location.module_path + ")";
  message += " rejects inputs of shapes " + (shapes.empty() ? "(none)" : shapes) + ": " + why;
  throw EstimateError(message);
}

void GraphBuilder::runUnsized(jit::Node* node, Frame& frame, Environment& environment,
                              const std::vector<Slot>& inputs, const std::string& reason,
                              AssumptionKind kind) {
  Location location = locate(node, frame);
  NodeId id = emitNode(node, location, frame, inputs);
  Node& neutral = graph_.node(id);
  neutral.size_unknown = true;
  for (const jit::Value* output : node->outputs()) {
    Slot slot;
    slot.known = false;
    if (holdsTensors(output->type())) {
      Value value;
      value.kind =
          output->type()->cast<c10::TensorType>() ? ValueKind::kTensor : ValueKind::kContainer;
      value.size_known = false;
      value.producer = id;
      slot.unknown_value = graph_.addValue(std::move(value));
      graph_.node(id).outputs.push_back(slot.unknown_value);
    }
    environment[output] = slot;
  }
  bool produces_tensors =
      std::any_of(node->outputs().begin(), node->outputs().end(),
                  [](const jit::Value* output) { return holdsTensors(output->type()); });
  if (produces_tensors) {
    graph_.assumptions.push_back({kind, node->kind().toQualString(), location.stack, reason,
                                  /*makes_lower_bound=*/true});
  }
}

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
      Location location = locate(node, frame);
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

void GraphBuilder::runConstant(jit::Node* node, Environment& environment) {
  auto cached = constants_.find(node);
  if (cached == constants_.end()) {
    std::optional<c10::IValue> value = jit::toIValue(node->output());
    c10::IValue constant = value ? *value : c10::IValue();
    if (constant.isTensor() && constant.toTensor().defined()) {
      const at::Tensor& tensor = constant.toTensor();
      if (tensor.dim() == 0) {
        // A Python number the tracer captured as a tensor: it stays on the host, and a real
        // value keeps shape arithmetic exact. Note [Abstract execution].
        if (!tensor_values_.count(tensor.unsafeGetTensorImpl())) {
          StorageId storage = graph_.addStorage({StorageOrigin::kHost,
                                                 static_cast<int64_t>(tensor.storage().nbytes()),
                                                 NodeId(), "constant"});
          Value host;
          host.storage = storage;
          host.dtype = dtypeName(tensor.scalar_type());
          tensor_values_[tensor.unsafeGetTensorImpl()] = graph_.addValue(std::move(host));
          keep_alive_.push_back(tensor);
        }
      } else {
        // Frozen weights and tensors baked into a trace: on the device with the module.
        registerWeight(tensor, StorageOrigin::kConstant,
                       "constant " + std::string(node->output()->debugName()));
        constant = meta_weights_.at(tensor.unsafeGetTensorImpl());
      }
    }
    cached = constants_.emplace(node, constant).first;
  }
  environment[node->output()] = Slot{cached->second, true, ValueId()};
}

void GraphBuilder::runGetAttr(jit::Node* node, Environment& environment) {
  const Slot& object = environment.at(node->input());
  const std::string& name = node->s(jit::attr::name);
  if (!object.known || !object.value.isObject()) {
    environment[node->output()] = Slot{c10::IValue(), false, ValueId()};
    return;
  }
  const c10::intrusive_ptr<c10::ivalue::Object>& instance = object.value.toObject();
  auto written = attribute_writes_.find({instance.get(), name});
  if (written != attribute_writes_.end()) {
    environment[node->output()] = written->second;
    return;
  }
  c10::IValue value = instance->getAttr(name);
  auto path = module_paths_.find(instance.get());
  std::string qualified =
      path == module_paths_.end() || path->second.empty() ? name : path->second + "." + name;
  environment[node->output()] = Slot{attributeValue(value, qualified), true, ValueId()};
}

// The module object is never changed (a batch sweep builds again from it); the write is kept
// on the side, and what it stored stays alive with the module.
void GraphBuilder::runSetAttr(jit::Node* node, Environment& environment) {
  const Slot& object = environment.at(node->input(0));
  const Slot& value = environment.at(node->input(1));
  if (object.known && object.value.isObject()) {
    attribute_writes_[{object.value.toObject().get(), node->s(jit::attr::name)}] = value;
  }
  for (ValueId id : valuesOf(value)) graph_.outputs.push_back(id);
}

std::vector<GraphBuilder::Slot> GraphBuilder::callGraph(jit::Graph& graph,
                                                        std::vector<Slot> arguments, Frame& frame) {
  Environment environment;
  for (size_t index = 0; index < graph.inputs().size() && index < arguments.size(); ++index) {
    environment[graph.inputs()[index]] = std::move(arguments[index]);
  }
  runBlock(graph.block(), frame, environment);
  finishStatements(frame, 0);
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

  Location location = locate(node, frame);
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
      graph_.value(id).bindings.push_back(
          {callee.scope, "(argument " + std::to_string(index) + ")", after});
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
    enterStatements(frame, callee.first_traced_stack, location, &callee.module_path);
    std::vector<ValueId> values;
    for (const Slot& output : outputs) {
      for (ValueId id : valuesOf(output)) values.push_back(id);
    }
    noteStatementValues(frame, values);
    frame.last_traced = true;
  }
  if (frame.first_traced_stack.empty()) frame.first_traced_stack = callee.first_traced_stack;
  bindOutputs(node, location, outputs);
}

std::vector<GraphBuilder::Slot> GraphBuilder::runBranch(jit::Block* block, Frame& frame,
                                                        Environment& environment) {
  runBlock(block, frame, environment);
  std::vector<Slot> outputs;
  for (const jit::Value* output : block->outputs()) outputs.push_back(environment.at(output));
  return outputs;
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
  Location location = locate(node, frame);
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
    if (take_then) {
      restore(std::move(after_then));
      frame = std::move(frame_after_then);
      outputs = std::move(*then_outputs);
    } else {
      outputs = std::move(*else_outputs);
    }
    std::string detail = "the condition depends on tensor data; assumed the " +
                         std::string(take_then ? "`if`" : "`else`") +
                         " branch, the one that allocates more";
    if (then_raised || !else_outputs)
      detail = "the condition depends on tensor data; the other branch raises";
    graph_.assumptions.push_back({AssumptionKind::kDataDependentBranch, "prim::If", location.stack,
                                  detail, /*makes_lower_bound=*/false});
  }
  for (size_t index = 0; index < node->outputs().size(); ++index) {
    environment[node->outputs()[index]] = outputs[index];
  }
  emitDropPoint(node, location, frame, environment);
  bindOutputs(node, location, outputs);
}

void GraphBuilder::runLoop(jit::Node* node, Frame& frame, Environment& environment) {
  Location location = locate(node, frame);
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

void GraphBuilder::runOperator(jit::Node* node, Frame& frame, Environment& environment) {
  std::vector<Slot> inputs;
  inputs.reserve(node->inputs().size());
  bool all_known = true;
  for (const jit::Value* input : node->inputs()) {
    inputs.push_back(environment.at(input));
    all_known = all_known && inputs.back().known;
  }
  std::optional<jit::Operation> instruction = interpreterInstruction(node);
  const jit::Operator* op = node->maybeOperator();
  if (!op && !instruction) {
    Location location = locate(node, frame);
    SourceFrame where = innermostUserFrame(location.stack);
    throw EstimateError(
        "unsupported op " + std::string(node->kind().toQualString()) +
        (where.known() ? " at " + where.file + ":" + std::to_string(where.line) : std::string()) +
        ": the estimator cannot run it abstractly");
  }
  if (!all_known) {
    return runUnsized(node, frame, environment, inputs, "an input's size or value is unknown",
                      AssumptionKind::kUnsizedDependency);
  }

  bool touches_tensors = false;
  bool makes_tensors = std::any_of(node->outputs().begin(), node->outputs().end(),
                                   [](const jit::Value* out) { return holdsTensors(out->type()); });
  jit::Stack stack;
  stack.reserve(inputs.size());
  for (const Slot& slot : inputs) {
    const c10::IValue& value = slot.value;
    // Only where a tensor is made: device.type and comparisons see the profile's device.
    if (value.isDevice() && makes_tensors &&
        (value.toDevice().is_cuda() || value.toDevice().type() == profileDevice().type())) {
      stack.emplace_back(c10::Device(at::kMeta));  // Note [Abstract execution]
    } else {
      stack.push_back(value);
    }
    touches_tensors = touches_tensors || value.isTensor() || value.isList() || value.isTuple() ||
                      value.isGenericDict();
  }
  for (const jit::Value* output : node->outputs()) {
    touches_tensors = touches_tensors || holdsTensors(output->type());
  }

  std::vector<c10::IValue> outputs;
  std::vector<MetaAllocationEvent> allocations;
  const c10::FunctionSchema* schema = node->maybeSchema();
  bool skip_meta = schema && without_meta_kernel_.count(schema);
  if (answersDevice(node) && stack.front().isTensor() && stack.front().toTensor().is_meta()) {
    outputs.emplace_back(deviceAnswer(node));  // the profile's device: Note [Abstract execution]
  } else if (schema && OpRules::handles(*schema)) {
    recorder_.begin();
    std::optional<OpRuleResult> ruled;
    try {
      ruled = op_rules_.run(*schema, std::vector<c10::IValue>(stack.begin(), stack.end()));
    } catch (const std::exception& error) {
      recorder_.end();
      failOp(node, locate(node, frame), inputs, errorMessage(error));
    }
    allocations = recorder_.end();
    if (!ruled) {
      skip_meta = true;  // declined: sized below as an op without a meta kernel
    } else {
      outputs = std::move(ruled->outputs);
      if (!ruled->kernel.empty()) {
        graph_.kernel_choices.push_back(
            {node->kind().toQualString(), ruled->kernel, ruled->why, locate(node, frame).stack});
      }
    }
  } else if (!skip_meta) {
    auto operation = operations_.find(node);
    if (operation == operations_.end()) {
      operation =
          operations_.emplace(node, instruction ? *instruction : node->getOperation()).first;
    }
    recorder_.begin();
    try {
      operation->second(stack);
      outputs.assign(std::make_move_iterator(stack.begin()), std::make_move_iterator(stack.end()));
    } catch (const ModelRaised&) {
      recorder_.end();
      throw;
    } catch (const jit::JITException& raised) {
      recorder_.end();
      throw ModelRaised{firstLineOf(raised.what()), locate(node, frame).stack};
    } catch (const std::exception& error) {
      if (!isMetaLimitation(error)) {
        recorder_.end();
        Location location = locate(node, frame);
        failOp(node, location, inputs, errorMessage(error));
      }
      if (schema) without_meta_kernel_.insert(schema);
      skip_meta = true;
    }
    allocations = recorder_.end();
  }
  if (skip_meta) {
    bool produces_tensors =
        std::any_of(node->outputs().begin(), node->outputs().end(),
                    [](const jit::Value* output) { return holdsTensors(output->type()); });
    if (!produces_tensors) {
      // A number read from tensor data (item, Bool, is_nonzero): unknown, and whatever
      // depends on it is resolved by the If and Loop rules.
      return runUnsized(node, frame, environment, inputs, "depends on tensor data",
                        AssumptionKind::kUnsizedDependency);
    }
    std::vector<c10::IValue> values;
    for (const Slot& slot : inputs) values.push_back(slot.value);
    std::optional<std::vector<c10::IValue>> sized;
    recorder_.begin();
    try {
      sized = shape_functions_.size(node, values);
    } catch (const std::exception& error) {
      recorder_.end();
      Location location = locate(node, frame);
      failOp(node, location, inputs,
             "PyTorch's shape function for it fails (" + errorMessage(error) + ")");
    }
    allocations = recorder_.end();
    if (!sized) {
      return runUnsized(node, frame, environment, inputs,
                        "no meta kernel and no shape function: its output size is unknown (it "
                        "may depend on tensor data)",
                        AssumptionKind::kUnknownOp);
    }
    outputs = std::move(*sized);
  }

  for (size_t index = 0; index < node->outputs().size() && index < outputs.size(); ++index) {
    environment[node->outputs()[index]] = Slot{outputs[index], true, ValueId()};
  }
  if (!touches_tensors) return;
  Location location = locate(node, frame);
  NodeId id = emitNode(node, location, frame, inputs);
  recordOutputs(id, outputs, allocations);
  if (location.traced) noteStatementValues(frame, graph_.node(id).outputs);
  // Containers the op changed in place (aten::append) hold what was added.
  for (const Slot& slot : inputs) {
    if (slot.value.isList()) {
      auto known = container_values_.find(slot.value.internalToPointer());
      if (known != container_values_.end()) refreshContainer(known->second, slot.value, id);
    }
  }
  std::vector<Slot> output_slots;
  for (const c10::IValue& output : outputs) output_slots.push_back(Slot{output, true, ValueId()});
  bindOutputs(node, location, output_slots);
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
    outputs = callGraph(*forward.graph(), std::move(arguments), root);
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
  forgetNamesIfFrozen();
  return std::move(graph_);
}

}  // namespace

Graph buildGraph(const torch::jit::Module& module, const std::vector<InputSpec>& inputs,
                 BuildCaches& caches) {
  GraphBuilder builder(module, caches);
  return builder.build(inputs);
}

}  // namespace memtrace::estimator::torchscript
