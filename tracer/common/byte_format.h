// Byte counts for people: "13.54 GiB". The one formatter of the C++ tools, so that a size reads
// the same in every view; header-only, since both the report and the estimator use it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace memtrace {

// "512 B" below 1 KiB (exact), else `significant_digits` digits in the largest binary unit
// (KiB ... PiB) that keeps the value at least 1: "1.000 KiB", "13.22 GiB", "200.0 GiB" with 4
// (the report), "9.95 MiB", "200 GiB" with 3. The number of decimals is chosen from the value
// before rounding, so 1023.99 KiB with 4 digits reads "1024.0 KiB".
inline std::string formatBytes(uint64_t bytes, int significant_digits = 4) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  int integer_digits = value >= 100 ? 3 : value >= 10 ? 2 : 1;
  int decimals = significant_digits > integer_digits ? significant_digits - integer_digits : 0;
  char text[48];
  std::snprintf(text, sizeof(text), "%.*f %s", decimals, value, kUnits[unit]);
  return text;
}

// Likewise for a count that may be negative (a difference of two sizes): "-1.50 MiB".
inline std::string formatSignedBytes(int64_t bytes, int significant_digits = 4) {
  if (bytes >= 0) return formatBytes(static_cast<uint64_t>(bytes), significant_digits);
  // Negated as unsigned, so that INT64_MIN has a magnitude too.
  return "-" + formatBytes(uint64_t{0} - static_cast<uint64_t>(bytes), significant_digits);
}

}  // namespace memtrace
