#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tracer/common/byte_format.h"

namespace memtrace::estimator {

// The project's one parser of sizes (tracer/common/byte_format.h).
using memtrace::parseByteSize;

// "9.95 MiB": the project's one byte formatter (tracer/common/byte_format.h) at the three
// significant digits the estimator's tables use.
std::string formatBytes(int64_t bytes);

}  // namespace memtrace::estimator
