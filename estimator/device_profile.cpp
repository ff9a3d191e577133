#include "estimator/device_profile.h"

#include <algorithm>
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

  where = origin + ": convolution_workspace";
  const json& convolution = member(document, "convolution_workspace", origin);
  if (!member(convolution, "bound_bytes", where).is_null()) {
    profile.convolution_workspace_bound_bytes = nonNegativeBytes(convolution, "bound_bytes", where);
  }
  profile.convolution_ops = opNames(convolution, where);
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
