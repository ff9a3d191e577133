#include "estimator/byte_size.h"

#include <string>

#include "tracer/common/byte_format.h"

namespace memtrace::estimator {

std::string formatBytes(int64_t bytes) {
  return memtrace::formatSignedBytes(bytes, /*significant_digits=*/3);
}

}  // namespace memtrace::estimator
