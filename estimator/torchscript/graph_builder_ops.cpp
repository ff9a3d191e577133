#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/jit_exception.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "estimator/byte_size.h"
#include "estimator/errors.h"
#include "estimator/torchscript/graph_builder_internal.h"

namespace memtrace::estimator::torchscript::internal {

namespace {

std::string shapeText(const at::Tensor& tensor) {
  std::string text = "[";
  for (int64_t dimension : tensor.sizes()) {
    text += (text.size() > 1 ? ", " : "") + std::to_string(dimension);
  }
  return text + "]";
}

bool producesTensors(const jit::Node* node) {
  return std::any_of(node->outputs().begin(), node->outputs().end(),
                     [](const jit::Value* output) { return holdsTensors(output->type()); });
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

}  // namespace

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
  neutral.module_path = location.module_path;
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
  Location location = names_.locate(node, frame);
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
  if (producesTensors(node)) {
    graph_.assumptions.push_back({kind, node->kind().toQualString(), location.stack, reason,
                                  /*makes_lower_bound=*/true});
  }
  // A container the op would have changed in place (aten::append of an unknown value) did not
  // change: what it holds is unknown from here on, not what it held before.
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return;
  ValueId container = graph_.node(id).outputs.empty() ? ValueId() : graph_.node(id).outputs[0];
  for (size_t index = 0; index < schema->arguments().size() && index < node->inputs().size();
       ++index) {
    const c10::Argument& argument = schema->arguments()[index];
    bool container_type = argument.type()->kind() == c10::TypeKind::ListType ||
                          argument.type()->kind() == c10::TypeKind::DictType;
    if (container_type && argument.alias_info() && argument.alias_info()->isWrite()) {
      environment[node->input(index)] = Slot{c10::IValue(), false, container};
    }
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
    Location location = names_.locate(node, frame);
    SourceFrame where = innermostUserFrame(location.stack);
    throw EstimateError(
        "unsupported op " + std::string(node->kind().toQualString()) +
        (where.known() ? " at " + where.file + ":" + std::to_string(where.line) : std::string()) +
        ": the estimator cannot run it abstractly");
  }
  if (std::optional<c10::IValue> answer = tensorProperty(node, inputs)) {
    // Still a use of the tensor: it is live until here.
    emitNode(node, names_.locate(node, frame), frame, inputs);
    environment[node->output()] = Slot{*answer, true, ValueId()};
    return;
  }
  if (!all_known) {
    return runUnsized(node, frame, environment, inputs, "an input's size or value is unknown",
                      AssumptionKind::kUnsizedDependency);
  }

  bool makes_tensors = producesTensors(node);
  jit::Stack stack;
  stack.reserve(inputs.size());
  bool keeps_host = keepsHostDevice(node, inputs);
  for (size_t index = 0; index < inputs.size(); ++index) {
    const c10::IValue& value = inputs[index].value;
    // Only where a tensor is made: comparisons of devices (x.device.type == "cpu") see the
    // device estimated for, which prim::device answers (Note [Traces from any device]).
    if ((value.isDevice() || isDefaultDevice(node, index, value)) && makes_tensors && !keeps_host) {
      stack.emplace_back(c10::Device(at::kMeta));  // Note [Traces from any device]
    } else if (keeps_host && value.isDevice()) {
      stack.emplace_back(c10::Device(at::kCPU));  // stays on the host: the same Note
    } else {
      stack.push_back(value);
    }
  }

