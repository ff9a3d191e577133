#include "estimator/byte_size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "tracer/common/byte_format.h"

namespace memtrace::estimator {

std::optional<int64_t> parseByteSize(std::string_view text) {
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

std::string formatBytes(int64_t bytes) {
  return memtrace::formatSignedBytes(bytes, /*significant_digits=*/3);
}

}  // namespace memtrace::estimator
