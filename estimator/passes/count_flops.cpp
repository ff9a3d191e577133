#include "estimator/passes/count_flops.h"

#include <functional>
#include <numeric>
#include <string_view>

namespace memtrace::estimator {

namespace {

int64_t product(const std::vector<int64_t>& dimensions, size_t from = 0) {
  int64_t result = 1;
  for (size_t index = from; index < dimensions.size(); ++index) result *= dimensions[index];
  return result;
}

const Value* tensorInput(const Graph& graph, const Node& node, size_t position) {
  if (position >= node.inputs.size()) return nullptr;
  const Value& value = graph.value(node.inputs[position]);
  if (value.kind != ValueKind::kTensor || !value.size_known) return nullptr;
  return &value;
}

const Value* tensorOutput(const Graph& graph, const Node& node) {
  if (node.outputs.empty()) return nullptr;
  const Value& value = graph.value(node.outputs.front());
  if (value.kind != ValueKind::kTensor || !value.size_known) return nullptr;
  return &value;
}

bool isConvolution(std::string_view op) {
  return op == "aten::conv1d" || op == "aten::conv2d" || op == "aten::conv3d" ||
         op == "aten::convolution" || op == "aten::_convolution";
}

bool isTransposedConvolution(std::string_view op) {
  return op == "aten::conv_transpose1d" || op == "aten::conv_transpose2d" ||
         op == "aten::conv_transpose3d";
}

// Products whose reduced dimension is the last one of their first matrix operand: the output
// has one element per (batch, row, column), each a dot product of that length.
bool isMatrixProduct(std::string_view op) {
  return op == "aten::matmul" || op == "aten::mm" || op == "aten::bmm" || op == "aten::mv" ||
         op == "aten::dot";
}

// Like isMatrixProduct, but the matrix operand comes after the added one (self).
bool isAddedMatrixProduct(std::string_view op) {
  return op == "aten::addmm" || op == "aten::baddbmm" || op == "aten::addmv";
}

int64_t flopsOf(const Graph& graph, const Node& node) {
  const Value* output = tensorOutput(graph, node);
  if (!output) return 0;
  const std::string& op = node.op;
  if (isConvolution(op) || isTransposedConvolution(op)) {
    // Inputs: (input, weight, ...). The weight is (out, in / groups, *kernel) for a
    // convolution and (in, out / groups, *kernel) for a transposed one.
    const Value* input = tensorInput(graph, node, 0);
    const Value* weight = tensorInput(graph, node, 1);
    if (!input || !weight || weight->shape.size() < 2) return 0;
    int64_t kernel = product(weight->shape, 2);
    if (isTransposedConvolution(op)) {
      // Each input element is scattered over out / groups channels times the kernel.
      return 2 * product(input->shape) * weight->shape[1] * kernel;
    }
    return 2 * product(output->shape) * weight->shape[1] * kernel;
  }
  if (op == "aten::linear") {
    const Value* weight = tensorInput(graph, node, 1);
    if (!weight || weight->shape.empty()) return 0;
    return 2 * product(output->shape) * weight->shape.back();
  }
  size_t first = isMatrixProduct(op) ? 0 : isAddedMatrixProduct(op) ? 1 : SIZE_MAX;
  if (first == SIZE_MAX) return 0;
  const Value* left = tensorInput(graph, node, first);
  if (!left || left->shape.empty()) return 0;
  return 2 * std::max<int64_t>(product(output->shape), 1) * left->shape.back();
}

}  // namespace

void countFlops(Graph& graph) {
  if (graph.flops_counted) return;
  for (Node& node : graph.nodes) node.flops = flopsOf(graph, node);
}

}  // namespace memtrace::estimator
