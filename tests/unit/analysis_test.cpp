#include "tracer/report/analysis.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "tests/unit/trace_builder.h"
#include "tracer/common/user_code.h"
#include "tracer/report/locations.h"
#include "tracer/report/oom.h"

namespace memtrace::testing {
namespace {

using format::MarkerKind;
using report::FramePolicy;
using report::GroupBy;
using report::Point;

// Two devices; a model file, and torch's functional.py in site-packages.
struct Fixture : ::testing::Test {
  void SetUp() override {
    trace.processInfo();
    uint32_t model = trace.string("/home/user/model.py");
    uint32_t torch_file = trace.string("/venv/lib/python3.11/site-packages/torch/nn/functional.py");
    uint32_t forward = trace.string("forward");
    uint32_t linear = trace.string("linear");
    uint32_t main = trace.string("main");
    uint32_t main_frame = trace.frame(model, main, 40);
    uint32_t line_10 = trace.frame(model, forward, 10);
    uint32_t line_11 = trace.frame(model, forward, 11);
    uint32_t torch_frame = trace.frame(torch_file, linear, 2200);
    uint32_t root = trace.pythonStack(0, main_frame);
    at_10 = trace.pythonStack(root, line_10);
    at_11 = trace.pythonStack(root, line_11);
    in_torch = trace.pythonStack(at_11, torch_frame);  // model.py:11 calls F.linear
    trace.context(1, 0);
  }
  std::string write() { return trace.write(path = temporaryPath("analysis.bin")); }
  void TearDown() override { std::remove(path.c_str()); }

