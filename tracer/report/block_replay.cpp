#include "tracer/report/block_replay.h"

#include <iterator>

#include "tracer/format/ranges.h"

namespace memtrace::report {

void BlockReplay::addSegment(Device& device, uint64_t start, uint64_t end, bool expandable) {
  if (expandable) {
    // A mapping right after an expandable segment's end extends it; one right before its start
    // is merged in front of it.
    auto after = device.segments.lower_bound(start);
    if (after != device.segments.begin()) {
      auto before = std::prev(after);
      if (before->second.expandable && before->second.end == start) {
        start = before->first;
        device.segments.erase(before);
      }
    }
    after = device.segments.find(end);
    if (after != device.segments.end() && after->second.expandable) {
      end = after->second.end;
      device.segments.erase(after);
    }
  }
  device.segments[start] = Segment{end, expandable};
}

void BlockReplay::onSegment(const reader::Segment& segment) {
  Device& device = devices_[segment.device];
  uint64_t end = segment.address + segment.size;
  switch (segment.action) {
    case format::SegmentAction::kAlloc:
      addSegment(device, segment.address, end, false);
      return;
    case format::SegmentAction::kMap:
      addSegment(device, segment.address, end, true);
      return;
    case format::SegmentAction::kFree:
    case format::SegmentAction::kUnmap:
      format::cutRanges(
          device.segments, segment.address, end,
          [](uint64_t, const Segment& cut) { return cut.end; },
          [](Segment cut, uint64_t, uint64_t to) {
            cut.end = to;
            return cut;
          });
      return;
    case format::SegmentAction::kCount:  // the reader refuses it
      return;
  }
}

uint64_t BlockReplay::onAlloc(int device_index, uint64_t address, uint64_t requested) {
  Device& device = devices_[device_index];
  if (device.lost) return 0;
  auto segment = device.segments.upper_bound(address);
  bool inside = segment != device.segments.begin() && std::prev(segment)->second.end > address;
  if (!inside || device.blocks.count(address)) {
    device.lost = true;
    return 0;
  }
  uint64_t gap_end = std::prev(segment)->second.end;
  bool expandable = std::prev(segment)->second.expandable;
  auto next = device.blocks.upper_bound(address);
  if (next != device.blocks.end() && next->first < gap_end) gap_end = next->first;
  auto size = static_cast<uint64_t>(format::roundRequest(rules_, static_cast<int64_t>(requested)));
  uint64_t gap = gap_end - address;
  if (gap < size) {
    device.lost = true;
    return 0;
  }
  // Expandable segments split every block as the small pool does.
  bool small = expandable || format::smallPool(rules_, static_cast<int64_t>(size));
  uint64_t block =
      format::shouldSplit(rules_, small, static_cast<int64_t>(gap - size)) ? size : gap;
  device.blocks.emplace(address, block);
  return block;
}

uint64_t BlockReplay::onFree(int device_index, uint64_t address) {
  Device& device = devices_[device_index];
  auto found = device.blocks.find(address);
  if (found == device.blocks.end()) return 0;
  uint64_t size = found->second;
  device.blocks.erase(found);
  return size;
}

uint64_t BlockReplay::block(int device_index, uint64_t address) const {
  auto device = devices_.find(device_index);
  if (device == devices_.end()) return 0;
  auto found = device->second.blocks.find(address);
  return found == device->second.blocks.end() ? 0 : found->second;
}

bool BlockReplay::lost(int device_index) const {
  if (all_lost_) return true;
  auto found = devices_.find(device_index);
  return found != devices_.end() && found->second.lost;
}

}  // namespace memtrace::report
