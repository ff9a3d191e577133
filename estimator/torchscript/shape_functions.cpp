#include "estimator/torchscript/shape_functions.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/csrc/jit/runtime/symbolic_shape_registry.h>

namespace memtrace::estimator::torchscript {

namespace {

// A shape function takes each tensor argument as its sizes (int[]), lists of tensors as int[][].
c10::IValue shapeArgument(const c10::IValue& value) {
  if (value.isTensor()) return c10::List<int64_t>(value.toTensor().sizes().vec());
  if (value.isTensorList()) {
    c10::List<c10::List<int64_t>> shapes;
    for (const at::Tensor& tensor : value.toTensorList().vec()) {
      shapes.push_back(c10::List<int64_t>(tensor.sizes().vec()));
    }
    return shapes;
  }
  return value;
}

void collectTensors(const c10::IValue& value, std::vector<at::Tensor>& tensors) {
  if (value.isTensor())
    tensors.push_back(value.toTensor());
  else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList().vec()) tensors.push_back(tensor);
  }
}

at::ScalarType outputDtype(const c10::FunctionSchema& schema,
                           const std::vector<c10::IValue>& inputs) {
  for (size_t index = 0; index < schema.arguments().size() && index < inputs.size(); ++index) {
    if (schema.arguments()[index].name() == "dtype" && inputs[index].isInt()) {
      return static_cast<at::ScalarType>(inputs[index].toInt());
    }
  }
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& input : inputs) collectTensors(input, tensors);
  std::optional<at::ScalarType> promoted;
  for (const at::Tensor& tensor : tensors) {
    if (!at::isFloatingType(tensor.scalar_type())) continue;
    promoted = promoted ? at::promote_types(*promoted, tensor.scalar_type()) : tensor.scalar_type();
  }
  if (promoted) return *promoted;
  return tensors.empty() ? at::kFloat : tensors.front().scalar_type();
}

// The input whose alias set an aliasing output shares, if any.
std::optional<size_t> aliasedInput(const c10::FunctionSchema& schema, const c10::Argument& output) {
  if (!output.alias_info()) return std::nullopt;
  for (size_t index = 0; index < schema.arguments().size(); ++index) {
    const c10::AliasInfo* info = schema.arguments()[index].alias_info();
    if (info && info->beforeSets() == output.alias_info()->beforeSets()) return index;
  }
  return std::nullopt;
}

}  // namespace

void ShapeFunctionSizer::prepare() {
  // Any registered schema triggers the one-time compilation of the whole library.
  auto operators = torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString("aten::relu"));
  if (!operators.empty()) torch::jit::shapeComputeGraphForSchema(operators.front()->schema());
}

std::optional<std::vector<c10::IValue>> ShapeFunctionSizer::size(
    const torch::jit::Node* node, const std::vector<c10::IValue>& inputs) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return std::nullopt;
  auto found = functions_.find(schema);
  if (found == functions_.end()) {
    std::optional<std::shared_ptr<torch::jit::Graph>> graph =
        torch::jit::shapeComputeGraphForSchema(*schema);
    ShapeFunction function;
    if (graph) {
      function.code = std::make_shared<torch::jit::Code>(*graph, schema->name() + "_shape");
      function.arguments = (*graph)->inputs().size();
    }
    found = functions_.emplace(schema, std::move(function)).first;
  }
  const ShapeFunction& function = found->second;
  if (!function.code || function.arguments > inputs.size()) return std::nullopt;
  for (const c10::Argument& output : schema->returns()) {
    if (!output.type()->cast<c10::TensorType>()) return std::nullopt;
  }

  torch::jit::Stack stack;
  for (size_t index = 0; index < function.arguments; ++index) {
    stack.push_back(shapeArgument(inputs[index]));
  }
  torch::jit::InterpreterState state(*function.code);
  state.run(stack);
  std::vector<c10::IValue> shapes;
  if (schema->returns().size() == 1)
    shapes.push_back(stack.back());
  else
    shapes = stack.back().toTupleRef().elements().vec();

  at::TensorOptions options =
      at::TensorOptions().device(at::kMeta).dtype(outputDtype(*schema, inputs));
  std::vector<c10::IValue> outputs;
  for (size_t index = 0; index < schema->returns().size(); ++index) {
    const c10::Argument& output = schema->returns()[index];
    if (output.alias_info()) {
      // An in-place op (Tensor(a!)) returns the input it wrote, allocating nothing. A view
      // (Tensor(a)) would need its strides, which a shape function does not give.
      std::optional<size_t> aliased = aliasedInput(*schema, output);
      if (!output.alias_info()->isWrite() || !aliased || !inputs[*aliased].isTensor()) {
        return std::nullopt;
      }
      outputs.push_back(inputs[*aliased]);
      continue;
    }
    std::vector<int64_t> sizes = shapes[index].toIntVector();
    outputs.push_back(at::empty(sizes, options));
  }
  return outputs;
}

}  // namespace memtrace::estimator::torchscript
