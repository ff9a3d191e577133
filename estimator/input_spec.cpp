#include "estimator/input_spec.h"

#include <charconv>
#include <utility>

#include "estimator/errors.h"

namespace memtrace::estimator {

namespace {

// Python-side spellings (torch.float32 and its aliases) and their canonical names.
constexpr std::pair<std::string_view, std::string_view> kDtypeNames[] = {
    {"float32", "float32"}, {"float", "float32"},       {"float16", "float16"},
    {"half", "float16"},    {"bfloat16", "bfloat16"},   {"float64", "float64"},
    {"double", "float64"},  {"int64", "int64"},         {"long", "int64"},
    {"int32", "int32"},     {"int", "int32"},           {"int16", "int16"},
    {"short", "int16"},     {"int8", "int8"},           {"uint8", "uint8"},
    {"bool", "bool"},       {"complex64", "complex64"}, {"complex128", "complex128"},
};

// Bytes per element of each canonical dtype.
constexpr std::pair<std::string_view, int64_t> kDtypeBytes[] = {
    {"float32", 4}, {"float16", 2}, {"bfloat16", 2},  {"float64", 8},
    {"int64", 8},   {"int32", 4},   {"int16", 2},     {"int8", 1},
    {"uint8", 1},   {"bool", 1},    {"complex64", 8}, {"complex128", 16},
};

}  // namespace

void checkInputFits(const InputSpec& spec, std::string_view given) {
  int64_t bytes = 1;
  for (const auto& [name, size] : kDtypeBytes)
    if (name == spec.dtype) bytes = size;
  for (int64_t dimension : spec.shape) {
    // Checked here, before LibTorch sees it: its own overflow check surfaces as an
    // internal error, not as the bad input it is.
    if (__builtin_mul_overflow(bytes, dimension, &bytes))
      throw EstimateError(std::string(given) + ": " + describeInputSpec(spec) +
                          " is too large (more than 2^63 - 1 bytes)");
  }
}

std::optional<std::string> canonicalDtype(std::string_view name) {
  for (const auto& [alias, canonical] : kDtypeNames) {
    if (alias == name) return std::string(canonical);
  }
  return std::nullopt;
}

InputSpec parseInputSpec(std::string_view text) {
  InputSpec spec;
  std::string_view shape = text;
  size_t colon = text.find(':');
  if (colon != std::string_view::npos) {
    shape = text.substr(0, colon);
    std::string_view dtype = text.substr(colon + 1);
    std::optional<std::string> canonical = canonicalDtype(dtype);
    if (!canonical) {
      std::string known;
      for (const auto& [alias, ignored] : kDtypeNames)
        known += (known.empty() ? "" : ", ") + std::string(alias);
      throw EstimateError("--input " + std::string(text) + ": unknown dtype '" +
                          std::string(dtype) + "' (known: " + known + ")");
    }
    spec.dtype = *canonical;
  }
  size_t start = 0;
  while (start <= shape.size()) {
    size_t end = shape.find('x', start);
    if (end == std::string_view::npos) end = shape.size();
    std::string_view part = shape.substr(start, end - start);
    int64_t dimension = -1;
    auto [parsed, error] = std::from_chars(part.data(), part.data() + part.size(), dimension);
    if (part.empty() || error != std::errc() || parsed != part.data() + part.size() ||
        dimension < 0) {
      throw EstimateError("--input " + std::string(text) +
                          ": expected a shape like 1x3x224x224, optionally followed by :dtype");
    }
    spec.shape.push_back(dimension);
    start = end + 1;
  }
  checkInputFits(spec, "--input " + std::string(text));
  return spec;
}

std::string describeInputSpec(const InputSpec& spec) {
  std::string text;
  for (int64_t dimension : spec.shape)
    text += (text.empty() ? "" : "x") + std::to_string(dimension);
  return text + ":" + spec.dtype;
}

}  // namespace memtrace::estimator
