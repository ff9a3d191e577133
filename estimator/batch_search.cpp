#include "estimator/batch_search.h"

namespace memtrace::estimator {

std::optional<int64_t> largestBatchWithin(int64_t budgetBytes,
                                          const std::function<int64_t(int64_t)>& needBytes,
                                          int64_t limit) {
  if (limit < 1) return std::nullopt;
  std::optional<int64_t> fits;   // the largest power of two seen to fit
  int64_t tooLarge = limit + 1;  // the power of two after it (or past the limit)
  for (int64_t batch = 1; batch <= limit; batch *= 2) {
    int64_t need = needBytes(batch);
    if (need <= budgetBytes) {
      fits = batch;
      tooLarge = batch * 2 <= limit ? batch * 2 : limit + 1;
    } else if (need > 2 * budgetBytes) {
      break;  // far past the budget: the steps of the allocator do not come back from there
    }
    if (batch > limit / 2) break;
  }
  if (!fits) return std::nullopt;
  int64_t low = *fits;
  while (tooLarge - low > 1) {
    int64_t middle = low + (tooLarge - low) / 2;
    if (needBytes(middle) <= budgetBytes)
      low = middle;
    else
      tooLarge = middle;
  }
  return low;
}

}  // namespace memtrace::estimator
