#include "estimator/sdpa_choice.h"

#include <algorithm>
#include <cmath>

namespace memtrace::estimator {

namespace {

// A size counted from the end, as at::Tensor::size(-n).
int64_t fromEnd(const SdpaTensor& tensor, size_t n) {
  return tensor.sizes[tensor.sizes.size() - n];
}

}  // namespace

std::string sdpaRejects(const SdpaKernel& kernel, const SdpaCall& call) {
  const SdpaTensor& q = call.query;
  const SdpaTensor& k = call.key;
  const SdpaTensor& v = call.value;
  if (q.sizes.size() != 4 || k.sizes.size() != 4 || v.sizes.size() != 4) {
    return "inputs are not 4-d";
  }
  if (q.nested || k.nested || v.nested) return "nested inputs";
  if (std::find(kernel.dtypes.begin(), kernel.dtypes.end(), call.dtype) == kernel.dtypes.end()) {
    return "dtype " + call.dtype + " not supported";
  }
  if (call.dropout > 0 && !kernel.dropout) return "dropout_p > 0";
  if (kernel.dropout_resolution > 0) {
    double steps = call.dropout * static_cast<double>(kernel.dropout_resolution);
    if (steps != std::floor(steps)) {
      return "dropout_p not a multiple of 1/" + std::to_string(kernel.dropout_resolution);
    }
  }
  if (call.mask && !kernel.mask) return "an attn_mask is given";
  int64_t dq = fromEnd(q, 1), dk = fromEnd(k, 1), dv = fromEnd(v, 1);
  if (dq != dk || (kernel.same_head_dims && dq != dv)) return "head dims differ";
  if (kernel.max_head_dim && (dq > kernel.max_head_dim || dv > kernel.max_head_dim)) {
    return "head dim above " + std::to_string(kernel.max_head_dim);
  }
  for (int64_t dim : {dq, dv}) {
    if (dim % kernel.head_dim_multiple != 0 ||
        (dim * call.element_size) % kernel.head_dim_alignment_bytes) {
      return "head dim " + std::to_string(dim) + " not aligned";
    }
  }
  if (q.sizes[0] != k.sizes[0] || k.sizes[0] != v.sizes[0]) return "batch sizes differ";
  // One key and value head serves every query head in every kernel, enable_gqa or not
  // (Note [sdpa's kernel choice]).
  bool key_heads_serve = q.sizes[1] == k.sizes[1] || k.sizes[1] == 1 ||
                         (kernel.gqa && call.enable_gqa && q.sizes[1] % k.sizes[1] == 0);
  if (k.sizes[1] != v.sizes[1] || !key_heads_serve) return "query and key heads differ";
  for (const SdpaTensor* tensor : {&q, &k, &v}) {
    if (fromEnd(*tensor, 1) != 1 && tensor->last_stride != 1) return "last dim not contiguous";
    if (fromEnd(*tensor, 2) == 0) return "an empty sequence";
  }
  if (kernel.causal_needs_square && call.is_causal && q.sizes[2] != k.sizes[2]) {
    return "is_causal with L != S";
  }
  return {};
}

SdpaChoice chooseSdpaKernel(const std::vector<SdpaKernel>& kernels, const SdpaCall& call) {
  std::string rejected;
  for (const SdpaKernel& kernel : kernels) {
    std::string why = sdpaRejects(kernel, call);
    if (why.empty()) {
      return {&kernel, kernel.name,
              rejected.empty() ? "the profile's first choice that takes these inputs"
                               : rejected.substr(2)};
    }
    rejected += "; not " + kernel.name + ": " + why;
  }
  return {nullptr, "math",
          rejected.empty() ? "the profile names no fused kernel" : rejected.substr(2)};
}

}  // namespace memtrace::estimator
