#include "estimator/device_profile.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "estimator/errors.h"

namespace memtrace::estimator {

namespace {

using nlohmann::json;

const json& member(const json& object, const char* key, const std::string& where) {
  auto found = object.find(key);
  if (found == object.end()) throw EstimateError(where + ": missing \"" + key + "\"");
  return *found;
}

int64_t nonNegativeBytes(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    throw EstimateError(where + ": \"" + key + "\" must be a non-negative integer");
  }
  return value.get<int64_t>();
}

std::vector<std::string> opNames(const json& object, const std::string& where) {
  const json& ops = member(object, "ops", where);
  if (!ops.is_array()) throw EstimateError(where + ": \"ops\" must be a list of op names");
  std::vector<std::string> names;
  for (const json& op : ops) {
    if (!op.is_string()) throw EstimateError(where + ": \"ops\" must be a list of op names");
    names.push_back(op.get<std::string>());
  }
  return names;
}

int64_t positiveInteger(const json& object, const char* key, int64_t fallback,
                        const std::string& where) {
  auto found = object.find(key);
  if (found == object.end() || found->is_null()) return fallback;
  if (!found->is_number_integer() || found->get<int64_t>() < 0) {
    throw EstimateError(where + ": \"" + key + "\" must be a non-negative integer");
  }
  return found->get<int64_t>();
}

bool flag(const json& object, const char* key, bool fallback, const std::string& where) {
  auto found = object.find(key);
  if (found == object.end()) return fallback;
  if (!found->is_boolean()) throw EstimateError(where + ": \"" + key + "\" must be true or false");
  return found->get<bool>();
}

std::string text(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  if (!value.is_string() || value.get<std::string>().empty()) {
    throw EstimateError(where + ": \"" + key + "\" must be a non-empty string");
  }
  return value.get<std::string>();
}

// `kernels.temporaries` (Note [What a CUDA kernel allocates inside itself]).
std::vector<KernelTemporary> parseTemporaries(const json& kernels, const std::string& origin) {
  auto list = kernels.find("temporaries");
  if (list == kernels.end()) return {};
  std::string where = origin + ": temporaries";
  if (!list->is_array()) throw EstimateError(where + " must be a list");
  std::vector<KernelTemporary> temporaries;
  for (const json& entry : *list) {
    if (!entry.is_object()) throw EstimateError(where + ": each entry must be an object");
    KernelTemporary temporary;
    temporary.op = text(entry, "op", where);
    std::string at = where + ": " + temporary.op;
    temporary.like = text(entry, "like", at);
    if (auto dtype_of = entry.find("dtype_of"); dtype_of != entry.end()) {
      if (!dtype_of->is_array()) throw EstimateError(at + ": \"dtype_of\" must be a list");
      for (const json& name : *dtype_of) {
        if (!name.is_string()) throw EstimateError(at + ": \"dtype_of\" must list arguments");
        temporary.dtype_of.push_back(name.get<std::string>());
      }
    }
    std::string when = text(entry, "when", at);
    if (when != "before_outputs" && when != "after_outputs") {
      throw EstimateError(at + ": \"when\" must be \"before_outputs\" or \"after_outputs\"");
    }
    temporary.before_outputs = when == "before_outputs";
    temporary.only_if_not_contiguous = flag(entry, "only_if_not_contiguous", false, at);
    temporary.what = text(entry, "what", at);
    temporaries.push_back(std::move(temporary));
  }
  return temporaries;
}

KernelRules parseKernels(const json& kernels, const std::string& origin) {
  std::string where = origin + ": kernels";
  if (!kernels.is_object()) throw EstimateError(where + " must be an object");
  KernelRules rules;
  rules.device = kernels.value("device", "cuda");
  if (rules.device != "cuda" && rules.device != "cpu") {
    throw EstimateError(where + ": \"device\" must be \"cuda\" or \"cpu\"");
  }
  rules.count_kernel_scratch = flag(kernels, "count_kernel_scratch", true, where);
  rules.scratch_source = kernels.value("scratch_source", "");
  rules.temporaries = parseTemporaries(kernels, where);
  auto sdpa = kernels.find("sdpa");
  if (sdpa == kernels.end()) return rules;
  where += ": sdpa";
  rules.sdpa_source = sdpa->value("source", "");
  const json& order = member(*sdpa, "order", where);
  if (!order.is_array()) throw EstimateError(where + ": \"order\" must be a list of kernels");
  for (const json& name : order) {
    if (!name.is_string()) throw EstimateError(where + ": \"order\" must be a list of kernels");
    std::string kernel_name = name.get<std::string>();
    if (kernel_name == "math") break;  // the fallback: what the meta decomposition runs
    static const std::vector<std::string> kKnown = {"flash", "efficient", "cudnn", "flash_cpu"};
    if (std::find(kKnown.begin(), kKnown.end(), kernel_name) == kKnown.end()) {
      throw EstimateError(where + ": unknown sdpa kernel \"" + kernel_name +
                          "\" (known: flash, efficient, cudnn, flash_cpu, math)");
    }
    std::string at = where + ": " + kernel_name;
    const json& entry = member(*sdpa, kernel_name.c_str(), where);
    SdpaKernel kernel;
    kernel.name = kernel_name;
    for (const json& dtype : member(entry, "dtypes", at)) kernel.dtypes.push_back(dtype);
    kernel.max_head_dim = positiveInteger(entry, "max_head_dim", 0, at);
    kernel.head_dim_multiple =
        std::max<int64_t>(1, positiveInteger(entry, "head_dim_multiple", 1, at));
    kernel.head_dim_alignment_bytes =
        std::max<int64_t>(1, positiveInteger(entry, "head_dim_alignment_bytes", 1, at));
    kernel.same_head_dims = flag(entry, "same_head_dims", false, at);
    kernel.gqa = flag(entry, "gqa", true, at);
    kernel.mask = flag(entry, "mask", true, at);
    kernel.dropout = flag(entry, "dropout", true, at);
    kernel.dropout_resolution = positiveInteger(entry, "dropout_resolution", 0, at);
    kernel.causal_needs_square = flag(entry, "causal_needs_square", false, at);
    kernel.pad_head_dim_to = std::max<int64_t>(1, positiveInteger(entry, "pad_head_dim_to", 1, at));
    kernel.pad_mask_to = std::max<int64_t>(1, positiveInteger(entry, "pad_mask_to", 1, at));
    kernel.logsumexp = flag(entry, "logsumexp", false, at);
    kernel.bhld_output = flag(entry, "bhld_output", false, at);
    kernel.output_like_query = flag(entry, "output_like_query", false, at);
    if (auto since = entry.find("gqa_from_torch"); since != entry.end()) {
      kernel.gqa_from_release =
          since->is_string() ? parseTorchRelease(since->get<std::string>()) : std::nullopt;
      if (!kernel.gqa_from_release) {
        throw EstimateError(at + ": \"gqa_from_torch\" must be a release such as \"2.14\"");
      }
    }
    rules.sdpa.push_back(std::move(kernel));
  }
  return rules;
}

}  // namespace