  // Four ways to size an op: a data-dependent one by its count (Note [Data-dependent sizes]),
  // one of the rule table by its rule (Note [Op rules]), any other by its meta kernel; one
  // whose rule declines or that has no meta kernel by PyTorch's shape function.
  bool data_dependent = isDataDependent(node, stack);
  std::optional<SizedOp> sized;
  if (data_dependent) {
    sized = sizeByCount(node, frame, inputs, stack);
    if (!sized) {
      return runUnsized(node, frame, environment, inputs,
                        "how many elements it selects depends on the data: --assume-worst-case "
                        "bounds it; mem_tracer.estimate passes the example input's counts",
                        AssumptionKind::kUnknownOp);
    }
  } else {
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (schema && OpRules::handles(*schema)) {
      sized = sizeByRule(node, frame, inputs, *schema, stack);
    } else if (!without_meta_kernel_.count(schema)) {
      sized = sizeByMetaKernel(node, frame, inputs, instruction, stack);
    }
    if (!sized && !makes_tensors) {
      // A number read from tensor data (item, Bool, is_nonzero): unknown, and whatever
      // depends on it is resolved by the If and Loop rules.
      return runUnsized(node, frame, environment, inputs, "depends on tensor data",
                        AssumptionKind::kUnsizedDependency);
    }
    if (!sized) sized = sizeByShapeFunction(node, frame, inputs);
    if (!sized) {
      return runUnsized(node, frame, environment, inputs,
                        "no meta kernel and no shape function: its output size is unknown (it "
                        "may depend on tensor data)",
                        AssumptionKind::kUnknownOp);
    }
  }
  if (const c10::FunctionSchema* schema = node->maybeSchema()) {
    addKernelTemporaries(*schema, inputs, *sized);
  }
  finishOperator(node, frame, environment, inputs, *sized, data_dependent);
}

// The profile's `kernels.temporaries` (Note [What a CUDA kernel allocates inside itself], in
// python/mem_tracer/estimator/step_recorder.py: the recording reads the same entries for the
// ops it sees dispatched). A TorchScript graph names the op Python called, so an entry applies
// to that op, or to a composite that hands its arguments, under the same names, to the entry's
// op: aten::layer_norm returns native_layer_norm's output (aten/src/ATen/native/layer_norm.cpp),
// and on CUDA that kernel copies an input that is not contiguous (`input.expect_contiguous()`)
// before it allocates its outputs. Each temporary is a meta tensor made here, so it has a
// storage and an allocation id of its own; taken before the op's outputs or after them, as
// the entry says, and released after both, as the kernel frees it before it returns.
void GraphBuilder::addKernelTemporaries(const c10::FunctionSchema& schema,
                                        const std::vector<Slot>& inputs, SizedOp& sized) {
  const std::vector<KernelTemporary>& temporaries = op_rules_.kernels().temporaries;
  if (temporaries.empty() || !schema.overload_name().empty()) return;
  static const std::map<std::string, std::string> kHandsTo = {
      {"aten::layer_norm", "aten::native_layer_norm"}};
  std::string op = schema.name();
  auto composite = kHandsTo.find(op);
  auto argument = [&](const std::string& name) -> std::optional<at::Tensor> {
    std::optional<int> index = schema.argumentIndexWithName(name);
    if (!index || static_cast<size_t>(*index) >= inputs.size()) return std::nullopt;
    const c10::IValue& value = inputs[*index].value;
    if (!value.isTensor() || !value.toTensor().defined()) return std::nullopt;
    return value.toTensor();
  };
  std::vector<MetaAllocationEvent> before;
  std::vector<MetaAllocationEvent> after;
  std::vector<MetaAllocationEvent> released;
  for (const KernelTemporary& temporary : temporaries) {
    if (temporary.op != op && (composite == kHandsTo.end() || temporary.op != composite->second)) {
      continue;
    }
    std::optional<at::Tensor> like = argument(temporary.like);
    if (!like || (temporary.only_if_not_contiguous && like->is_contiguous())) continue;
    at::ScalarType dtype = like->scalar_type();
    for (size_t index = 0; index < temporary.dtype_of.size(); ++index) {
      std::optional<at::Tensor> operand = argument(temporary.dtype_of[index]);
      if (!operand) continue;
      dtype =
          index == 0 ? operand->scalar_type() : at::promote_types(dtype, operand->scalar_type());
    }
    MetaAllocationScope recording(recorder_);
    at::empty(like->sizes(), like->options().dtype(dtype));  // dropped at once
    for (const MetaAllocationEvent& event : recording.events()) {
      (event.allocate ? (temporary.before_outputs ? before : after) : released).push_back(event);
    }
  }
  if (before.empty() && after.empty()) return;
  std::vector<MetaAllocationEvent> events = std::move(before);
  events.insert(events.end(), sized.allocations.begin(), sized.allocations.end());
  events.insert(events.end(), after.begin(), after.end());
  events.insert(events.end(), released.begin(), released.end());
  sized.allocations = std::move(events);
}

std::vector<MetaAllocationEvent> GraphBuilder::recordSizing(jit::Node* node, Frame& frame,
                                                            const std::vector<Slot>& inputs,
                                                            const std::function<void()>& size,
                                                            const std::string& failure) {
  MetaAllocationScope recording(recorder_);
  try {
    size();
  } catch (const std::exception& error) {
    failOp(node, names_.locate(node, frame), inputs,
           failure.empty() ? errorMessage(error) : failure + " (" + errorMessage(error) + ")");
  }
  return recording.events();
}

std::optional<GraphBuilder::SizedOp> GraphBuilder::sizeByCount(jit::Node* node, Frame& frame,
                                                               const std::vector<Slot>& inputs,
                                                               const jit::Stack& stack) {
  std::string how;
  std::optional<std::vector<c10::IValue>> outputs;
  std::vector<MetaAllocationEvent> allocations =
      recordSizing(node, frame, inputs, [&] { outputs = sizeDataDependent(node, stack, how); });
  if (!outputs) return std::nullopt;
  graph_.assumptions.push_back({AssumptionKind::kDataDependentSize, node->kind().toQualString(),
                                names_.locate(node, frame).stack,
                                std::string(node->kind().toQualString()) + ": " + how,
                                /*makes_lower_bound=*/false});
  return SizedOp{std::move(*outputs), std::move(allocations)};
}

std::optional<GraphBuilder::SizedOp> GraphBuilder::sizeByRule(jit::Node* node, Frame& frame,
                                                              const std::vector<Slot>& inputs,
                                                              const c10::FunctionSchema& schema,
                                                              const jit::Stack& stack) {
  std::optional<OpRuleResult> ruled;
  std::vector<MetaAllocationEvent> allocations = recordSizing(node, frame, inputs, [&] {
    ruled = op_rules_.run(schema, std::vector<c10::IValue>(stack.begin(), stack.end()));
  });
  if (!ruled) return std::nullopt;  // declined
  if (!ruled->kernel.empty()) {
    graph_.kernel_choices.push_back(
        {node->kind().toQualString(), ruled->kernel, ruled->why, names_.locate(node, frame).stack});
  }
  if (ruled->approximate) {
    int64_t over = ruled->approximate->over_by;
    if (over < 0) {  // what the call held at most beyond what it returns
      int64_t held = 0, most = 0, returned = 0;
      for (const MetaAllocationEvent& event : allocations) {
        held += event.allocate ? event.bytes : -event.bytes;
        most = std::max(most, held);
      }
      for (const c10::IValue& output : ruled->outputs) {
        if (output.isTensor() && output.toTensor().defined())
          returned += static_cast<int64_t>(output.toTensor().storage().nbytes());
      }
      over = std::max<int64_t>(0, most - returned);
    }
    int64_t under = ruled->approximate->under_by;
    graph_.assumptions.push_back({AssumptionKind::kApproximate, node->kind().toQualString(),
                                  names_.locate(node, frame).stack,
                                  ruled->approximate->detail + ": the peak may be up to " +
                                      formatBytes(over) + " lower or " + formatBytes(under) +
                                      " higher (Note [cuDNN's RNN in the TorchScript front end])",
                                  /*makes_lower_bound=*/false, over, under});
  }
  return SizedOp{std::move(ruled->outputs), std::move(allocations)};
}

std::optional<GraphBuilder::SizedOp> GraphBuilder::sizeByMetaKernel(
    jit::Node* node, Frame& frame, const std::vector<Slot>& inputs,
    const std::optional<jit::Operation>& instruction, jit::Stack& stack) {
  checkIndexBounds(node, inputs, frame);
  auto operation = operations_.find(node);
  if (operation == operations_.end()) {
    operation = operations_.emplace(node, instruction ? *instruction : node->getOperation()).first;
  }
  MetaAllocationScope recording(recorder_);
  try {
    operation->second(stack);
  } catch (const jit::JITException& raised) {
    throw ModelRaised{firstLineOf(raised.what()), names_.locate(node, frame).stack};
  } catch (const std::exception& error) {
    if (!isMetaLimitation(error))
      failOp(node, names_.locate(node, frame), inputs, errorMessage(error));
    if (const c10::FunctionSchema* schema = node->maybeSchema()) {
      without_meta_kernel_.insert(schema);
    }
    return std::nullopt;  // no meta kernel
  }
  std::vector<MetaAllocationEvent> allocations = recording.events();
  return SizedOp{std::vector<c10::IValue>(std::make_move_iterator(stack.begin()),
                                          std::make_move_iterator(stack.end())),
                 std::move(allocations)};
}

std::optional<GraphBuilder::SizedOp> GraphBuilder::sizeByShapeFunction(
    jit::Node* node, Frame& frame, const std::vector<Slot>& inputs) {
  std::vector<c10::IValue> values;
  for (const Slot& slot : inputs) values.push_back(slot.value);
  std::optional<std::vector<c10::IValue>> outputs;
  std::vector<MetaAllocationEvent> allocations = recordSizing(
      node, frame, inputs, [&] { outputs = shape_functions_.size(node, values); },
      "PyTorch's shape function for it fails");
  if (!outputs) return std::nullopt;
  return SizedOp{std::move(*outputs), std::move(allocations)};
}

void GraphBuilder::finishOperator(jit::Node* node, Frame& frame, Environment& environment,
                                  const std::vector<Slot>& inputs, const SizedOp& sized,
                                  bool data_dependent) {
  const std::vector<c10::IValue>& outputs = sized.outputs;
  for (size_t index = 0; index < node->outputs().size() && index < outputs.size(); ++index) {
    environment[node->outputs()[index]] = Slot{outputs[index], true, ValueId()};
  }
  bool touches_tensors =
      producesTensors(node) || std::any_of(inputs.begin(), inputs.end(), [](const Slot& slot) {
        const c10::IValue& value = slot.value;
        return value.isTensor() || value.isList() || value.isTuple() || value.isGenericDict();
      });
  if (!touches_tensors) return;
  if (!data_dependent) trackKnownValues(node, inputs, outputs);
  Location location = names_.locate(node, frame);
  NodeId id = emitNode(node, location, frame, inputs);
  recordOutputs(id, outputs, sized.allocations);
  // A list or tuple the tracer built without a source location holds the arguments of the
  // op after it (`torch.cat([self.keys, key_states])`), which may be the next statement's:
  // it is no statement's value (a statement's value is what its last op produced).
  bool argument_pack =
      !locations_.resolve(node->sourceRange()).known &&
      (node->kind() == jit::prim::ListConstruct || node->kind() == jit::prim::TupleConstruct);
  if (location.traced && !argument_pack) {
    names_.noteStatementValues(frame, graph_.node(id).outputs);
    names_.notePackedArguments(frame, id);
  }
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

}  // namespace memtrace::estimator::torchscript::internal
