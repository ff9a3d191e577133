// Note [Allocated bytes, replayed] (tracer/report/block_replay.h): the blocks PyTorch's caching
// allocator handed out, from the tensors' requests and the segments, under its default rules.
#include "tracer/report/block_replay.h"

#include <gtest/gtest.h>

#include "tracer/format/ranges.h"

namespace memtrace {
namespace {

using format::SegmentAction;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kBase = 0x7f0000000000;

reader::Segment segment(SegmentAction action, uint64_t address, uint64_t size, int device = 0) {
  return reader::Segment{0, action, device, address, size, 0, 0};
}

TEST(BlockReplay, SmallBlocksAreRoundedAndSplitDownTo512Bytes) {
  report::BlockReplay replay;
  replay.onSegment(segment(SegmentAction::kAlloc, kBase, 2 * kMiB));
  EXPECT_EQ(replay.onAlloc(0, kBase, 100), 512u);          // at least kMinBlockSize
  EXPECT_EQ(replay.onAlloc(0, kBase + 512, 1000), 1024u);  // a multiple of it
  EXPECT_EQ(replay.onAlloc(0, kBase + 1536, 512), 512u);
  EXPECT_EQ(replay.onFree(0, kBase + 512), 1024u);
  // The freed 1024 bytes between two live blocks: 600 rounds to 1024, nothing left to split.
  EXPECT_EQ(replay.onAlloc(0, kBase + 512, 600), 1024u);
  EXPECT_EQ(replay.onFree(0, kBase + 512), 1024u);
  // 512 of the 1024 fits and 512 remains: a small block is split down to kMinBlockSize.
  EXPECT_EQ(replay.onAlloc(0, kBase + 512, 300), 512u);
  EXPECT_FALSE(replay.lost(0));
}

TEST(BlockReplay, ALargeBlockLessThan1MiBTooBigIsHandedOutWhole) {
  report::BlockReplay replay;
  replay.onSegment(segment(SegmentAction::kAlloc, kBase, 20 * kMiB));
  EXPECT_EQ(replay.onAlloc(0, kBase, 3 * kMiB), 3 * kMiB);  // 17 MiB remain: split
  // 16.5 MiB in the 17 MiB left: 0.5 MiB would remain, not more than kSmallSize: not split.
  EXPECT_EQ(replay.onAlloc(0, kBase + 3 * kMiB, 16 * kMiB + kMiB / 2), 17 * kMiB);
  EXPECT_EQ(replay.onFree(0, kBase + 3 * kMiB), 17 * kMiB);
  // 15 MiB in the 17 MiB: 2 MiB remain, more than kSmallSize: split.
  EXPECT_EQ(replay.onAlloc(0, kBase + 3 * kMiB, 15 * kMiB), 15 * kMiB);
  EXPECT_FALSE(replay.lost(0));
}

TEST(BlockReplay, ExpandableSegmentsAreTheirAdjacentMappings) {
  report::BlockReplay replay;
  replay.onSegment(segment(SegmentAction::kMap, kBase, 2 * kMiB));
  replay.onSegment(segment(SegmentAction::kMap, kBase + 2 * kMiB, 2 * kMiB));
  // One segment of 4 MiB: 3.5 MiB leaves 0.5 MiB, split off as every block of an expandable
  // segment is (the small pool's rule).
  EXPECT_EQ(replay.onAlloc(0, kBase, 3 * kMiB + kMiB / 2), 3 * kMiB + kMiB / 2);
  EXPECT_EQ(replay.onAlloc(0, kBase + 3 * kMiB + kMiB / 2, 3 * kMiB), 0u);  // no room: lost
  EXPECT_TRUE(replay.lost(0));
  report::BlockReplay again;
  again.onSegment(segment(SegmentAction::kMap, kBase, 2 * kMiB));
  again.onSegment(segment(SegmentAction::kMap, kBase + 2 * kMiB, 2 * kMiB));
  // Unmapping the first 2 MiB leaves a segment from kBase + 2 MiB.
  again.onSegment(segment(SegmentAction::kUnmap, kBase, 2 * kMiB));
  EXPECT_EQ(again.onAlloc(0, kBase + 2 * kMiB, kMiB + kMiB / 2), kMiB + kMiB / 2);
  EXPECT_EQ(again.onAlloc(0, kBase + 3 * kMiB + kMiB / 2, 1000), 1024u);
  EXPECT_FALSE(again.lost(0));
  EXPECT_EQ(again.onAlloc(0, kBase, 512), 0u);  // no longer mapped: lost, not guessed
  EXPECT_TRUE(again.lost(0));
}

TEST(BlockReplay, WhatCannotBePlacedLosesTheDeviceOnly) {
  report::BlockReplay replay;
  replay.onSegment(segment(SegmentAction::kAlloc, kBase, 2 * kMiB, 0));
  replay.onSegment(segment(SegmentAction::kAlloc, kBase + 4 * kMiB, 2 * kMiB, 1));
  EXPECT_EQ(replay.onAlloc(1, kBase + 4 * kMiB, 4096), 4096u);
  EXPECT_EQ(replay.onAlloc(0, kBase + 3 * kMiB, 512), 0u);  // outside device 0's segments
  EXPECT_TRUE(replay.lost(0));
  EXPECT_FALSE(replay.lost(1));
  // A request larger than the gap before the next live block: some block was not seen.
  EXPECT_EQ(replay.onAlloc(1, kBase + 4 * kMiB + 4096, 2 * kMiB), 0u);
  EXPECT_TRUE(replay.lost(1));
  report::BlockReplay window;
  window.loseAll();
  EXPECT_TRUE(window.lost(3));
}

}  // namespace
}  // namespace memtrace

// Note [Cutting a range out of PyTorch's segments]: the rule the recorder's table and the
// report's replays share.
TEST(RangeCut, KeepsWhatLiesOutsideTheCutAndCountsWhatIsTaken) {
  using memtrace::format::cutRange;
  auto inside = cutRange(100, 200, 50, 250);  // the whole range goes
  EXPECT_EQ(inside.taken, 100u);
  EXPECT_FALSE(inside.keeps_before);
  EXPECT_FALSE(inside.keeps_after);
  auto middle = cutRange(100, 200, 120, 150);  // cut in the middle: two pieces stay
  EXPECT_EQ(middle.taken, 30u);
  EXPECT_TRUE(middle.keeps_before);
  EXPECT_TRUE(middle.keeps_after);
  auto front = cutRange(100, 200, 0, 130);  // its front goes
  EXPECT_EQ(front.taken, 30u);
  EXPECT_FALSE(front.keeps_before);
  EXPECT_TRUE(front.keeps_after);
  std::map<uint64_t, uint64_t> ranges{{0, 100}, {100, 200}, {300, 400}};  // start -> end
  memtrace::format::cutRanges(
      ranges, 50, 350, [](uint64_t, uint64_t end) { return end; },
      [](uint64_t, uint64_t, uint64_t to) { return to; });
  EXPECT_EQ(ranges, (std::map<uint64_t, uint64_t>{{0, 50}, {350, 400}}));
}
