// Address ranges kept by their start, as the report's replays of PyTorch's segments keep them
// (the live set's reserved memory, analysis.cpp; the blocks' segments, block_replay.cpp).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>

namespace memtrace::report {

// Takes [start, end) out of `ranges` (non-overlapping, keyed by their start): a range it
// overlaps loses that part, one it cuts in the middle becomes two. `end_of(from, range)` is
// where a range ends; `part(range, from, to)` is that range cut down to [from, to).
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
    it = ranges.erase(it);
    if (from < start) ranges.emplace(from, part(range, from, start));
    if (to > end) it = std::next(ranges.emplace(end, part(range, end, to)).first);
  }
}

}  // namespace memtrace::report