  TraceBuilder trace;
  std::string path;
  uint32_t at_10 = 0, at_11 = 0, in_torch = 0;
};

TEST_F(Fixture, PeakIsTheFirstAllocationToReachTheHighWaterMark) {
  trace.alloc(0, 0x1000, 500);  // untraced weights
  trace.marker(1, MarkerKind::kTracingStarted);
  trace.alloc(10, 0x10000, 300, at_10);     // 800
  trace.free(20, 0x10000);                  // 500
  trace.alloc(30, 0x20000, 300, at_11);     // 800 again: not a new peak
  trace.alloc(40, 0x30000, 100, in_torch);  // 900: the peak, event 4
  trace.free(50, 0x30000);
  trace.free(60, 0x20000);
  trace.alloc(70, 0x40000, 399, at_10);  // 899: below the peak
  trace.marker(80, MarkerKind::kProcessExit);
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  EXPECT_EQ(summary.peak_bytes, 900u);
  EXPECT_EQ(summary.peak_event, 4u);
  EXPECT_EQ(summary.peak_time_ns, 40u);
  EXPECT_EQ(summary.end_bytes, 899u);
  EXPECT_EQ(summary.allocated_bytes, 500u + 300 + 300 + 100 + 399);
  EXPECT_EQ(summary.allocations, 5u);
  EXPECT_EQ(summary.frees, 3u);
  EXPECT_EQ(summary.untraced_allocations, 1u);
  EXPECT_EQ(summary.duration_ns, 80u);
  EXPECT_TRUE(summary.ended_cleanly);

  report::LiveSet peak = report::liveSetAt(reader, summary, Point{});
  EXPECT_EQ(peak.bytes, 900u);
  EXPECT_EQ(peak.event, 4u);
  ASSERT_EQ(peak.allocations.size(), 3u);

  report::Locator by_line(reader.tables(), GroupBy::kLine, FramePolicy::kInnermost);
  report::LocationTable table = by_line.group(peak);
  ASSERT_EQ(table.rows.size(), 3u);
  EXPECT_EQ(table.rows[0].location.name, "untraced");
  EXPECT_EQ(table.rows[0].bytes, 500u);
  EXPECT_EQ(table.rows[1].location.name, "/home/user/model.py:11 (forward)");
  EXPECT_EQ(table.rows[1].cumulative_bytes, 800u);
  EXPECT_EQ(table.rows[2].location.line, 2200);
  EXPECT_EQ(table.rows[2].location.function, "linear");

  // In user code, the F.linear allocation belongs to model.py:11 too.
  report::Locator user(reader.tables(), GroupBy::kLine, FramePolicy::kUser);
  report::LocationTable user_table = user.group(peak);
  ASSERT_EQ(user_table.rows.size(), 2u);
  EXPECT_EQ(user_table.rows[1].location.name, "/home/user/model.py:11 (forward)");
  EXPECT_EQ(user_table.rows[1].bytes, 400u);
  EXPECT_EQ(user_table.rows[1].count, 2u);
  EXPECT_EQ(user_table.rows[1].median_bytes, 100u);  // the lower median of {100, 300}

  report::Locator by_stack(reader.tables(), GroupBy::kStack, FramePolicy::kInnermost);
  EXPECT_EQ(by_stack.group(peak).rows[2].location.name,
            "/home/user/model.py:40 (main); /home/user/model.py:11 (forward); "
            "/venv/lib/python3.11/site-packages/torch/nn/functional.py:2200 (linear)");

  report::LiveSet end = report::liveSetAt(reader, summary, Point{Point::Kind::kEnd});
  EXPECT_EQ(end.bytes, 899u);
  report::LiveSet early = report::liveSetAt(reader, summary, Point{Point::Kind::kTime, 25});
  EXPECT_EQ(early.bytes, 500u);  // the allocation at 10 ns was freed at 20 ns
  EXPECT_THROW(report::liveSetAt(reader, summary, Point{Point::Kind::kOom}), reader::TraceError);
}

// Note [The line the user acts on]: under `memtrace run`, runpy and memtrace's runner sit above
// the script's first frame, and memtrace's training hooks can sit between the user's frames;
// neither is shown, under either policy, and a stack of nothing else is shown as it is.
TEST(Locator, MemtracesOwnFramesAndTheRunnerAboveTheProgramAreNeverShown) {
  TraceBuilder trace;
  trace.processInfo();
  uint32_t runpy = trace.string("<frozen runpy>");
  uint32_t runner = trace.string("/venv/lib/python3.11/site-packages/mem_tracer/_run.py");
  uint32_t hooks = trace.string("/src/memtrace/python/mem_tracer/training.py");
  uint32_t script = trace.string("/home/user/train.py");
  uint32_t torch_file = trace.string("/venv/lib/python3.11/site-packages/torch/nn/functional.py");
  uint32_t frame_run_module = trace.frame(runpy, trace.string("_run_module_as_main"), 198);
  uint32_t frame_runner = trace.frame(runner, trace.string("run"), 32);
  uint32_t frame_run_code = trace.frame(runpy, trace.string("_run_code"), 88);
  uint32_t frame_main = trace.frame(script, trace.string("<module>"), 10);
  uint32_t frame_hook = trace.frame(hooks, trace.string("pack"), 120);
  uint32_t frame_linear = trace.frame(torch_file, trace.string("linear"), 2200);
  uint32_t stack = trace.pythonStack(0, frame_run_module);
  stack = trace.pythonStack(stack, frame_runner);
  stack = trace.pythonStack(stack, frame_run_code);
  uint32_t at_main = trace.pythonStack(stack, frame_main);
  uint32_t in_hook = trace.pythonStack(at_main, frame_hook);     // a hook allocating
  uint32_t in_torch = trace.pythonStack(in_hook, frame_linear);  // torch under the hook
  uint32_t only_memtrace = trace.pythonStack(trace.pythonStack(0, frame_runner), frame_hook);
  trace.context(1, 0);
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.alloc(10, 0x10000, 100, in_hook);
  trace.alloc(20, 0x20000, 200, in_torch);
  trace.alloc(30, 0x30000, 400, only_memtrace);
  trace.marker(40, MarkerKind::kProcessExit);
  std::string path = temporaryPath("own-frames.bin");
  trace.write(path);
  reader::TraceReader reader(path);
  report::TraceSummary summary = report::summarize(reader);
  report::LiveSet peak = report::liveSetAt(reader, summary, Point{});
  ASSERT_EQ(peak.allocations.size(), 3u);

  report::Locator user(reader.tables(), GroupBy::kLine, FramePolicy::kUser);
  report::LocationTable by_user = user.group(peak);
  ASSERT_EQ(by_user.rows.size(), 2u);
  EXPECT_EQ(by_user.rows[0].location.name,
            "/src/memtrace/python/mem_tracer/training.py:120 (pack)");
  EXPECT_EQ(by_user.rows[1].location.name, "/home/user/train.py:10 (<module>)");
  EXPECT_EQ(by_user.rows[1].bytes, 300u);

  report::Locator innermost(reader.tables(), GroupBy::kLine, FramePolicy::kInnermost);
  report::LocationTable by_innermost = innermost.group(peak);
  ASSERT_EQ(by_innermost.rows.size(), 3u);
  EXPECT_EQ(by_innermost.rows[1].location.function, "linear");
  EXPECT_EQ(by_innermost.rows[2].location.name, "/home/user/train.py:10 (<module>)");  // not pack

  std::vector<uint32_t> frames = user.framesOf(in_torch);
  EXPECT_EQ(frames, (std::vector<uint32_t>{frame_main, frame_linear}));
  EXPECT_EQ(user.framesOf(only_memtrace), (std::vector<uint32_t>{frame_runner, frame_hook}));
  report::Locator by_stack(reader.tables(), GroupBy::kStack, FramePolicy::kUser);
  for (const report::TableRow& row : by_stack.group(peak).rows) {
    if (row.bytes == 400) continue;
    EXPECT_EQ(row.location.name.find("mem_tracer"), std::string::npos) << row.location.name;
    EXPECT_EQ(row.location.name.find("runpy"), std::string::npos) << row.location.name;
  }
  std::remove(path.c_str());
}

// Note [Generated code]: a compiled graph allocates on lines of the code inductor generated; a
// line the trace maps to a source stack is named, under the user policy, by that stack's
// innermost user frame (through library frames of the source: torch's linear.py); an unmapped
// line of a generated file, or a mapped file's line outside every stretch, by the next user frame
// outward (inductor's files are no user code, whatever folder TORCHINDUCTOR_CACHE_DIR names).
// The innermost policy and full stacks keep the generated line.
TEST(Locator, CompiledCodeIsNamedByTheSourceItStandsFor) {
  TraceBuilder trace;
  trace.processInfo();
  uint32_t script = trace.string("/home/user/train.py");
  uint32_t model = trace.string("/home/user/model.py");
  uint32_t torch_file =
      trace.string("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py");
  // A name unlike inductor's (isGeneratedCode): generated code by the trace's records only.
  uint32_t generated = trace.string("/home/user/cache/ab/graph.py");
  // In inductor's default folder, with no record (a torch the package does not know).
  uint32_t unmapped = trace.string("/tmp/torchinductor_user/xy/cxyz.py");
  uint32_t call = trace.string("call");
  uint32_t forward = trace.string("forward");
  uint32_t frame_main = trace.frame(script, trace.string("<module>"), 8);
  uint32_t frame_def = trace.frame(model, forward, 10);  // dynamo's frame of forward
  uint32_t line_12 = trace.frame(model, forward, 12);
  uint32_t line_13 = trace.frame(model, forward, 13);
  uint32_t linear = trace.frame(torch_file, forward, 125);
  uint32_t at_147 = trace.frame(generated, call, 147);
  uint32_t at_159 = trace.frame(generated, call, 159);
  uint32_t at_120 = trace.frame(generated, call, 120);  // before the first stretch
  uint32_t at_unmapped = trace.frame(unmapped, call, 147);
  uint32_t outer = trace.pythonStack(trace.pythonStack(0, frame_main), frame_def);
  // The source stacks: model.py:12 calling linear.py; model.py:13.
  uint32_t source_12 = trace.pythonStack(trace.pythonStack(0, line_12), linear);
  uint32_t source_13 = trace.pythonStack(0, line_13);
  trace.generatedCode(generated, 143, 9, source_12);  // lines 143 to 151
  trace.generatedCode(generated, 152, 40, source_13);
  uint32_t in_147 = trace.pythonStack(outer, at_147);
  uint32_t in_159 = trace.pythonStack(outer, at_159);
  uint32_t in_120 = trace.pythonStack(outer, at_120);
  uint32_t in_unmapped = trace.pythonStack(outer, at_unmapped);
  uint32_t in_torch = trace.pythonStack(in_159, linear);  // under the generated line
  trace.context(1, 0);
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.alloc(10, 0x10000, 1000, in_147);
  trace.alloc(20, 0x20000, 200, in_159);
  trace.alloc(30, 0x30000, 30, in_120);
  trace.alloc(40, 0x40000, 4, in_unmapped);
  trace.alloc(50, 0x50000, 50000, in_torch);
  trace.marker(60, MarkerKind::kProcessExit);
  std::string path = temporaryPath("compiled.bin");
  trace.write(path);
  reader::TraceReader reader(path);
  report::TraceSummary summary = report::summarize(reader);
  report::LiveSet peak = report::liveSetAt(reader, summary, Point{});
  ASSERT_EQ(reader.tables().generated_code.size(), 2u);

  auto names = [&](FramePolicy policy, GroupBy group_by = GroupBy::kLine) {
    std::vector<std::pair<std::string, uint64_t>> rows;
    report::Locator locator(reader.tables(), group_by, policy);
    for (const report::TableRow& row : locator.group(peak).rows)
      rows.emplace_back(row.location.name, row.bytes);
    return rows;
  };
  EXPECT_EQ(names(FramePolicy::kUser), (std::vector<std::pair<std::string, uint64_t>>{
                                           {"/home/user/model.py:13 (forward)", 50200},
                                           {"/home/user/model.py:12 (forward)", 1000},
                                           {"/home/user/model.py:10 (forward)", 34}}));
  std::string generated_path(reader.tables().string(generated));
  EXPECT_EQ(
      names(FramePolicy::kInnermost),
      (std::vector<std::pair<std::string, uint64_t>>{
          {"/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125 (forward)", 50000},
          {generated_path + ":147 (call)", 1000},
          {generated_path + ":159 (call)", 200},
          {generated_path + ":120 (call)", 30},
          {"/tmp/torchinductor_user/xy/cxyz.py:147 (call)", 4}}));
  for (const auto& [name, bytes] : names(FramePolicy::kUser, GroupBy::kStack))
    if (bytes == 1000)
      EXPECT_NE(name.find(generated_path + ":147 (call)"), std::string::npos) << name;
  report::Locator locator(reader.tables(), GroupBy::kLine, FramePolicy::kUser);
  EXPECT_EQ(locator.sourceStackOf(at_147), source_12);
  EXPECT_EQ(locator.sourceStackOf(at_159), source_13);
  EXPECT_EQ(locator.sourceStackOf(at_120), 0u);
  EXPECT_EQ(locator.sourceStackOf(frame_main), 0u);
  std::remove(path.c_str());
}

TEST_F(Fixture, DevicesAreCountedApartAndTogether) {
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.alloc(10, 0x10000, 1000, at_10);  // device 0
  trace.context(1, 1);
  trace.alloc(20, 0x20000, 700, at_11);  // device 1: total 1700
  trace.context(1, 0);
  trace.free(30, 0x10000);  // device 0 back to 0
  trace.context(1, 1);
  trace.alloc(40, 0x30000, 800, at_11);  // device 1: 1500, the device's peak
  reader::TraceReader reader(write());
  report::TraceSummary all = report::summarize(reader);
  EXPECT_EQ(all.peak_bytes, 1700u);
  ASSERT_EQ(all.devices.size(), 2u);
  EXPECT_EQ(all.devices[0].peak_bytes, 1000u);
  EXPECT_EQ(all.devices[1].peak_bytes, 1500u);
  report::TraceSummary one = report::summarize(reader, 1);
  EXPECT_EQ(one.peak_bytes, 1500u);
  EXPECT_EQ(one.peak_event, 3u);
  report::LiveSet live = report::liveSetAt(reader, one, Point{});
  EXPECT_EQ(live.bytes, 1500u);
  EXPECT_EQ(live.allocations.size(), 2u);
}

TEST_F(Fixture, OomPointAndAnomalies) {
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.alloc(10, 0x10000, 1000, at_10);
  trace.alloc(20, 0x20000, 2000, at_11);
  trace.failedAlloc(30, 1ull << 34, at_11);
  trace.free(40, 0x99999);              // never allocated
  trace.alloc(50, 0x10000, 10, at_11);  // over a live address: replaces it
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  EXPECT_EQ(summary.failed_allocations, 1u);
  EXPECT_EQ(summary.first_failed_event, 2u);
  EXPECT_EQ(summary.unmatched_frees, 1u);
  EXPECT_EQ(summary.replaced_allocations, 1u);
  EXPECT_EQ(summary.end_bytes, 2010u);
  EXPECT_FALSE(summary.ended_cleanly);
  report::LiveSet oom = report::liveSetAt(reader, summary, Point{Point::Kind::kOom});
  EXPECT_EQ(oom.bytes, 3000u);
  report::Locator by_file(reader.tables(), GroupBy::kFile, FramePolicy::kInnermost);
  report::LocationTable table = by_file.group(oom);
  ASSERT_EQ(table.rows.size(), 1u);
  EXPECT_EQ(table.rows[0].location.name, "/home/user/model.py");
  EXPECT_EQ(table.rows[0].count, 2u);
  report::Locator by_function(reader.tables(), GroupBy::kFunction, FramePolicy::kInnermost);
  EXPECT_EQ(by_function.group(oom).rows[0].location.name, "/home/user/model.py (forward)");
}

// Note [Allocated bytes, replayed]: max_memory_allocated counts whole blocks, and a large block
// less than 1 MiB too big is handed out whole.
TEST_F(Fixture, PyTorchsAllocatedBytesAreItsBlocks) {
  using format::SegmentAction;
  constexpr uint64_t kMiB = 1 << 20;
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.context(1, 0, 0, format::Api::kTorchAllocator);
  trace.segment(1, SegmentAction::kAlloc, 0, 0x100000000, 20 * kMiB);
  trace.alloc(2, 0x100000000, 3 * kMiB, at_10);
  trace.alloc(3, 0x100000000 + 3 * kMiB, 16 * kMiB + kMiB / 2, at_11);  // the 17 MiB left, whole
  trace.free(4, 0x100000000);
  trace.alloc(5, 0x100000000, 1000, at_10);  // 1024 of the 3 MiB: split
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  EXPECT_EQ(summary.peak_bytes, 19 * kMiB + kMiB / 2);
  EXPECT_TRUE(summary.torch_allocated_known);
  EXPECT_EQ(summary.torch_allocated_peak_bytes, 20 * kMiB);
  EXPECT_EQ(summary.torch_allocated_at_peak_bytes, 20 * kMiB);
  EXPECT_EQ(summary.torch_allocated_end_bytes, 17 * kMiB + 1024);
  ASSERT_EQ(summary.devices.size(), 1u);
  EXPECT_TRUE(summary.devices[0].torch_allocated_known);
  EXPECT_EQ(summary.devices[0].torch_allocated_peak_bytes, 20 * kMiB);
  // Per line, at the peak (both tensors live) and at the end (the 1000-byte tensor's block).
  report::Locator by_line(reader.tables(), GroupBy::kLine, FramePolicy::kInnermost);
  report::LiveSet peak = report::liveSetAt(reader, summary, Point{});
  EXPECT_TRUE(peak.allocated_known);
  EXPECT_EQ(peak.allocated_bytes, summary.torch_allocated_at_peak_bytes);
  report::LocationTable at_peak = by_line.group(peak);
  ASSERT_EQ(at_peak.rows.size(), 2u);
  EXPECT_TRUE(at_peak.allocated_known);
  EXPECT_EQ(at_peak.rows[0].bytes, 16 * kMiB + kMiB / 2);
  EXPECT_EQ(at_peak.rows[0].allocated_bytes, 17 * kMiB);
  EXPECT_EQ(at_peak.rows[1].allocated_bytes, 3 * kMiB);
  report::LiveSet end = report::liveSetAt(reader, summary, Point{Point::Kind::kEnd});
  EXPECT_EQ(end.allocated_bytes, summary.torch_allocated_end_bytes);
  report::LocationTable at_end = by_line.group(end);
  ASSERT_EQ(at_end.rows.size(), 2u);
  EXPECT_EQ(at_end.rows[1].bytes, 1000u);
  EXPECT_EQ(at_end.rows[1].allocated_bytes, 1024u);
}

// A tensor outside every segment the trace holds: its block cannot be known, so no line says
// an allocated figure (never a guess).
TEST_F(Fixture, AllocatedPerLineIsUnknownWhereABlockCannotBePlaced) {
  using format::SegmentAction;
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.context(1, 0, 0, format::Api::kTorchAllocator);
  trace.segment(1, SegmentAction::kAlloc, 0, 0x100000000, 2 << 20);
  trace.alloc(2, 0x100000000, 1000, at_10);
  trace.alloc(3, 0x900000000, 1000, at_11);  // no segment of it was recorded
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  EXPECT_FALSE(summary.torch_allocated_known);
  report::LiveSet peak = report::liveSetAt(reader, summary, Point{});
  EXPECT_FALSE(peak.allocated_known);
  EXPECT_EQ(peak.allocated_bytes, 0u);
  report::Locator by_line(reader.tables(), GroupBy::kLine, FramePolicy::kInnermost);
  EXPECT_FALSE(by_line.group(peak).allocated_known);
}

// Note [PyTorch's own allocator]: reserved memory from the segment records beside the tensors'
// events (a tensor may start where its segment does), and an OOM's view of the segments.
TEST_F(Fixture, PyTorchsSegmentsAreReservedBesideTheTensors) {
  using format::SegmentAction;
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.context(1, 0, 0, format::Api::kTorchAllocator);
  trace.segment(1, SegmentAction::kAlloc, 0, 0x100000, 0x10000);  // 64 KiB
  trace.alloc(2, 0x100000, 0x1000, at_10);                        // at the segment's start
  trace.alloc(3, 0x108000, 0x2000, at_11);
  trace.segment(4, SegmentAction::kMap, 0, 0x200000, 0x4000, 7, 0);  // a graph pool's pages
  trace.alloc(5, 0x200000, 0x800, at_11);                            // the peak: 0x3800
  trace.segment(6, SegmentAction::kUnmap, 0, 0x202000, 0x1000);      // part of the mapping
  trace.free(7, 0x200000);
  trace.failedAlloc(8, 0x9000, at_10);  // more than any free stretch, less than all of them
  trace.segment(9, SegmentAction::kFree, 0, 0x100000, 0x10000);
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  EXPECT_TRUE(summary.torch_segments);
  EXPECT_EQ(summary.peak_bytes, 0x3800u);
  EXPECT_EQ(summary.allocations, 3u);  // segments are no memory events
  EXPECT_EQ(summary.torch_reserved_peak_bytes, 0x14000u);
  EXPECT_EQ(summary.torch_reserved_at_peak_bytes, 0x14000u);
  EXPECT_EQ(summary.torch_reserved_end_bytes, 0x3000u);
  ASSERT_EQ(summary.devices.size(), 1u);
  EXPECT_EQ(summary.devices[0].torch_reserved_peak_bytes, 0x14000u);

  report::LiveSet at_oom = report::liveSetAt(reader, summary, Point{Point::Kind::kOom});
  ASSERT_EQ(at_oom.segments.size(), 3u);  // the segment, and the mapping cut in two
  EXPECT_EQ(at_oom.segments[1].address, 0x200000u);
  EXPECT_EQ(at_oom.segments[1].size, 0x2000u);
  EXPECT_EQ(at_oom.segments[1].graph_pool, 7u);
  EXPECT_EQ(at_oom.segments[2].address, 0x203000u);
  std::optional<report::OomReport> oom =
      report::analyzeOom(reader, summary, FramePolicy::kInnermost);
  ASSERT_TRUE(oom);
  EXPECT_TRUE(oom->torch_segments);
  EXPECT_EQ(oom->reserved_bytes, 0x13000u);
  // Free: 0x1000-0x8000 and 0xa000-0x10000 of the segment, and both mappings whole.
  EXPECT_EQ(oom->free_in_segments_bytes, 0x7000u + 0x6000 + 0x2000 + 0x1000);
  EXPECT_EQ(oom->largest_free_bytes, 0x7000u);
  ASSERT_FALSE(oom->segments.empty());
  EXPECT_EQ(oom->segments[0].address, 0x100000u);
  EXPECT_EQ(oom->segments[0].pinned_by.rows.size(), 2u);  // lines 10 and 11
}

TEST_F(Fixture, UntilTheLastStopLeavesOutWhatCameAfter) {
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.alloc(10, 0x10000, 1000, at_10);
  trace.marker(15, MarkerKind::kAnnotation);
  trace.marker(20, MarkerKind::kTracingStopped);
  trace.alloc(30, 0x20000, 5000);  // after the stop: untraced, and outside the window
  trace.marker(35, MarkerKind::kAnnotation);
  trace.free(40, 0x10000);
  trace.marker(50, MarkerKind::kProcessExit);
  reader::TraceReader reader(write());
  report::TraceSummary whole = report::summarize(reader);
  EXPECT_EQ(whole.peak_bytes, 6000u);
  EXPECT_EQ(whole.window_events, UINT64_MAX);
  report::TraceSummary traced =
      report::summarize(reader, report::kAllDevices, report::Until::kLastStop);
  EXPECT_EQ(traced.peak_bytes, 1000u);
  EXPECT_EQ(traced.end_bytes, 1000u);
  EXPECT_EQ(traced.events, 1u);
  EXPECT_EQ(traced.window_events, 1u);
  EXPECT_EQ(traced.window_end_ns, 20u);
  EXPECT_EQ(traced.duration_ns, 20u);
  EXPECT_EQ(traced.markers.size(), 1u);
  EXPECT_TRUE(traced.ended_cleanly) << "the process still ended cleanly";
  EXPECT_EQ(report::liveSetAt(reader, traced, Point{Point::Kind::kEnd}).bytes, 1000u);
  EXPECT_EQ(report::liveSetAt(reader, traced, Point{Point::Kind::kTime, 45}).bytes, 1000u);
  // Started again after the stop: the window is the whole trace.
  trace.marker(60, MarkerKind::kTracingStarted);
  reader::TraceReader again(write());
  EXPECT_EQ(report::summarize(again, report::kAllDevices, report::Until::kLastStop).window_events,
            UINT64_MAX);
}

TEST_F(Fixture, ModulesAreTrackedPerThread) {
  uint32_t attention = trace.string("model.layers.0.attn");
  uint32_t mlp = trace.string("model.layers.0.mlp");
  trace.marker(0, MarkerKind::kTracingStarted);
  trace.moduleScope(attention);
  trace.alloc(10, 0x10000, 1000, at_10);  // thread 1, attention
  trace.context(2, 0);                    // thread 2 has no module yet
  trace.alloc(20, 0x20000, 2000, at_10);
  trace.moduleScope(mlp);  // thread 2 enters the MLP
  trace.alloc(30, 0x30000, 4000, at_11);
  trace.context(1, 0);  // back on thread 1: still in attention
  trace.alloc(40, 0x40000, 8000, at_11);
  trace.moduleScope(0);  // thread 1 leaves its modules
  trace.alloc(50, 0x50000, 16, at_11);
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  report::LiveSet live = report::liveSetAt(reader, summary, Point{Point::Kind::kEnd});
  report::Locator by_module(reader.tables(), GroupBy::kModule, FramePolicy::kInnermost);
  report::LocationTable table = by_module.group(live);
  std::vector<std::pair<std::string, uint64_t>> rows;
  for (const report::TableRow& row : table.rows) rows.emplace_back(row.location.name, row.bytes);
  EXPECT_EQ(rows, (std::vector<std::pair<std::string, uint64_t>>{{"model.layers.0.attn", 9000},
                                                                 {"model.layers.0.mlp", 4000},
                                                                 {"<no module>", 2016}}));
}

}  // namespace
}  // namespace memtrace::testing

