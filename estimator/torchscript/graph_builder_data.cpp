#include <ATen/ExpandUtils.h>

#include <string>

#include "estimator/torchscript/graph_builder_internal.h"

namespace memtrace::estimator::torchscript::internal {

// Note [Data-dependent sizes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// How many elements aten::nonzero, where(cond), masked_select or a boolean mask selects
// depends on the data, which meta tensors do not have. The estimate takes a count k from one of
// two places, and says which in its assumptions:
//   - the example input's (the default): mem_tracer.estimate runs the model once on the CPU,
//     records each selection's count in the order they run, and passes them to the tool
//     (--example-counts). A selection over more or fewer elements than the example's (another
//     batch) gets the example's fraction of them;
//   - the worst case (--assume-worst-case): every element selected, an upper bound.
// With neither, the outputs are unsized and the estimate is a lower bound, as for any op that
// cannot be sized. The outputs are what the CPU kernels make: nonzero and argwhere a [k, dim]
// int64 tensor, where(cond) one [k] column view of it per dimension, masked_select a [k] tensor;
// indexing by a boolean mask runs nonzero on the mask (a temporary) and indexes by its columns.

namespace {

int64_t selectedCount(int64_t elements, const ExampleCount& example) {
  if (example.elements == elements || example.elements == 0) return example.count;
  // The example's fraction of the elements, rounded to nearest.
  return (example.count * elements * 2 + example.elements) / (example.elements * 2);
}

bool isBooleanMask(const c10::IValue& index) {
  if (!index.isTensor() || !index.toTensor().defined()) return false;
  at::ScalarType type = index.toTensor().scalar_type();
  return type == at::kBool || type == at::kByte;
}

}  // namespace

bool GraphBuilder::isDataDependent(const jit::Node* node, const jit::Stack& stack) const {
  switch (node->kind()) {
    case jit::aten::nonzero:
    case jit::aten::argwhere:
    case jit::aten::nonzero_numpy:
    case jit::aten::masked_select:
      return true;
    case jit::aten::where:
      return stack.size() == 1;  // where(condition) -> Tensor[]
    case jit::aten::index:
      if (stack.size() != 2 || !stack[1].isList()) return false;
      for (const c10::IValue& index : stack[1].toList()) {
        if (isBooleanMask(index)) return true;
      }
      return false;
    default:
      return false;
  }
}

std::optional<int64_t> GraphBuilder::countFor(const jit::Node* node, int64_t elements,
                                              std::string& how) {
  if (options_.assume_worst_case) {
    how = "every one of the " + std::to_string(elements) +
          " elements selected (--assume-worst-case): an upper bound";
    return elements;
  }
  if (next_example_count_ < options_.example_counts.size()) {
    const ExampleCount& example = options_.example_counts[next_example_count_++];
    int64_t count = selectedCount(elements, example);
    how = std::to_string(count) + " of " + std::to_string(elements) + " elements selected, ";
    how += example.elements == elements
               ? "as on the example input"
               : "the example input's fraction (" + std::to_string(example.count) + " of " +
                     std::to_string(example.elements) + ")";
    how += "; the count depends on the data (--assume-worst-case bounds it)";
    return count;
  }
  return std::nullopt;
}

std::optional<std::vector<c10::IValue>> GraphBuilder::sizeDataDependent(const jit::Node* node,
                                                                        const jit::Stack& stack,
                                                                        std::string& how) {
  const at::Tensor& self = stack.front().toTensor();
  at::TensorOptions indices = self.options().dtype(at::kLong);
  switch (node->kind()) {
    case jit::aten::nonzero:
    case jit::aten::argwhere:
    case jit::aten::nonzero_numpy:
    case jit::aten::where: {
      std::optional<int64_t> count = countFor(node, self.numel(), how);
      if (!count) return std::nullopt;
      at::Tensor rows = at::empty({*count, self.dim()}, indices);
      if (node->kind() == jit::aten::nonzero || node->kind() == jit::aten::argwhere) {
        return std::vector<c10::IValue>{rows};
      }
      c10::List<at::Tensor> columns;
      for (int64_t dimension = 0; dimension < self.dim(); ++dimension) {
        columns.push_back(rows.select(1, dimension));
      }
      return std::vector<c10::IValue>{columns};
    }
    case jit::aten::masked_select: {
      std::vector<int64_t> shape = at::infer_size(self.sizes(), stack[1].toTensor().sizes());
      int64_t elements = c10::multiply_integers(shape);
      std::optional<int64_t> count = countFor(node, elements, how);
      if (!count) return std::nullopt;
      return std::vector<c10::IValue>{at::empty({*count}, self.options())};
    }
    case jit::aten::index: {
      c10::List<std::optional<at::Tensor>> replaced;
      std::vector<at::Tensor> temporaries;
      for (const c10::IValue& index : stack[1].toList()) {
        if (!isBooleanMask(index)) {
          replaced.push_back(index.isNone() ? std::optional<at::Tensor>()
                                            : std::optional<at::Tensor>(index.toTensor()));
          continue;
        }
        const at::Tensor& mask = index.toTensor();
        std::optional<int64_t> count = countFor(node, mask.numel(), how);
        if (!count) return std::nullopt;
        at::Tensor rows = at::empty({*count, mask.dim()}, mask.options().dtype(at::kLong));
        temporaries.push_back(rows);
        for (int64_t dimension = 0; dimension < mask.dim(); ++dimension) {
          replaced.push_back(rows.select(1, dimension));
        }
      }
      at::Tensor result = at::index(self, replaced);
      return std::vector<c10::IValue>{result};  // the temporaries die here, inside the op
    }
    default:
      return std::nullopt;
  }
}

// Note [Index values known on the host]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Meta tensors carry no values, so an index out of range goes unnoticed: a graph the
// interpreter cannot run at the given shapes would still get a figure. That happens to traces,
// which bake the example's Python decisions into the graph: GPT-2 traced at batch 1 keeps
// transformers' packed-sequence mask, built for one row, and indexes it with
// arange(batch) at batch 3 ("index 1 is out of bounds"). Index tensors are mostly made from
// shapes and constants (arange, add, unsqueeze, expand), so the builder keeps a host copy of
// every small integer tensor whose inputs are all known (no data of the model's inputs in it),
// computed by the op's CPU kernel alongside the meta one. An index op whose known indices fall
// outside the dimension they index cannot run: under the TorchScript semantics that is the
// interpreter's error, and the estimate refuses; under eager semantics the graph is a proxy of
// Python code that may take another path at these shapes, so the figure stands with an
// assumption saying so.

namespace {

constexpr int64_t kMaxKnownElements = 1 << 16;

bool smallInteger(const at::Tensor& tensor) {
  return tensor.defined() && tensor.numel() <= kMaxKnownElements &&
         (at::isIntegralType(tensor.scalar_type(), /*includeBool=*/true));
}

}  // namespace

std::optional<at::Tensor> GraphBuilder::knownValue(const c10::IValue& value) const {
  if (!value.isTensor() || !value.toTensor().defined()) return std::nullopt;
  const at::Tensor& tensor = value.toTensor();
  if (!tensor.is_meta()) return tensor;  // a host tensor (a number, a traced scalar constant)
  auto known = known_values_.find(tensor.unsafeGetTensorImpl());
  if (known == known_values_.end()) return std::nullopt;
  return known->second;
}

void GraphBuilder::trackKnownValues(jit::Node* node, const std::vector<Slot>& inputs,
                                    const std::vector<c10::IValue>& outputs) {
  bool wanted = std::any_of(outputs.begin(), outputs.end(), [](const c10::IValue& output) {
    return output.isTensor() && output.toTensor().is_meta() && smallInteger(output.toTensor());
  });
  // An op that writes into a tensor whose value was known and is not recomputed here leaves
  // that copy stale: forget it.
  auto forget_written = [&] {
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (!schema) return;
    for (size_t index = 0; index < schema->arguments().size() && index < inputs.size(); ++index) {
      const c10::AliasInfo* alias = schema->arguments()[index].alias_info();
      if (alias && alias->isWrite() && inputs[index].value.isTensor()) {
        known_values_.erase(inputs[index].value.toTensor().unsafeGetTensorImpl());
      }
    }
  };
  if (!wanted || node->isNondeterministic() || node->hasSideEffects()) return forget_written();
  jit::Stack stack;
  for (const Slot& slot : inputs) {
    const c10::IValue& value = slot.value;
    if (value.isTensor() && value.toTensor().defined()) {
      std::optional<at::Tensor> known = knownValue(value);
      if (!known) return forget_written();
      stack.emplace_back(*known);
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& element : value.toTensorList().vec()) {
        std::optional<at::Tensor> known = knownValue(element);
        if (!known) return forget_written();
        list.push_back(*known);
      }
      stack.emplace_back(list);
    } else if (value.isList()) {
      // Tensor?[] (aten::index's indices): each tensor must be known too, else the host run
      // would mix meta tensors into it.
      c10::impl::GenericList list(value.toList().elementType());
      for (const c10::IValue& element : value.toList()) {
        if (element.isTensor() && element.toTensor().defined()) {
          std::optional<at::Tensor> known = knownValue(element);
          if (!known) return forget_written();
          list.push_back(*known);
        } else {
          list.push_back(element);
        }
      }
      stack.emplace_back(list);
    } else if (value.isDevice()) {
      stack.emplace_back(c10::Device(at::kCPU));
    } else {
      stack.push_back(value);
    }
  }
  try {
    node->getOperation()(stack);
  } catch (const std::exception&) {
    return forget_written();
  }
  for (size_t index = 0; index < outputs.size() && index < stack.size(); ++index) {
    if (!outputs[index].isTensor() || !stack[index].isTensor()) continue;
    const at::Tensor& meta = outputs[index].toTensor();
    const at::Tensor& host = stack[index].toTensor();
    if (meta.is_meta() && smallInteger(meta) && host.defined() && !host.is_meta() &&
        host.sizes() == meta.sizes()) {
      known_values_[meta.unsafeGetTensorImpl()] = host;
      keep_alive_.push_back(meta);
    }
  }
}

