#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "estimator/graph.h"

namespace memtrace::estimator {

// Live bytes at the peak that share a key: a source line, or a module instance.
struct LiveGroup {
  SourceFrame frame;        // the line; unknown for module groups
  std::string module_path;  // the module; empty for line groups
  int64_t bytes = 0;
  int64_t tensors = 0;
};

// The storages live at the peak, each charged to the node that allocated it, grouped three
// ways. The first two are the tracer's two groupings (Note [Two groupings by line]).
struct PeakAttribution {
  std::vector<LiveGroup> by_frame;       // innermost source range
  std::vector<LiveGroup> by_user_frame;  // innermost frame in the user's own code
  std::vector<LiveGroup> by_module;      // module instance path
  std::vector<StorageId> storages;       // the live storages, largest first
};

PeakAttribution attributePeak(const Graph& graph, const std::vector<StorageId>& live);

}  // namespace memtrace::estimator
