// The live set's rule (tracer/format/live_table.h) and its one offline replay
// (tracer/reader/live_set.h), which every view reads through: what each consumer hook receives, and
// the live set left.
#include "tracer/reader/live_set.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/trace_builder.h"

namespace memtrace::testing {
namespace {

using reader::Allocation;
using reader::Event;

// Writes what the replay hands over, one line per hook.
struct Log : reader::LiveVisitor {
  void onEvent(const Event& event) { ++events; }
  void onAlloc(const Event& event, const Allocation& allocation) {
    add("alloc", event, allocation);
  }
  void onImpliedFree(const Event& event, const Allocation& replaced) {
    add("implied-free", event, replaced);
  }
  void onFree(const Event& event, const Allocation& freed) { add("free", event, freed); }
  void onUnmatchedFree(const Event& event) {
    lines.push_back("unmatched-free #" + std::to_string(event.index));
  }
  void onFailedAlloc(const Event& event) {
    lines.push_back("failed #" + std::to_string(event.index));
  }
  bool stopBefore(const Event& event) const { return event.index >= stop_at; }

  void add(const char* what, const Event& event, const Allocation& allocation) {
    lines.push_back(std::string(what) + " #" + std::to_string(event.index) + " " +
                    std::to_string(event.address) + " size=" + std::to_string(allocation.size) +
                    " device=" + std::to_string(allocation.device) +
                    " py=" + std::to_string(allocation.python_stack));
  }

  std::vector<std::string> lines;
  uint64_t events = 0;
  uint64_t stop_at = UINT64_MAX;
};

struct LiveSetTest : ::testing::Test {
  void SetUp() override {
    trace.processInfo();
    uint32_t file = trace.string("model.py");
    uint32_t function = trace.string("forward");
    uint32_t frame = trace.frame(file, function, 1);
    stack = trace.pythonStack(0, frame);
    trace.context(1, 0);
  }
  void TearDown() override { std::remove(path.c_str()); }

