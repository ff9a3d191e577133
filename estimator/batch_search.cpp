#include "estimator/batch_search.h"

namespace memtrace::estimator {

std::optional<int64_t> largestBatchWithin(int64_t budgetBytes,
                                          const std::function<int64_t(int64_t)>& needBytes,
                                          int64_t limit) {
  if (limit < 1 || needBytes(1) > budgetBytes) return std::nullopt;
  int64_t fits = 1;
  int64_t tooLarge = limit + 1;  // the smallest batch known not to fit (or past the limit)
  while (fits * 2 <= limit) {
    if (needBytes(fits * 2) > budgetBytes) {
      tooLarge = fits * 2;
      break;
    }
    fits *= 2;
  }
  while (tooLarge - fits > 1) {
    int64_t middle = fits + (tooLarge - fits) / 2;
    if (needBytes(middle) <= budgetBytes)
      fits = middle;
    else
      tooLarge = middle;
  }
  return fits;
}

}  // namespace memtrace::estimator
