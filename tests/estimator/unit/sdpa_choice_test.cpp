// sdpa's kernel choice in the estimator (estimator/sdpa_choice.cpp) answers every case of
// tests/estimator/sdpa_cases.json as the file says, kernel and reason word for word; the
// Python choice (mem_tracer.estimator.device_kernels) is held to the same file by
// tests/estimator/test_sdpa_choice.py (Note [sdpa's kernel choice]).
#include "estimator/sdpa_choice.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "estimator/device_profile.h"

namespace memtrace::estimator {
namespace {

using nlohmann::json;

SdpaTensor tensorOf(const json& spec) {
  return {spec.at("sizes").get<std::vector<int64_t>>(), spec.value("last_stride", int64_t{1}),
          spec.value("nested", false)};
}

SdpaCall callOf(const json& c) {
  return {tensorOf(c.at("query")),
          tensorOf(c.at("key")),
          tensorOf(c.at("value")),
          c.at("dtype").get<std::string>(),
          c.at("element_size").get<int64_t>(),
          c.value("mask", false),
          c.value("dropout", 0.0),
          c.value("is_causal", false),
          c.value("enable_gqa", false)};
}

TEST(SdpaChoice, AnswersEverySharedCaseAsTheFileSays) {
  std::ifstream file(MEMTRACE_SDPA_CASES);
  ASSERT_TRUE(file) << MEMTRACE_SDPA_CASES;
  json document = json::parse(file);
  std::map<std::string, DeviceProfile> profiles;
  size_t checked = 0;
  for (const json& c : document.at("cases")) {
    std::string name = c.at("profile").get<std::string>();
    if (!profiles.count(name)) {
      profiles.emplace(name, loadDeviceProfile(name, MEMTRACE_PROFILE_DIRECTORY));
    }
    SdpaChoice choice = chooseSdpaKernel(profiles.at(name).kernels.sdpa, callOf(c));
    EXPECT_EQ(choice.name, c.at("kernel").get<std::string>()) << name << ": " << c.at("name");
    EXPECT_EQ(choice.why, c.at("why").get<std::string>()) << name << ": " << c.at("name");
    EXPECT_EQ(choice.kernel == nullptr, choice.name == "math");
    ++checked;
  }
  EXPECT_GT(checked, 80u);
}

}  // namespace
}  // namespace memtrace::estimator
