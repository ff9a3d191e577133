#pragma once

#include <cctype>
#include <stdexcept>
#include <string>

namespace memtrace::estimator {

// The first line of a message that has text: LibTorch's often start with a newline and go on
// for many lines (backtraces, source excerpts).
inline std::string firstLineOf(const std::string& text) {
  size_t start = text.find_first_not_of(" \n");
  if (start == std::string::npos) return {};
  std::string line = text.substr(start, text.find('\n', start) - start);  // substr clamps npos
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// Bad input to the estimator: a missing or malformed model, wrong inputs, an op it cannot run.
// The message is one line meant for the user; memtrace-estimate prints it and exits with 2.
class EstimateError : public std::runtime_error {
 public:
  explicit EstimateError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace memtrace::estimator
