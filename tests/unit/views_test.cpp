// The views' pure functions: timeline downsampling, the flame tree of a live set, folded
// stacks, and the escaping of trace strings.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>

#include "tests/unit/trace_builder.h"
#include "tracer/report/escape.h"
#include "tracer/report/flame.h"
#include "tracer/report/timeline.h"

namespace memtrace::testing {
namespace {

using format::MarkerKind;
using report::FramePolicy;
using report::GroupBy;
using report::Point;

struct ViewsFixture : ::testing::Test {
  void SetUp() override {
    trace.processInfo();
    uint32_t model = trace.string("/home/user/model.py");
    uint32_t main_frame = trace.frame(model, trace.string("main"), 1);
    uint32_t root = trace.pythonStack(0, main_frame);
    big = trace.pythonStack(root, trace.frame(model, trace.string("big"), 10));
    small = trace.pythonStack(root, trace.frame(model, trace.string("small"), 20));
    nested = trace.pythonStack(small, trace.frame(model, trace.string("inner"), 30));
    trace.context(1, 0).marker(0, MarkerKind::kTracingStarted);
  }
  void TearDown() override { std::remove(path.c_str()); }
  std::string write() { return trace.write(path = temporaryPath("views.bin")); }

  TraceBuilder trace;
  std::string path;
  uint32_t big = 0, small = 0, nested = 0;
};

TEST_F(ViewsFixture, DownsamplingKeepsThePeakTheTroughAndTheLastValueOfEachBucket) {
  // 1000 events in [0, 100000): a saw that climbs to one spike of 10 MB at t=51234.
  uint64_t address = 0x10000;
  std::vector<uint64_t> live;
  for (uint64_t t = 0; t < 1000; ++t) {
    uint64_t time = t * 100 + 34;
    if (t == 512) {
      trace.alloc(time, 0x7000000, 10'000'000, big);
      trace.free(time + 1, 0x7000000);
      continue;
    }
    if (t % 3 == 2 && !live.empty()) {
      trace.free(time, live.back());
      live.pop_back();
    } else {
      trace.alloc(time, address, 1000 + t, t % 2 ? small : nested);
      live.push_back(address);
      address += 0x10000;
    }
  }
  trace.marker(100000, MarkerKind::kProcessExit);
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  report::LiveSet peak = report::liveSetAt(reader, summary, Point{});
  report::Locator locator(reader.tables(), GroupBy::kLine, FramePolicy::kInnermost);
  report::LocationTable table = locator.group(peak);
  report::TimelineOptions options;
  options.buckets = 10;
  options.lanes = 1;
  report::Timeline timeline = report::computeTimeline(reader, summary, locator, table, options);

  EXPECT_EQ(timeline.lanes, (std::vector<std::string>{table.rows[0].location.name, "other"}));
  EXPECT_EQ(timeline.peak_bytes, summary.peak_bytes);
  EXPECT_EQ(timeline.peak_time_ns, summary.peak_time_ns);
  // The start, at most three per bucket, and the end.
  EXPECT_LE(timeline.samples.size(), 1u + 3 * 10 + 1);
  EXPECT_EQ(timeline.samples.front().bytes, 0u);
  EXPECT_EQ(timeline.samples.back().time_ns, summary.duration_ns);
  EXPECT_EQ(timeline.samples.back().bytes, summary.end_bytes);
  uint64_t highest = 0, previous_time = 0;
  for (const report::TimelineSample& sample : timeline.samples) {
    EXPECT_EQ(std::accumulate(sample.lanes.begin(), sample.lanes.end(), uint64_t{0}), sample.bytes);
    EXPECT_GE(sample.time_ns, previous_time);
    previous_time = sample.time_ns;
    highest = std::max(highest, sample.bytes);
  }
  EXPECT_EQ(highest, summary.peak_bytes);
  // The spike is the lane of the top location (big, 10 MB): it is all in lane 0 there.
  for (const report::TimelineSample& sample : timeline.samples) {
    if (sample.bytes == summary.peak_bytes) {
      EXPECT_EQ(sample.lanes[0], 10'000'000u);
    }
  }
  // Each bucket's last value is kept: the line right after the spike is down again.
  for (size_t i = 1; i < timeline.samples.size(); ++i) {
    if (timeline.samples[i - 1].bytes == summary.peak_bytes) {
      EXPECT_LT(timeline.samples[i].bytes, 10'000'000u);
    }
  }
}

TEST_F(ViewsFixture, EveryEventIsASampleWhenBucketsAreFinerThanEvents) {
  trace.alloc(10, 0x1000, 100, big).alloc(20, 0x2000, 50, small).free(30, 0x1000);
  trace.alloc(40, 0x1000, 70, nested).marker(50, MarkerKind::kAnnotation, trace.string("step"));
  trace.failedAlloc(60, 1 << 30);
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  report::Locator locator(reader.tables(), GroupBy::kLine, FramePolicy::kInnermost);
  report::LocationTable no_rows;
  report::TimelineOptions options;
  options.buckets = 1000;
  options.lanes = 0;
  report::Timeline timeline = report::computeTimeline(reader, summary, locator, no_rows, options);
  std::vector<std::pair<uint64_t, uint64_t>> points;
  for (const report::TimelineSample& sample : timeline.samples)
    points.emplace_back(sample.time_ns, sample.bytes);
  EXPECT_EQ(points, (std::vector<std::pair<uint64_t, uint64_t>>{
                        {0, 0}, {10, 100}, {20, 150}, {30, 50}, {40, 120}, {60, 120}}));
  EXPECT_EQ(timeline.lanes, std::vector<std::string>{"all"});
  ASSERT_EQ(timeline.failures.size(), 1u);
  EXPECT_EQ(timeline.failures[0].time_ns, 60u);
  ASSERT_EQ(timeline.marks.size(), 2u);  // tracing started, the annotation
  EXPECT_EQ(timeline.marks[1].name, "step");
}

TEST_F(ViewsFixture, FlameTreeSumsBytesAlongFullStacks) {
  trace.alloc(10, 0x1000, 100, big).alloc(20, 0x2000, 50, small).alloc(30, 0x3000, 30, nested);
  trace.alloc(40, 0x4000, 20, nested);
  trace.marker(50, MarkerKind::kTracingStopped).alloc(60, 0x5000, 7);
  reader::TraceReader reader(write());
  report::TraceSummary summary = report::summarize(reader);
  report::LiveSet end = report::liveSetAt(reader, summary, Point{Point::Kind::kEnd});
  report::Locator locator(reader.tables(), GroupBy::kLine, FramePolicy::kInnermost);
  report::Symbolizer symbolizer(reader.tables());
  report::FlameGraph graph = report::buildFlameGraph(reader.tables(), end, locator, symbolizer);
  EXPECT_EQ(graph.total_bytes(), 207u);
  EXPECT_EQ(graph.nodes[0].allocations, 5u);
  auto lines = report::foldedStacks(graph);
  const std::string main = "/home/user/model.py:1 (main)";
  EXPECT_EQ(lines,
            (std::vector<std::pair<std::string, uint64_t>>{
                {main + ";/home/user/model.py:10 (big)", 100},
                {main + ";/home/user/model.py:20 (small)", 50},
                {main + ";/home/user/model.py:20 (small);/home/user/model.py:30 (inner)", 50},
                {"untraced", 7}}));
  // main holds 200: big's 100, then small's 50 and inner's 50 under it.
  const report::FlameNode& main_node = graph.nodes[graph.nodes[0].children[0]];
  EXPECT_EQ(main_node.name, main);
  EXPECT_EQ(main_node.bytes, 200u);
  EXPECT_EQ(graph.nodes[main_node.children[1]].bytes, 100u);  // small, with inner
}

TEST(Escape, HtmlAndXmlSpecialsAndBrokenUtf8) {
  EXPECT_EQ(report::escapeXml("</script>\"'&"), "&lt;/script&gt;&quot;&#39;&amp;");
  EXPECT_EQ(report::escapeXml("a\x01"
                              "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(report::validUtf8("ok \xC3\xA9 \xFF \xE2\x82"),
            "ok \xC3\xA9 \xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(report::validUtf8("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");                     // a surrogate
  EXPECT_EQ(report::validUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(report::validUtf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Escape, JsonCannotCloseTheScriptElement) {
  std::string json = R"({"name": "</script><!--&\u2028"})";
  json += "\xE2\x80\xA8";
  EXPECT_EQ(report::jsonForScript(json),
            R"({"name": "\u003c/script\u003e\u003c!--\u0026\u2028"})" + std::string("\\u2028"));
}

}  // namespace
}  // namespace memtrace::testing
