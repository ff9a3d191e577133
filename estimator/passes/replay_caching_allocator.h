#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "estimator/device_profile.h"
#include "estimator/graph.h"
#include "estimator/timeline.h"

namespace memtrace::estimator {

// A library's workspace, taken through the caching allocator by the node that first needed it
// (Note [Workspaces on their lines]).
struct Workspace {
  const char* library = "";  // "cuBLAS", "cuBLASLt", "convolution"
  int64_t bytes = 0;
  NodeId node;
};

// What torch.cuda.memory_stats() would say after one forward pass on a fresh process:
// weights and inputs are allocated first (Module.to(device), then the inputs), then the
// forward's own allocations and releases replay through a model of PyTorch's caching allocator.
// Note [Caching allocator replay].
struct AllocatorReplay {
  // After the weights and inputs, before the first node ("baseline" in the seeds' tables).
  int64_t baseline_requested_bytes = 0;
  int64_t baseline_allocated_bytes = 0;
  int64_t baseline_reserved_bytes = 0;
  // requested_bytes.all.peak, allocated_bytes.all.peak (max_memory_allocated()),
  // reserved_bytes.all.peak (max_memory_reserved()).
  int64_t peak_requested_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  NodeId peak_requested_node;
  NodeId peak_allocated_node;
  // The cuBLAS workspace, when a node calls cuBLAS: its size and the first such node.
  int64_t cublas_workspace_bytes = 0;
  NodeId cublas_workspace_node;
  // cuBLASLt's own workspace, when a node runs through cuBLASLt and the profile keeps one
  // (Note [The cuBLASLt workspace]): its size and the first such node.
  int64_t cublaslt_workspace_bytes = 0;
  NodeId cublaslt_workspace_node;
  // The convolution workspace bound applied to each convolution, 0 when none was stated.
  int64_t convolution_workspace_bound_bytes = 0;
  // Where requested_bytes first reaches its peak (Note [Workspaces on their lines]): how many
  // timeline events had been applied then, and the library workspaces live there.
  size_t peak_requested_events = 0;
  std::vector<Workspace> peak_requested_workspaces;
  int64_t segments = 0;  // held when the forward returns
  // With a memory limit: an allocation failed even after the cached segments were released.
  // The replay stops there (at out_of_memory_node; none: the weights and inputs did not fit).
  bool out_of_memory = false;
  NodeId out_of_memory_node;
};

// `memory_limit_bytes`: the device memory the allocator may reserve; none for as much as it asks.
AllocatorReplay replayCachingAllocator(const Graph& graph,
                                       const std::vector<TimelineEvent>& timeline,
                                       const DeviceProfile& profile,
                                       std::optional<int64_t> memory_limit_bytes = std::nullopt);

}  // namespace memtrace::estimator
