// Byte counts for people: "13.54 GiB". The one formatter of the C++ tools, so that a size reads
// the same in every view; header-only, since both the report and the estimator use it.
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

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

// "24GiB", "512MiB", "1.5GB", "1000000": binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB,
// TB) units, case-insensitive, B optional. Nothing on a malformed or negative size.
inline std::optional<int64_t> parseByteSize(std::string_view text) {
  size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) {
    ++end;
  }
  if (end == 0) return std::nullopt;
  double number = 0;
  auto [parsed, error] = std::from_chars(text.data(), text.data() + end, number);
  if (error != std::errc() || parsed != text.data() + end) return std::nullopt;
  std::string unit;
  for (char character : text.substr(end)) {
    if (character != ' ')
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(character)));
  }
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  double scale;
  if (unit.empty())
    scale = 1;
  else if (unit == "ki")
    scale = 1024.0;
  else if (unit == "mi")
    scale = 1024.0 * 1024;
  else if (unit == "gi")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "ti")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "k")
    scale = 1e3;
  else if (unit == "m")
    scale = 1e6;
  else if (unit == "g")
    scale = 1e9;
  else if (unit == "t")
    scale = 1e12;
  else
    return std::nullopt;
  double bytes = std::floor(number * scale);
  if (!(bytes >= 0) || bytes > 9.0e18) return std::nullopt;
  return static_cast<int64_t>(bytes);
}

}  // namespace memtrace