void GraphBuilder::checkIndexBounds(const jit::Node* node, const std::vector<Slot>& inputs,
                                    Frame& frame) {
  // (index tensor, the size of the dimension it indexes, negative indices allowed)
  std::vector<std::tuple<at::Tensor, int64_t, int64_t, bool>> checks;
  auto tensor_of = [&](size_t index) -> std::optional<at::Tensor> {
    if (index >= inputs.size() || !inputs[index].known || !inputs[index].value.isTensor()) {
      return std::nullopt;
    }
    const at::Tensor& tensor = inputs[index].value.toTensor();
    return tensor.defined() ? std::optional<at::Tensor>(tensor) : std::nullopt;
  };
  switch (node->kind()) {
    case jit::aten::index: {
      std::optional<at::Tensor> self = tensor_of(0);
      if (!self || inputs.size() < 2 || !inputs[1].known || !inputs[1].value.isList()) return;
      int64_t dimension = 0;
      for (const c10::IValue& index : inputs[1].value.toList()) {
        if (index.isTensor() && index.toTensor().defined()) {
          const at::Tensor& tensor = index.toTensor();
          if (tensor.scalar_type() == at::kBool || tensor.scalar_type() == at::kByte) return;
          if (std::optional<at::Tensor> known = knownValue(index);
              known && dimension < self->dim()) {
            checks.emplace_back(*known, dimension, self->size(dimension), true);
          }
        }
        ++dimension;
      }
      break;
    }
    case jit::aten::index_select:
    case jit::aten::gather: {
      std::optional<at::Tensor> self = tensor_of(0);
      std::optional<at::Tensor> index = tensor_of(2);
      if (!self || !index || self->dim() == 0 || !inputs[1].value.isInt()) return;
      int64_t dimension = at::maybe_wrap_dim(inputs[1].value.toInt(), self->dim());
      if (std::optional<at::Tensor> known = knownValue(*index)) {
        checks.emplace_back(*known, dimension, self->size(dimension), false);
      }
      break;
    }
    case jit::aten::embedding: {
      std::optional<at::Tensor> weight = tensor_of(0);
      std::optional<at::Tensor> index = tensor_of(1);
      if (!weight || !index || weight->dim() == 0) return;
      if (std::optional<at::Tensor> known = knownValue(*index)) {
        checks.emplace_back(*known, 0, weight->size(0), false);
      }
      break;
    }
    default:
      return;
  }
  for (const auto& [values, dimension, size, negative] : checks) {
    if (values.numel() == 0 || !at::isIntegralType(values.scalar_type(), false)) continue;
    int64_t lowest = values.min().item<int64_t>();
    int64_t highest = values.max().item<int64_t>();
    int64_t bad = highest >= size ? highest : (lowest < (negative ? -size : 0) ? lowest : 0);
    if (highest < size && lowest >= (negative ? -size : 0)) continue;
    Location location = names_.locate(node, frame);
    std::string why = "index " + std::to_string(bad) + " is out of bounds for dimension " +
                      std::to_string(dimension) + " with size " + std::to_string(size);
    if (!options_.interpreter_graph) {
      std::string detail =
          std::string(node->kind().toQualString()) + ": " + why +
          ": the graph cannot run at these input shapes (the TorchScript interpreter raises "
          "here); the figure follows the graph's path, which the Python code may not take at "
          "these shapes" +
          (location.traced
               ? " (a trace keeps the example's path: trace the model at the shapes you estimate)"
               : "");
      graph_.assumeOnce({AssumptionKind::kSemantics, node->kind().toQualString(), location.stack,
                         std::move(detail), /*makes_lower_bound=*/false});
      return;
    }
    throw ModelRaised{why + (location.traced ? ": the traced graph cannot run at these input "
                                               "shapes (a trace keeps the example's path: trace "
                                               "the model at the shapes you estimate)"
                                             : ""),
                      location.stack};
  }
}

}  // namespace memtrace::estimator::torchscript::internal