DeviceProfile parseDeviceProfile(const std::string& json_text, const std::string& origin) {
  json document;
  try {
    document = json::parse(json_text);
  } catch (const json::parse_error& error) {
    throw EstimateError(origin + ": not valid JSON (" + error.what() + ")");
  }
  if (!document.is_object()) throw EstimateError(origin + ": a profile is a JSON object");

  DeviceProfile profile;
  const json& name = member(document, "name", origin);
  if (!name.is_string()) throw EstimateError(origin + ": \"name\" must be a string");
  profile.name = name.get<std::string>();
  profile.description = document.value("description", "");

  std::string where = origin + ": caching_allocator";
  const json& allocator = member(document, "caching_allocator", origin);
  CachingAllocatorRules& rules = profile.allocator;
  rules.minimum_block_bytes = nonNegativeBytes(allocator, "minimum_block_bytes", where);
  rules.small_request_limit_bytes = nonNegativeBytes(allocator, "small_request_limit_bytes", where);
  rules.small_segment_bytes = nonNegativeBytes(allocator, "small_segment_bytes", where);
  rules.large_segment_threshold_bytes =
      nonNegativeBytes(allocator, "large_segment_threshold_bytes", where);
  rules.large_segment_bytes = nonNegativeBytes(allocator, "large_segment_bytes", where);
  rules.large_segment_rounding_bytes =
      nonNegativeBytes(allocator, "large_segment_rounding_bytes", where);
  rules.caches_freed_blocks = flag(allocator, "caches_freed_blocks", true, where);
  if (rules.minimum_block_bytes == 0 || rules.large_segment_rounding_bytes == 0) {
    throw EstimateError(where + ": block and rounding sizes must be positive");
  }
  if (rules.small_segment_bytes < rules.small_request_limit_bytes ||
      rules.large_segment_bytes < rules.large_segment_threshold_bytes) {
    throw EstimateError(where + ": a segment must hold the largest request of its pool");
  }

  where = origin + ": cublas_workspace";
  const json& cublas = member(document, "cublas_workspace", origin);
  profile.cublas_workspace_bytes = nonNegativeBytes(cublas, "bytes", where);
  profile.cublas_ops = opNames(cublas, where);

  auto cublaslt = document.find("cublaslt_workspace");  // optional: profiles of one's own
  if (cublaslt != document.end()) {
    where = origin + ": cublaslt_workspace";
    profile.cublaslt_workspace_bytes = nonNegativeBytes(*cublaslt, "bytes", where);
    profile.cublaslt_ops = opNames(*cublaslt, where);
    if (auto last = cublaslt->find("last_torch_release"); last != cublaslt->end()) {
      profile.cublaslt_last_release =
          last->is_string() ? parseTorchRelease(last->get<std::string>()) : std::nullopt;
      if (!profile.cublaslt_last_release) {
        throw EstimateError(where + ": \"last_torch_release\" must be a release such as \"2.11\"");
      }
    }
  }

  where = origin + ": convolution_workspace";
  const json& convolution = member(document, "convolution_workspace", origin);
  if (!member(convolution, "bound_bytes", where).is_null()) {
    profile.convolution_workspace_bound_bytes = nonNegativeBytes(convolution, "bound_bytes", where);
  }
  profile.convolution_ops = opNames(convolution, where);
  auto kernels = document.find("kernels");
  if (kernels != document.end()) profile.kernels = parseKernels(*kernels, origin);
  return profile;
}

