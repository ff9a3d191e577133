// The ops the front end sizes by a rule of its own rather than by running PyTorch's meta kernel
// or shape function: one table, op -> rule (op_rules.cpp).
//
// Note [Op rules]
// ~~~~~~~~~~~~~~~
// Three kinds of op need one:
//   - ops whose meta kernel PyTorch registers from Python only (torch/_meta_registrations.py),
//     so LibTorch has none and PyTorch keeps no shape function either: _safe_softmax (which
//     sdpa's math fallback calls), native_group_norm, _weight_norm_interface, histc and
//     floor_divide (transformers' MoE experts), logical_not (CPM-Ant's attention mask), and the
//     fused nn.TransformerEncoderLayer / nn.MultiheadAttention fast path;
//   - ops whose composite kernel reads tensor data on the host: _grouped_mm (the experts'
//     grouped matmul loops over `offs`), whose output is made as PyTorch makes it, and
//     repeat_interleave with counts a trace captured as a host tensor (a number the program
//     computed from sizes: made as the int overload makes it);
//   - ops whose LibTorch meta kernel rejects inputs the real kernels take: index_add and
//     index_reduce with a source empty along `dim` (an expert that got no rows), where.self
//     with a 0-dim CPU tensor beside meta ones (sdpa's math fallback making a bool mask
//     additive: Falcon);
//   - fused kernels whose allocations are not those of their meta decomposition: on meta,
//     scaled_dot_product_attention always falls to the math path, which materializes the L x S
//     attention matrix; the device runs flash, memory-efficient or cuDNN attention instead,
//     which allocate the output and (sometimes) a logsumexp. Which one it runs depends on
//     dtype, head dim, mask and architecture: the profile's kernel rules (KernelRules) say.
//   - ops the device runs on copies of their operands: a convolution on CUDA, whose operands
//     PyTorch copies into cuDNN's memory format (channels-last when either is), as the
//     recording does (Note [The device's kernels on fake tensors], device_kernels.py).
// A rule makes its outputs (and any temporary it allocates and drops) as meta tensors while the
// meta allocation recorder runs, so its memory events come out like any other op's
// (Note [Meta allocations]). What a kernel allocates internally and never returns (flash's
// per-thread buffers, the fused encoder layer's intermediates) is scratch: counted where the
// profile says its device's memory counter sees it (KernelRules::count_kernel_scratch).
// Each rule is tested against the real CPU op in tests/estimator/test_op_rules.py.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

#include <optional>
#include <string>
#include <vector>

#include "estimator/device_profile.h"

namespace memtrace::estimator::torchscript {

struct OpRuleResult {
  std::vector<c10::IValue> outputs;
  // For a fused kernel chosen among several: its name and why (for the output).
  std::string kernel;
  std::string why;
  // A call made with sizes the device's library documents nowhere (cuDNN's RNN spaces): the
  // bracket the estimate says (AssumptionKind::kApproximate). over_by < 0: as far below as
  // the call held beyond its outputs, from its recorded allocations (a call made as PyTorch's
  // decomposition runs it, not as the library does). `detail` says what was made and why.
  struct Approximate {
    int64_t over_by = 0;
    int64_t under_by = 0;
    std::string detail;
  };
  std::optional<Approximate> approximate;
};

class OpRules {
 public:
  OpRules();  // registers the meta kernels LibTorch lacks, once per process

  // The kernel rules of the device estimated for; the default is DeviceProfile's.
  void useKernels(const KernelRules& kernels) { kernels_ = kernels; }
  const KernelRules& kernels() const { return kernels_; }

  // Whether the table has a rule for this schema.
  static bool handles(const c10::FunctionSchema& schema);

  // Runs the rule on the op's inputs (tensors are meta). Nothing when the rule declines (the
  // caller then runs the op as usual). Throws c10::Error for inputs the real op rejects.
  std::optional<OpRuleResult> run(const c10::FunctionSchema& schema,
                                  const std::vector<c10::IValue>& inputs) const;

 private:
  KernelRules kernels_;
};

}  // namespace memtrace::estimator::torchscript
