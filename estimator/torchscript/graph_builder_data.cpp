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

}  // namespace memtrace::estimator::torchscript::internal