namespace memtrace::testing {
namespace {

TEST(UserCode, OneRuleForTheReportAndTheEstimator) {
  EXPECT_TRUE(isUserCode("/home/user/model.py"));
  EXPECT_TRUE(isUserCode("/home/user/lib/python_helpers.py"));  // not lib/pythonX.Y
  EXPECT_FALSE(isUserCode("/usr/lib/python3.11/json/__init__.py"));
  EXPECT_FALSE(isUserCode("/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py"));
  EXPECT_FALSE(isUserCode("/usr/lib/python3/dist-packages/numpy/core/numeric.py"));
  EXPECT_FALSE(isUserCode("/src/pytorch/torch/nn/functional.py"));  // torch from a checkout
  EXPECT_FALSE(isUserCode("/src/pytorch/torch/_tensor.py"));
  // What the user typed: python -c, standard input, an IPython cell (ipykernel's are files).
  EXPECT_TRUE(isUserCode("<string>"));
  EXPECT_TRUE(isUserCode("<stdin>"));
  EXPECT_TRUE(isUserCode("<ipython-input-3-5d1f2c9a8b7e>"));
  EXPECT_TRUE(isUserCode("/tmp/ipykernel_4242/3012345678.py"));
  // Code a library generated (torch.fx's forwards) and the import machinery are not.
  EXPECT_FALSE(isUserCode("<eval_with_key>.12"));
  // torch.compile's generated code (Note [Generated code]): inductor's cache, wherever it is.
  EXPECT_FALSE(isUserCode(
      "/tmp/torchinductor_me/ic/cicltypidatmhbkvj3o33yyksvenxieeevrns5jc43tlricfak2n.py"));
  EXPECT_FALSE(
      isUserCode("/home/me/cache/ic/cicltypidatmhbkvj3o33yyksvenxieeevrns5jc43tlricfak2n.py"));
  EXPECT_TRUE(
      isUserCode("/home/me/cache/xx/cicltypidatmhbkvj3o33yyksvenxieeevrns5jc43tlricfak2n.py"));
  EXPECT_TRUE(isUserCode("/home/me/project/ic/cicl.py"));
  EXPECT_FALSE(isUserCode("<frozen importlib._bootstrap>"));
  EXPECT_FALSE(isUserCode(""));
}

// Note [Device memory readings]: at a point, each device's reading nearest it, and its used
// bytes less what was live on the device at the reading.
TEST_F(Fixture, OutsideAnyAllocationCallIsTheNearestReadingLessWhatWasLiveThere) {
  constexpr uint64_t kTotal = 1000000;
  trace.alloc(10, 0x10000, 300);
  trace.deviceMemory(11, 0, kTotal - 800, kTotal);   // 800 used, 300 live: 500 outside
  trace.alloc(20, 0x20000, 200);                     // 500 live
  trace.alloc(30, 0x30000, 100);                     // 600 live
  trace.deviceMemory(45, 0, kTotal - 1150, kTotal);  // 1150 used, 600 live: 550 outside
  trace.context(1, 1);
  trace.alloc(50, 0x40000, 50);                    // device 1: 650 in all, the peak
  trace.deviceMemory(51, 1, kTotal - 60, kTotal);  // 60 used, 50 live: 10 outside
  trace.deviceMemory(52, 1, kTotal - 40, kTotal);  // managed memory not on the device yet
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  ASSERT_EQ(summary.device_memory.size(), 4u);
  EXPECT_EQ(summary.device_memory[1].live_bytes, 600u);

  // At the peak (t=50): device 0's reading at 45 is nearer than the one at 11.
  report::OutsideAllocations at_peak =
      report::outsideAllocations(summary, report::liveSetAt(reader, summary, Point{}));
  ASSERT_EQ(at_peak.devices.size(), 2u);
  EXPECT_EQ(at_peak.devices[0].reading.time_ns, 45u);
  EXPECT_EQ(at_peak.devices[0].from_point_ns, -5);
  EXPECT_EQ(at_peak.devices[0].outside_bytes, 550u);
  // Device 1: the reading at 51 (1 after) is nearer than the one at 52.
  EXPECT_EQ(at_peak.devices[1].reading.time_ns, 51u);
  EXPECT_EQ(at_peak.bytes, 560u);

  // Early (t=15): the reading at 11 is nearer; device 1's is still its nearest.
  report::OutsideAllocations early = report::outsideAllocations(
      summary, report::liveSetAt(reader, summary, Point{Point::Kind::kTime, 15}));
  EXPECT_EQ(early.devices[0].reading.time_ns, 11u);
  EXPECT_EQ(early.devices[0].from_point_ns, 1);  // the point is the event at 10
  EXPECT_EQ(early.devices[0].outside_bytes, 500u);

  // At the end (the event at 50), device 1 only: its reading at 51 is nearer than the one at 52.
  report::TraceSummary device_1 = report::summarize(reader, 1);
  report::OutsideAllocations end = report::outsideAllocations(
      device_1, report::liveSetAt(reader, device_1, Point{Point::Kind::kEnd}));
  ASSERT_EQ(end.devices.size(), 1u);
  EXPECT_EQ(end.devices[0].reading.time_ns, 51u);
  EXPECT_EQ(end.devices[0].outside_bytes, 10u);
}

TEST_F(Fixture, LiveBeyondTheUsedMemoryIsSaidNotSubtracted) {
  trace.alloc(10, 0x10000, 300);
  trace.deviceMemory(11, 0, 900, 1000);  // 100 used, 300 live (managed memory)
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  report::OutsideAllocations outside =
      report::outsideAllocations(summary, report::liveSetAt(reader, summary, Point{}));
  ASSERT_EQ(outside.devices.size(), 1u);
  EXPECT_EQ(outside.devices[0].outside_bytes, 0u);
  EXPECT_EQ(outside.devices[0].live_beyond_used_bytes, 200u);
  EXPECT_EQ(outside.bytes, 0u);
}

TEST_F(Fixture, MappedAndReservedPeaks) {
  using format::RecordType;
  trace.context(1, 0, 0, format::Api::kCuMemCreate, format::Level::kSegment);
  trace.addressRange(RecordType::kAddressReserve, 1, 0x7f0000000000, 8 << 20);
  trace.alloc(2, 0x10000, 2 << 20);
  trace.alloc(3, 0x10010, 2 << 20);
  trace.memoryMap(4, 0x7f0000000000, 2 << 20, 0, 0x10000);
  trace.memoryMap(5, 0x7f0000200000, 2 << 20, 0, 0x10010);
  trace.memoryMap(6, 0x7f0000400000, 2 << 20, 0, 0x10010);  // the same handle again
  trace.addressRange(RecordType::kMemoryUnmap, 7, 0x7f0000000000, 6 << 20);
  trace.free(8, 0x10000);
  trace.free(9, 0x10010);
  trace.addressRange(RecordType::kAddressFree, 10, 0x7f0000000000, 8 << 20);
  trace.addressRange(RecordType::kAddressReserve, 11, 0x7f0000000000, 2 << 20);
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  EXPECT_EQ(summary.mapped_peak_bytes, 6u << 20);  // mapped bytes count a handle twice
  EXPECT_EQ(summary.peak_bytes, 4u << 20);         // memory does not
  EXPECT_EQ(summary.reserved_peak_bytes, 8u << 20);
  EXPECT_TRUE(summary.physical_memory);
  EXPECT_TRUE(summary.segment_level);
}

}  // namespace
}  // namespace memtrace::testing
