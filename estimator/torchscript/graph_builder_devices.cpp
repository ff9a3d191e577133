#include "estimator/torchscript/graph_builder_internal.h"

namespace memtrace::estimator::torchscript::internal {

// Note [Traces from any device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A trace records the devices its example ran on as constants: `device=cpu` in aten::zeros,
// aten::arange and aten::to when traced on a machine without a GPU (what mem_tracer.estimate
// does there), `cuda:1` on a second GPU. The estimate is for the device of the profile, so
// every device argument is taken as the one estimated for, which the abstract execution
// represents by meta (Note [Abstract execution]): a recorded `cpu` never makes a real CPU
// tensor, which would meet meta tensors in the next op ("Expected all tensors to be on the same
// device") or make aten::to unsized. Two exceptions keep the host: Python numbers made tensors
// (aten::tensor, aten::scalar_tensor from numbers alone), and aten::to of such a 0-dim host
// tensor, so that their values keep shape arithmetic exact, as for prim::NumToTensor; what such
// an aten::to names (`cuda:0` in a trace made on a GPU: DeBERTa-v2's
// `torch.tensor(mid - 1).type_as(relative_pos)`) is then the host, since a CPU-only LibTorch
// cannot make a CUDA tensor ("not linked with support for cuda devices"). Questions
// about a tensor's device (prim::device, is_cuda, is_cpu) are answered for the device estimated
// for, the profile's (its kernels.device), so device checks take the path they take there.

c10::Device GraphBuilder::estimatedDevice() const {
  return op_rules_.kernels().device == "cpu" ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, 0);
}

bool GraphBuilder::keepsHostDevice(const jit::Node* node, const std::vector<Slot>& inputs) const {
  auto is_tensor = [](const Slot& slot) {
    return slot.known && slot.value.isTensor() && slot.value.toTensor().defined();
  };
  switch (node->kind()) {
    case jit::aten::tensor:
    case jit::aten::scalar_tensor:
    case jit::aten::as_tensor:
      return std::none_of(inputs.begin(), inputs.end(), is_tensor);
    case jit::aten::to:
      return !inputs.empty() && is_tensor(inputs.front()) &&
             !inputs.front().value.toTensor().is_meta() &&
             inputs.front().value.toTensor().dim() == 0;
    default:
      return false;
  }
}

// `device=None` of a factory (torch.zeros(n) in the model's code): PyTorch's default device,
// which is the one estimated for when the model runs there. aten::to's None keeps the device.
bool isDefaultDevice(const jit::Node* node, size_t index, const c10::IValue& value) {
  if (!value.isNone() || node->kind() == jit::aten::to) return false;
  const c10::FunctionSchema* schema = node->maybeSchema();
  return schema && index < schema->arguments().size() &&
         schema->arguments()[index].name() == "device";
}

// What the estimator answers without running the op, whether or not the tensor's size is known
// (Note [Unknown means unknown]: an answer that does not depend on the data is no guess).
std::optional<c10::IValue> GraphBuilder::tensorProperty(const jit::Node* node,
                                                        const std::vector<Slot>& inputs) const {
  if (inputs.size() != 1 || node->outputs().size() != 1) return std::nullopt;
  const Slot& tensor = inputs.front();
  bool abstract = !tensor.known || (tensor.value.isTensor() && tensor.value.toTensor().defined() &&
                                    tensor.value.toTensor().is_meta());
  if (!abstract) return std::nullopt;  // a real host tensor answers for itself
  static const c10::Symbol kIsNested = c10::Symbol::fromQualString("prim::is_nested");
  static const c10::Symbol kIsCpu = c10::Symbol::fromQualString("prim::is_cpu");
  if (node->kind() == kIsNested) return c10::IValue(false);  // it makes no nested tensors
  if (node->kind() == kIsCpu) return c10::IValue(estimatedDevice().is_cpu());
  switch (node->kind()) {
    case jit::prim::is_cuda:
      return c10::IValue(estimatedDevice().is_cuda());
    case jit::prim::device:
      return c10::IValue(estimatedDevice());
    default:
      return std::nullopt;
  }
}

}  // namespace memtrace::estimator::torchscript::internal
