#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "estimator/graph.h"
#include "estimator/passes/replay_caching_allocator.h"

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

// Note [Workspaces on their lines]
// The figure a measurement is compared with is requested_bytes.all.peak: the weights, the
// inputs, the activations and the library workspaces live at once (cuBLAS's, kept from the
// first matmul on; cuBLASLt's, where the torch release keeps one; a convolution's, while it
// runs). A trace charges a workspace to the line whose op took it, as it charges a tensor (the
// first matmul's line holds cuBLAS's 32 MiB on an H100). So the per-line prediction beside a
// measurement is taken where requested_bytes peaks, not where the activations alone do, and
// each workspace live there is charged to the node that took it, under every grouping: then
// the lines, with the weights and inputs (which have no line: they are there before the
// forward), sum to the predicted peak, as the measured lines sum to the measured one. By
// module, the weights are charged too, each to the module whose parameter or buffer it is (by
// its name, "blocks.0.attn.qkv.weight"), as the tracer's module table puts them (Note
// [Weights and their modules] in tracer/format/records.h). The activations' own peak keeps its
// attribution ("peak" of the estimate's JSON); this one is "requested_peak".
PeakAttribution attributeRequestedPeak(const Graph& graph, const std::vector<StorageId>& live,
                                       const std::vector<Workspace>& workspaces);

}  // namespace memtrace::estimator
