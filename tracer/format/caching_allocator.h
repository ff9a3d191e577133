// PyTorch's caching allocator's sizing rules, in one place for both sides that replay them: the
// estimator's model of the allocator (estimator/passes/replay_caching_allocator.cpp), which
// predicts a run, and the report's replay of a trace's blocks (tracer/report/block_replay.h),
// which sizes the blocks a run was handed.
#pragma once

#include <algorithm>
#include <cstdint>

namespace memtrace::format {

// Note [PyTorch's caching allocator rules]
// The constants of c10/cuda/CUDACachingAllocator.cpp (the same from torch 2.11 to 2.14) with the
// default configuration (PYTORCH_CUDA_ALLOC_CONF without roundup_power2_divisions or
// max_split_size_mb):
//   - round_size: a request of n bytes becomes a block of n rounded up to a multiple of
//     kMinBlockSize (512), and at least that;
//   - blocks of at most kSmallSize (1 MiB) come from the small pool, larger ones from the large;
//   - should_split: a free block found for a request is split if what remains is at least
//     kMinBlockSize (small pool) or more than kSmallSize (large pool); otherwise the whole block
//     is handed out, and allocated_bytes (max_memory_allocated) counts all of it while
//     requested_bytes counts n; with expandable segments (expandable_segments:True) every
//     block is split as the small pool's are;
//   - get_allocation_size: a new segment is kSmallBuffer (2 MiB) for a small block, kLargeBuffer
//     (20 MiB) below kMinLargeAlloc (10 MiB), else the block rounded up to kRoundLarge (2 MiB).
// The estimator takes the numbers from its device profiles (estimator/profiles/*.json, each
// with its source); the report's replay takes these defaults.
struct CachingAllocatorRules {
  int64_t minimum_block_bytes = 512;                 // kMinBlockSize
  int64_t small_request_limit_bytes = 1 << 20;       // kSmallSize
  int64_t small_segment_bytes = 2 << 20;             // kSmallBuffer
  int64_t large_segment_threshold_bytes = 10 << 20;  // kMinLargeAlloc
  int64_t large_segment_bytes = 20 << 20;            // kLargeBuffer
  int64_t large_segment_rounding_bytes = 2 << 20;    // kRoundLarge
  // False for an allocator that gives freed memory back at once (the CPU's): reserved bytes
  // are then the allocated bytes.
  bool caches_freed_blocks = true;
};

// The annotation memtrace writes when the traced program set allocator settings that change
// these rules (roundup_power2_divisions, max_split_size_mb), followed by the variable and its
// value: the report's replay of the blocks then says it does not know them.
inline constexpr char kAllocatorSettingsMark[] = "memtrace: PyTorch's allocator settings: ";
// The annotation memtrace writes when it recorded, from PyTorch's snapshot, tensors another
// thread made while the tracker was being attached (Note [Tensors made while the tracker
// attaches] in allocator/torch_allocator.cpp), followed by how many and their bytes.
inline constexpr char kHeldDuringAttachMark[] =
    "memtrace: made on another thread while memtrace attached to PyTorch's allocator: ";

// round_size: the block a request of `bytes` needs.
inline int64_t roundRequest(const CachingAllocatorRules& rules, int64_t bytes) {
  int64_t unit = rules.minimum_block_bytes;
  return std::max(unit, (bytes + unit - 1) / unit * unit);
}

// Whether a block of `size` (rounded) comes from the small pool.
inline bool smallPool(const CachingAllocatorRules& rules, int64_t size) {
  return size <= rules.small_request_limit_bytes;
}

// should_split: whether a free block `remaining` bytes larger than the request is split.
inline bool shouldSplit(const CachingAllocatorRules& rules, bool small, int64_t remaining) {
  return small ? remaining >= rules.minimum_block_bytes
               : remaining > rules.small_request_limit_bytes;
}

// get_allocation_size: the segment a block of `size` (rounded) gets when no free block fits.
inline int64_t segmentSize(const CachingAllocatorRules& rules, int64_t size) {
  if (smallPool(rules, size)) return rules.small_segment_bytes;
  if (size < rules.large_segment_threshold_bytes) return rules.large_segment_bytes;
  int64_t unit = rules.large_segment_rounding_bytes;
  return (size + unit - 1) / unit * unit;
}

}  // namespace memtrace::format
