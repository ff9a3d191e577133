#include "estimator/batch_search.h"

namespace memtrace::estimator {

std::optional<int64_t> largestBatchWithin(const std::function<BatchCheck(int64_t)>& check,
                                          int64_t limit) {
  if (limit < 1) return std::nullopt;
  std::optional<int64_t> fits;    // the largest power of two seen to fit
  int64_t too_large = limit + 1;  // the power of two after it (or past the limit)
  for (int64_t batch = 1; batch <= limit; batch *= 2) {
    BatchCheck result = check(batch);
    if (result.fits) {
      fits = batch;
      too_large = batch * 2 <= limit ? batch * 2 : limit + 1;
    } else if (result.far_beyond) {
      break;
    }
    if (batch > limit / 2) break;
  }
  if (!fits) return std::nullopt;
  int64_t low = *fits;
  while (too_large - low > 1) {
    int64_t middle = low + (too_large - low) / 2;
    if (check(middle).fits)
      low = middle;
    else
      too_large = middle;
  }
  return low;
}

}  // namespace memtrace::estimator
