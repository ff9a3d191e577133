#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memtrace::estimator {

// One model input as the command line gives it: "1x3x224x224", "4x128:int64".
struct InputSpec {
  std::vector<int64_t> shape;
  std::string dtype = "float32";  // canonical name, see canonicalDtype()
};

// Throws EstimateError on a malformed shape or an unknown dtype.
InputSpec parseInputSpec(std::string_view text);

// The canonical name of a dtype ("float" -> "float32", "half" -> "float16", "long" -> "int64"),
// or nothing for a name the estimator does not know.
std::optional<std::string> canonicalDtype(std::string_view name);

std::string describeInputSpec(const InputSpec& spec);

// Throws EstimateError, naming `given` (the option that set it), when the input's bytes
// (elements times the dtype's size) would not fit in an int64, as no tensor's can.
void checkInputFits(const InputSpec& spec, std::string_view given);

}  // namespace memtrace::estimator
