#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace memtrace::estimator {

// The largest batch in [1, limit] whose need (bytes, from `needBytes`) stays within
// `budgetBytes`, searched by doubling then bisection, so about 2 log2(answer) evaluations.
// Assumes the need does not shrink as the batch grows. Nothing when batch 1 does not fit.
std::optional<int64_t> largestBatchWithin(int64_t budgetBytes,
                                          const std::function<int64_t(int64_t)>& needBytes,
                                          int64_t limit);

}  // namespace memtrace::estimator
