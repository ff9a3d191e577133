#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace memtrace::estimator {

// The largest batch in [1, limit] whose need (bytes, from `needBytes`) stays within
// `budgetBytes`, with about 2 log2(answer) evaluations.
//
// The need is not monotonic in the batch: the caching allocator's pools and segments make the
// reserved bytes grow in steps, and a batch can need one more segment than the next larger
// one does (a tensor just under the small-pool limit lands in a new 2 MiB segment, one just
// over it shares a 20 MiB one). So the search doubles the batch until the need is well past
// the budget (twice it) rather than stopping at the first batch that does not fit, then bisects
// between the largest power of two that fits and the next one. The answer fits, and the batch
// after it does not.
std::optional<int64_t> largestBatchWithin(int64_t budgetBytes,
                                          const std::function<int64_t(int64_t)>& needBytes,
                                          int64_t limit);

}  // namespace memtrace::estimator
