#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace memtrace::estimator {

// What checking one batch against a budget says.
struct BatchCheck {
  bool fits = false;
  bool far_beyond = false;  // so far over that no larger batch will fit again
};

// The largest batch in [1, limit] that fits, with about 2 log2(answer) checks.
//
// Fitting is not monotonic in the batch: the caching allocator's pools and segments make the
// memory grow in steps, and a batch can need one more segment than the next larger one does
// (a tensor just under the small-pool limit lands in a new 2 MiB segment, one just over it
// shares a 20 MiB one). So the search keeps doubling past a batch that does not fit, until one
// is far beyond the budget, then bisects between the largest power of two that fits and the
// next one. The answer fits, and the batch after it does not.
std::optional<int64_t> largestBatchWithin(const std::function<BatchCheck(int64_t)>& check,
                                          int64_t limit);

}  // namespace memtrace::estimator