  // Replays the trace into `log` (a Log, or a visitor derived from it: the replay calls its
  // hooks statically); returns the live set left, sorted by address.
  template <typename Visitor>
  std::vector<std::pair<uint64_t, Allocation>> replay(Visitor& log) {
    reader::TraceReader reader(trace.write(path = temporaryPath("live_set.bin")));
    reader::LiveReplay replay(log);
    reader.read(replay);
    std::vector<std::pair<uint64_t, Allocation>> live;
    replay.live().forEach([&](uint64_t address, const Allocation& allocation) {
      live.emplace_back(address, allocation);
    });
    std::sort(live.begin(), live.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return live;
  }

  TraceBuilder trace;
  std::string path;
  uint32_t stack = 0;
};

// Note [Sizes in the trace]: an answer told at the question marks the asking thread's next
// allocation of its bytes (not another thread's, not one of other bytes, not one past the
// asking thread's next kSizeLinkAllocations); one told with an address marks the live
// allocation there, once.
TEST_F(LiveSetTest, ASimulatedSizeMarksTheAllocationThatHoldsIt) {
  struct Marks : Log {
    void onSizeAnswer(const reader::SimulatedSize& size, const Allocation* linked, bool newly) {
      lines.push_back("answer " + std::to_string(size.bytes) +
                      (linked ? " linked size=" + std::to_string(linked->size) : "") +
                      (newly ? " newly" : ""));
    }
  };
  uint32_t question = trace.string("{\"library\":\"cuFFT\"}");
  trace.context(1, 0, 0, format::Api::kSimulatedSize)
      .simulatedSize(1, 0, 4096, 8192, format::Certainty::kEstimated, question);
  trace.context(2, 0).alloc(2, 0x1000, 4096);  // another thread's
  trace.context(1, 0).alloc(3, 0x2000, 100).alloc(4, 0x3000, 4096);
  trace.context(1, 0, 0, format::Api::kSimulatedSize)
      .simulatedSize(5, 0, 512, UINT64_MAX, format::Certainty::kEstimated, question);
  trace.context(1, 0);
  for (uint64_t i = 0; i < format::kSizeLinkAllocations; ++i) trace.alloc(6 + i, 0x10000 + i, 1);
  trace.alloc(20, 0x20000, 512);  // too late
  trace.context(1, 0, 0, format::Api::kSimulatedSize)
      .simulatedSize(21, 0x2000, 100, 300, format::Certainty::kBounded, question)
      .simulatedSize(22, 0x2000, 100, 300, format::Certainty::kBounded, question)
      .simulatedSize(23, 0x9999, 100, 300, format::Certainty::kBounded, question);
  Marks log;
  std::vector<std::pair<uint64_t, Allocation>> live = replay(log);
  auto at = [&](uint64_t address) {
    for (auto& [start, allocation] : live)
      if (start == address) return allocation;
    return Allocation{};
  };
  EXPECT_FALSE(at(0x1000).unknown_size);
  EXPECT_TRUE(at(0x3000).unknown_size);
  EXPECT_EQ(at(0x3000).size_at_most, 8192u);
  EXPECT_FALSE(at(0x20000).unknown_size);
  EXPECT_TRUE(at(0x2000).unknown_size);
  EXPECT_EQ(at(0x2000).size_at_most, 300u);
  EXPECT_EQ(std::count(log.lines.begin(), log.lines.end(), "answer 100 linked size=100 newly"), 1);
  EXPECT_EQ(std::count(log.lines.begin(), log.lines.end(), "answer 100 linked size=100"), 1);
  EXPECT_EQ(std::count(log.lines.begin(), log.lines.end(), "answer 100"), 1);
}

TEST_F(LiveSetTest, AFreeCarriesTheSizeAndStackOfWhatItFrees) {
  trace.alloc(10, 256, 1000, stack);
  trace.free(20, 256);  // the file gives no size, nor this stack (the free's own is 0)
  Log log;
  EXPECT_TRUE(replay(log).empty());
  EXPECT_EQ(log.lines, (std::vector<std::string>{"alloc #0 256 size=1000 device=0 py=1",
                                                 "free #1 256 size=1000 device=0 py=1"}));
}

TEST_F(LiveSetTest, AFreeOfAnUnknownAddressIsIgnored) {
  trace.alloc(10, 256, 1000);
  trace.free(20, 512);  // never allocated
  trace.free(30, 256);
  trace.free(40, 256);  // already freed
  Log log;
  EXPECT_TRUE(replay(log).empty());
  EXPECT_EQ(log.events, 4u);
  EXPECT_EQ(log.lines,
            (std::vector<std::string>{"alloc #0 256 size=1000 device=0 py=0", "unmatched-free #1",
                                      "free #2 256 size=1000 device=0 py=0", "unmatched-free #3"}));
}

TEST_F(LiveSetTest, AnAllocationOverALiveAddressImpliesTheFreeOfTheOld) {
  trace.alloc(10, 256, 1000, stack);
  trace.alloc(20, 256, 30);  // the free of the first was never seen
  trace.free(30, 256);       // frees the second: its size, not the first's
  Log log;
  EXPECT_TRUE(replay(log).empty());
  EXPECT_EQ(log.events, 3u);
  EXPECT_EQ(log.lines, (std::vector<std::string>{"alloc #0 256 size=1000 device=0 py=1",
                                                 "implied-free #1 256 size=1000 device=0 py=1",
                                                 "alloc #1 256 size=30 device=0 py=0",
                                                 "free #2 256 size=30 device=0 py=0"}));
}

// Note [Weights and their modules]: an owner module replaces the module of the live allocation
// at its address, whenever it comes, and is ignored at an address no live allocation starts at.
TEST_F(LiveSetTest, AnOwnerModuleNamesTheLiveAllocationsModule) {
  uint32_t scope = trace.string("model");
  uint32_t owner = trace.string("model.head");
  trace.moduleScope(scope);
  trace.alloc(10, 256, 1000, stack);
  trace.alloc(20, 512, 2000);
  trace.ownerModule(512, owner);
  trace.ownerModule(768, owner);  // starts no live allocation
  Log log;
  auto live = replay(log);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].second.module, scope);  // told nothing: its event's
  EXPECT_EQ(live[1].second.module, owner);
}

TEST_F(LiveSetTest, AnAddressFreedCanBeReused) {
  trace.alloc(10, 256, 1000);
  trace.free(20, 256);
  trace.alloc(30, 256, 2000, stack);
  Log log;
  auto live = replay(log);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].first, 256u);
  EXPECT_EQ(live[0].second.size, 2000u);
  EXPECT_EQ(live[0].second.python_stack, stack);
  EXPECT_TRUE(std::none_of(log.lines.begin(), log.lines.end(), [](const std::string& line) {
    return line.rfind("implied-free", 0) == 0;
  }));
}

