#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memtrace::estimator {

// "24GiB", "512MiB", "1.5GB", "1000000": binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB,
// TB) units, case-insensitive, B optional. Nothing on a malformed or negative size.
std::optional<int64_t> parseByteSize(std::string_view text);

// "9.95 MiB": the project's one byte formatter (tracer/common/byte_format.h) at the three
// significant digits the estimator's tables use.
std::string formatBytes(int64_t bytes);

}  // namespace memtrace::estimator
