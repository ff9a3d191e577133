#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace memtrace::estimator::torchscript {

// Sizes the outputs of an op that has no meta kernel in C++ (convolution, batch_norm,
// hardswish and embedding among them in LibTorch 2.13: their meta kernels are registered from
// Python only) with the shape function PyTorch keeps for its schema: the TorchScript library
// behind its symbolic shape analysis (torch/csrc/jit/runtime/symbolic_shape_registry.h).
// The outputs are new meta tensors, contiguous, of the promoted floating dtype of the inputs
// (or the dtype argument); an in-place op returns the tensor it writes.
class ShapeFunctionSizer {
 public:
  // Nothing when PyTorch has no shape function for the node's schema. Throws what the shape
  // function throws when it rejects the input shapes.
  std::optional<std::vector<c10::IValue>> size(const torch::jit::Node* node,
                                               const std::vector<c10::IValue>& inputs);

  // Compiling the library takes about 0.1 s, once per process: done on first use, or here.
  static void prepare();

 private:
  struct ShapeFunction {
    std::shared_ptr<torch::jit::Code> code;  // null: PyTorch has none for the schema
    size_t arguments = 0;                    // it takes the schema's first arguments only
  };
  std::unordered_map<const c10::FunctionSchema*, ShapeFunction> functions_;
};

}  // namespace memtrace::estimator::torchscript
