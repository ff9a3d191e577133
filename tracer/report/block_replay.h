// The blocks PyTorch's caching allocator handed out, replayed from a trace: what
// max_memory_allocated counts, beside the requested bytes the trace holds (Note [Allocated
// bytes, replayed]).
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>

#include "tracer/format/caching_allocator.h"
#include "tracer/reader/reader.h"

namespace memtrace::report {

// Note [Allocated bytes, replayed]
// PyTorch's trace tracker tells each tensor's address and requested size, and each segment's
// address and size (Note [PyTorch's own allocator] in tracer/format/records.h), never the size
// of the block it handed out, which is what allocated_bytes (max_memory_allocated) counts. That
// size follows from the two and the allocator's rules (Note [PyTorch's caching allocator
// rules]): a block is always taken from the start of a free block; free blocks of a segment are
// always merged with their free neighbours (free_block's try_merge_blocks, once the block's
// stream work is done: the tracker's FREE_COMPLETED, where memtrace records the free); so the
// free block a tensor at address A got is the whole gap from A to the next live block of its
// segment (or the segment's end), and the block handed out is that gap, or the request rounded
// up when should_split cuts the gap. Expandable segments grow and shrink by their mappings
// (SEGMENT_MAP, SEGMENT_UNMAP): a run of adjacent mappings is one segment, and its blocks are
// split as the small pool's are (should_split under expandable_segments).
// The replay holds only where it saw every block of a segment: a tensor outside any segment
// recorded (attached late, a flight recorder's kept window), a gap smaller than the request, or
// an address already live make the device's figure unknown, never a guess. It assumes the
// default configuration (no roundup_power2_divisions, no max_split_size_mb): where the program
// sets either in its environment, the attach marks it in the trace (kAllocatorSettingsMark) and
// the figure is unknown. A setting changed mid-run (`torch.cuda.memory._set_allocator_settings`)
// is not seen there: `memtrace run` compares the figure with the program's own
// max_memory_allocated at its end (Note [PyTorch's counters beside the trace] in
// python/mem_tracer/cli.py), so it is said, not hidden.
// At a point (the peak, the OOM, a time) the live set's replay places the same blocks, so each
// line's tensors have their blocks' sizes beside their requests (LiveSet::allocated_known), the
// lines together PyTorch's allocated bytes there.
class BlockReplay {
 public:
  explicit BlockReplay(format::CachingAllocatorRules rules = {}) : rules_(rules) {}

  void onSegment(const reader::Segment& segment);
  // A tensor of PyTorch's (Api::kTorchAllocator) of `requested` bytes at `address`: the size of
  // the block it was handed, 0 when it cannot be known (the device is then lost()).
  uint64_t onAlloc(int device, uint64_t address, uint64_t requested);
  // Its free: the size of the block given back (0 for one never placed).
  uint64_t onFree(int device, uint64_t address);
  // The block live at `address` now (its size), 0 when none is.
  uint64_t block(int device, uint64_t address) const;
  // The device's blocks could not all be placed: its allocated bytes are unknown.
  bool lost(int device) const;
  void lose(int device) { devices_[device].lost = true; }
  void loseAll() { all_lost_ = true; }

 private:
  struct Segment {
    uint64_t end;
    bool expandable;  // grown by mappings: adjacent ones merge
  };
  struct Device {
    std::map<uint64_t, Segment> segments;  // by start
    std::map<uint64_t, uint64_t> blocks;   // live blocks: start -> size
    bool lost = false;
  };

  void addSegment(Device& device, uint64_t start, uint64_t end, bool expandable);

  format::CachingAllocatorRules rules_;
  std::unordered_map<int, Device> devices_;
  bool all_lost_ = false;
};

}  // namespace memtrace::report