TEST_F(LiveSetTest, EachAllocationKeepsItsDeviceAndAFreeFollowsIt) {
  trace.alloc(10, 256, 1000);  // device 0
  trace.context(1, 1, /*stream=*/7);
  trace.alloc(20, 512, 700);  // device 1, stream 7
  trace.context(1, 0);
  trace.free(30, 512);  // written under device 0's context: still device 1's bytes
  trace.context(1, 1);
  trace.alloc(40, 768, 800);
  trace.context(1, 0);
  trace.alloc(50, 768, 5);  // over device 1's live allocation, from device 0
  trace.failedAlloc(60, 1 << 30);
  Log log;
  auto live = replay(log);
  EXPECT_EQ(log.lines,
            (std::vector<std::string>{
                "alloc #0 256 size=1000 device=0 py=0", "alloc #1 512 size=700 device=1 py=0",
                "free #2 512 size=700 device=1 py=0", "alloc #3 768 size=800 device=1 py=0",
                "implied-free #4 768 size=800 device=1 py=0", "alloc #4 768 size=5 device=0 py=0",
                "failed #5"}));
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].second.device, 0);
  EXPECT_EQ(live[1].second.device, 0);
  EXPECT_EQ(live[1].second.size, 5u);
}

TEST_F(LiveSetTest, AStreamIsKeptWithItsAllocation) {
  trace.context(1, 1, /*stream=*/7);
  trace.alloc(10, 256, 1000);
  Log log;
  auto live = replay(log);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].second.stream, 7u);
  EXPECT_EQ(live[0].second.device, 1);
}

TEST_F(LiveSetTest, StoppingBeforeAnEventLeavesTheLiveSetAsItWasBefore) {
  trace.alloc(10, 256, 1000);
  trace.alloc(20, 512, 700);
  trace.free(30, 256);  // event 2: the replay stops before it
  trace.alloc(40, 768, 1);
  Log log;
  log.stop_at = 2;
  auto live = replay(log);
  EXPECT_EQ(log.events, 2u);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].first, 256u);
  EXPECT_EQ(live[1].first, 512u);
}

TEST(LiveTable, AppliesTheRuleWithoutAReader) {
  format::LiveTable<uint64_t> table;
  uint64_t old = 0;
  EXPECT_FALSE(table.free(0x100, &old));  // unknown address: ignored
  EXPECT_EQ(table.allocate(0x100, 10, &old), format::AllocOutcome::kNew);
  EXPECT_EQ(table.allocate(0x100, 20, &old), format::AllocOutcome::kReplaced);
  EXPECT_EQ(old, 10u);
  ASSERT_NE(table.find(0x100), nullptr);
  EXPECT_EQ(*table.find(0x100), 20u);
  EXPECT_EQ(table.size(), 1u);
  EXPECT_TRUE(table.free(0x100, &old));
  EXPECT_EQ(old, 20u);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_FALSE(table.free(0x100));                                   // a double free: ignored
  EXPECT_EQ(table.allocate(0x100, 30), format::AllocOutcome::kNew);  // reuse after a free
}

}  // namespace
}  // namespace memtrace::testing
