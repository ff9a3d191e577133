// Cutting an address range out of ranges kept by their start: one rule for the recorder's
// table of PyTorch's live segments and the report's replays of them.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>

namespace memtrace::format {

// Note [Cutting a range out of PyTorch's segments]
// PyTorch frees a segment, and unmaps an expandable segment's memory, by address range: the
// range taken out may be one range put in, part of one, or parts of several (an expandable
// segment maps and unmaps by the block). The recorder (its table of live segments, which
// memtrace_reserved_bytes counts: tracer/recorder/recorder.cpp) and the report's replays (the
// live set's reserved memory, analysis.cpp; the blocks' segments, block_replay.cpp) apply the
// same rule, cutRange: a range [from, to) overlapping [start, end) loses the overlap; what lies
// before `start` and after `end` stays, each a range of its own.
struct RangeCut {
  uint64_t taken;     // bytes of [from, to) inside [start, end)
  bool keeps_before;  // [from, start) stays
  bool keeps_after;   // [end, to) stays
};

constexpr RangeCut cutRange(uint64_t from, uint64_t to, uint64_t start, uint64_t end) {
  uint64_t inside_from = from > start ? from : start;
  uint64_t inside_to = to < end ? to : end;
  return RangeCut{inside_to > inside_from ? inside_to - inside_from : 0, from<start, to> end};
}

// cutRange over `ranges` (non-overlapping, keyed by their start), as the report keeps them:
// `end_of(from, range)` is where a range ends; `part(range, from, to)` is that range cut down to
// [from, to).
template <typename Range, typename EndOf, typename Part>
void cutRanges(std::map<uint64_t, Range>& ranges, uint64_t start, uint64_t end, EndOf end_of,
               Part part) {
  auto it = ranges.upper_bound(start);
  if (it != ranges.begin()) --it;
  while (it != ranges.end() && it->first < end) {
    uint64_t from = it->first;
    Range range = it->second;
    uint64_t to = end_of(from, range);
    if (to <= start) {
      ++it;
      continue;
    }
    RangeCut cut = cutRange(from, to, start, end);
    it = ranges.erase(it);
    if (cut.keeps_before) ranges.emplace(from, part(range, from, start));
    if (cut.keeps_after) it = std::next(ranges.emplace(end, part(range, end, to)).first);
  }
}

}  // namespace memtrace::format
