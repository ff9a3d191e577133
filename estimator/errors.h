#pragma once

#include <stdexcept>
#include <string>

namespace memtrace::estimator {

// Bad input to the estimator: a missing or malformed model, wrong inputs, an op it cannot run.
// The message is one line meant for the user; memtrace-estimate prints it and exits with 2.
class EstimateError : public std::runtime_error {
 public:
  explicit EstimateError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace memtrace::estimator
