#include <algorithm>

#include "estimator/errors.h"
#include "estimator/torchscript/graph_builder_internal.h"

namespace memtrace::estimator::torchscript::internal {

namespace {

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

}  // namespace

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

bool holdsTensors(const c10::TypePtr& type) {
  if (type->cast<c10::TensorType>()) return true;
  for (const c10::TypePtr& contained : type->containedTypes()) {
    if (holdsTensors(contained)) return true;
  }
  return false;
}

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

// Lists grow (aten::append): whatever a container holds now, it keeps alive. They shrink too
// (list.pop() in a U-Net's decoder): what it no longer holds, it held until `producer`.
void GraphBuilder::refreshContainer(ValueId container, const c10::IValue& value, NodeId producer) {
  std::vector<ValueId> held;
  auto add = [&](const c10::IValue& element) {
    ValueId id = valueOf(element, producer);
    if (!id.valid()) return;
    held.push_back(id);
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
  noteTakenOut(graph_.value(container), held, producer);
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
// Module attributes

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

}  // namespace memtrace::estimator::torchscript::internal