std::optional<TorchRelease> parseTorchRelease(const std::string& text) {
  TorchRelease release;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [after_major, major_error] = std::from_chars(begin, end, release.major);
  if (major_error != std::errc() || after_major == end || *after_major != '.') return std::nullopt;
  auto [after_minor, minor_error] = std::from_chars(after_major + 1, end, release.minor);
  if (minor_error != std::errc()) return std::nullopt;
  // A patch release and a local version may follow: "2.14.1+cu130".
  if (after_minor != end && *after_minor != '.' && *after_minor != '+') return std::nullopt;
  return release;
}

std::string torchReleaseText(TorchRelease release) {
  return std::to_string(release.major) + "." + std::to_string(release.minor);
}

DeviceProfile applyTorchRelease(DeviceProfile profile, TorchRelease release) {
  profile.torch_release = release;
  for (SdpaKernel& kernel : profile.kernels.sdpa) {
    if (kernel.gqa_from_release && release >= *kernel.gqa_from_release) kernel.gqa = true;
  }
  if (profile.cublaslt_last_release && release > *profile.cublaslt_last_release) {
    profile.cublaslt_workspace_bytes = 0;
  }
  return profile;
}

DeviceProfile loadDeviceProfile(const std::string& name_or_path,
                                const std::string& profile_directory) {
  bool is_path = name_or_path.find('/') != std::string::npos ||
                 (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  std::string path = is_path ? name_or_path : profile_directory + "/" + name_or_path + ".json";
  std::ifstream file(path);
  if (!file) {
    if (is_path) throw EstimateError("device profile " + path + ": cannot open");
    std::string known;
    for (const std::string& name : listDeviceProfiles(profile_directory)) {
      known += (known.empty() ? "" : ", ") + name;
    }
    throw EstimateError("unknown device profile '" + name_or_path + "' (known: " +
                        (known.empty() ? "none found in " + profile_directory : known) + ")");
  }
  std::stringstream text;
  text << file.rdbuf();
  return parseDeviceProfile(text.str(), path);
}

std::vector<std::string> listDeviceProfiles(const std::string& profile_directory) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(profile_directory, error)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace memtrace::estimator
