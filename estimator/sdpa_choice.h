// Which fused kernel a device runs for one scaled_dot_product_attention call, and why.
//
// Note [sdpa's kernel choice]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The rule is data: each kernel's constraints are the device profile's `kernels.sdpa` entries
// (estimator/profiles/*.json, read into SdpaKernel), tried in the profile's order; the first
// that takes the call wins, else the math fallback. The checks each constraint makes are those
// of sdp_utils.cpp (CUDA) and sdp_utils_cpp.cpp (CPU), and every backend also needs 4-d,
// non-nested inputs with a unit stride in the last dim, non-empty sequences, equal batch sizes
// and as many key heads as value heads, and as query heads, or one (broadcast to every query
// head, enable_gqa or not), or a divisor of them with enable_gqa. The one-head case is what
// multi-query attention without enable_gqa passes (timm's MultiQueryAttention2d, gemma3n's
// vision tower: key and value [B, 1, S, D]); torch 2.14.1's can_use_{efficient,flash,cudnn}_
// attention and _fused_sdp_choice on the CPU take it, and take neither a key with 4 heads and a
// value with 1, nor a key with 2 of a query's 4 heads (checked on the simulated H100,
// issue 53). Counted as math, the estimate held cuBLAS's 32 MiB workspace the card never made.
// Two front ends make the choice: the TorchScript one (op_rules.cpp) and the step recorded on
// fake tensors in Python (python/mem_tracer/estimator/device_kernels.py, sdpa_choice). Both read
// the profile with a reader of their own and reduce a call to the same facts (SdpaCall here,
// SdpaCall there); tests/estimator/sdpa_cases.json is one set of cases both are tested
// against, kernel and reason word for word (tests/estimator/unit/sdpa_choice_test.cpp and
// tests/estimator/test_sdpa_choice.py), so the two cannot drift apart unseen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "estimator/device_profile.h"

namespace memtrace::estimator {

// One of query, key and value, as the choice sees it.
struct SdpaTensor {
  std::vector<int64_t> sizes;
  int64_t last_stride = 1;  // the stride of the last dim
  bool nested = false;
};

// The facts of one call the choice reads.
struct SdpaCall {
  SdpaTensor query, key, value;
  std::string dtype;         // the query's, estimator names (float16, ...)
  int64_t element_size = 0;  // the query's, in bytes
  bool mask = false;         // an attn_mask is given
  double dropout = 0.0;
  bool is_causal = false;
  bool enable_gqa = false;
};

struct SdpaChoice {
  const SdpaKernel* kernel = nullptr;  // the fused kernel chosen; nullptr: the math fallback
  std::string name;                    // its name, or "math"
  std::string why;                     // the checks the kernels before it failed
};

// Why `kernel` cannot run `call`; empty when it can.
std::string sdpaRejects(const SdpaKernel& kernel, const SdpaCall& call);

// The first of `kernels` (the profile's order) that takes `call`, or the math fallback.
SdpaChoice chooseSdpaKernel(const std::vector<SdpaKernel>& kernels, const SdpaCall& call);

}  // namespace memtrace::estimator
