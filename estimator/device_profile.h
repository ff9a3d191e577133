// What the estimator knows of a device: the caching allocator's rounding and segment rules and
// the library workspaces that go through it. Profiles are data (estimator/profiles/*.json),
// each number with the PyTorch source it comes from; docs/estimate-format.md lists the fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memtrace::estimator {

// The constants of c10/cuda/CUDACachingAllocator.cpp.
struct CachingAllocatorRules {
  int64_t minimum_block_bytes = 0;            // kMinBlockSize: every request rounds up to this
  int64_t small_request_limit_bytes = 0;      // kSmallSize: requests up to it use the small pool
  int64_t small_segment_bytes = 0;            // kSmallBuffer: segment size of the small pool
  int64_t large_segment_threshold_bytes = 0;  // kMinLargeAlloc: below it a large request...
  int64_t large_segment_bytes = 0;            // kLargeBuffer: ...gets a segment of this size
  int64_t large_segment_rounding_bytes = 0;   // kRoundLarge: larger requests round up to it
};

struct DeviceProfile {
  std::string name;
  std::string description;
  CachingAllocatorRules allocator;
  // cuBLAS keeps one workspace per (device, stream), allocated through the caching allocator
  // by the first op that calls cuBLAS and never freed.
  int64_t cublas_workspace_bytes = 0;
  std::vector<std::string> cublas_ops;
  // cuDNN chooses a convolution algorithm, and its workspace, at run time: a bound, not a
  // prediction. None: no bound stated, convolution workspaces are left out (and said so).
  std::optional<int64_t> convolution_workspace_bound_bytes;
  std::vector<std::string> convolution_ops;
};

// Parses a profile; `origin` names it in error messages. Throws EstimateError.
DeviceProfile parseDeviceProfile(const std::string& json_text, const std::string& origin);

// `name_or_path` is a file path when it contains '/' or ends in ".json", else a profile name
// looked up as <profile_directory>/<name>.json. Throws EstimateError.
DeviceProfile loadDeviceProfile(const std::string& name_or_path,
                                const std::string& profile_directory);

// The names of the profiles in a directory, sorted.
std::vector<std::string> listDeviceProfiles(const std::string& profile_directory);

}  // namespace memtrace::estimator
