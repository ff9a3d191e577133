// libFuzzer harness over the reader and every memtrace-report command, in process: each
// input is a trace file, read as memtrace-report reads it (tools/report/main.cpp), by
// parse, the report in its three formats and six groupings (with the training pass),
// flamegraph, html and both exports, at every point. Bad input may be refused (reader::TraceError,
// which the tool prints in one line with exit status 2); anything else is a finding: a crash, a
// sanitizer report, another exception, a hang (-timeout) or memory out of proportion
// (-rss_limit_mb).
//
// Built with clang's -fsanitize=fuzzer in the sanitizer build (make test-sanitize); built
// with replay_main.cpp instead in every build, to replay the corpus and the crashes.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "tracer/format/codec.h"
#include "tracer/format/records.h"
#include "tracer/reader/compact.h"
#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/device_reads.h"
#include "tracer/report/export_perfetto.h"
#include "tracer/report/export_pytorch.h"
#include "tracer/report/flame.h"
#include "tracer/report/locations.h"
#include "tracer/report/oom.h"
#include "tracer/report/parse_command.h"
#include "tracer/report/render.h"
#include "tracer/report/render_flame.h"
#include "tracer/report/render_html.h"
#include "tracer/report/symbolizer.h"
#include "tracer/report/timeline.h"

namespace {

using namespace memtrace::report;
using memtrace::reader::TraceError;
using memtrace::reader::TraceReader;

// The input with every whole chunk's checksums made right. A mutation almost never keeps a
// CRC-32C right, so without this nearly every input would stop at the first chunk header:
// the fuzzer reaches the records (what the commands act on) through this copy, and the
// checksum checks through the input as it is.
std::vector<uint8_t> withChecksums(const uint8_t* data, size_t size) {
  std::vector<uint8_t> fixed(data, data + size);
  size_t offset = memtrace::format::kFileHeaderSize;
  while (offset + memtrace::format::kChunkHeaderSize <= size) {
    uint8_t* header = fixed.data() + offset;
    // Version 9's compressed chunks count their stored bytes in the other bits (Note
    // [Compressed chunks]).
    uint32_t payload = memtrace::codec::getU32(header) & ~memtrace::format::kCompressedChunk;
    if (payload == 0 || payload > size - offset - memtrace::format::kChunkHeaderSize) break;
    uint8_t* start = header + memtrace::format::kChunkHeaderSize;
    memtrace::codec::putU32(header + 4, memtrace::codec::crc32c(start, payload));
    memtrace::codec::putU32(header + 8, memtrace::codec::crc32c(header, 8));
    offset += memtrace::format::kChunkHeaderSize + payload;
  }
  return fixed;
}

// The input as a file the reader opens by path, without touching the disk (`slot` 1: a second
// file, for what compact made of the first).
std::string inputFile(const uint8_t* data, size_t size, int slot = 0) {
  static int fds[2] = {memfd_create("memtrace-fuzz", 0), memfd_create("memtrace-fuzz-compact", 0)};
  int fd = fds[slot];
  if (fd < 0) {
    std::perror("memfd_create");
    std::abort();
  }
  if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) {
    std::perror("memfd write");
    std::abort();
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

// One memtrace-report command line's work, as run() in tools/report/main.cpp does it.
void reportAt(TraceReader& trace, const TraceSummary& summary, Point point, GroupBy group_by,
              FramePolicy frame, bool views) {
  std::ostringstream out;
  Report report;
  report.trace_path = trace.path();
  report.summary = summary;
  // In memtrace-report's order: each pass leaves the tables as it read them.
  report.device_reads = deviceReadRows(trace, summary, frame);
  report.oom = analyzeOom(trace, summary, frame);
  report.live_set = liveSetAt(trace, summary, point);
  Locator locator(trace.tables(), group_by, frame);
  report.table = locator.group(report.live_set);
  renderText(out, report);
  renderJson(out, report);
  renderCsv(out, report);
  if (!views) return;
  Symbolizer symbolizer(trace.tables());
  FlameGraph flame = buildFlameGraph(trace.tables(), report.live_set, locator, symbolizer);
  renderFolded(out, flame);
  renderFlameSvg(out, flame, "fuzz");
  TimelineOptions timeline_options;
  timeline_options.buckets = 64;
  Timeline timeline = computeTimeline(trace, summary, locator, report.table, timeline_options);
  renderHtml(out, HtmlReport{report, timeline, flame, nullptr});
}

// parse's lines without the last one where that says where a cut or open chunk begins: what
// compact keeps of a trace, record for record.
std::string recordLines(TraceReader& trace) {
  std::ostringstream out;
  printRecords(trace, out);
  std::string text = out.str();
  if (trace.cutOffset() || trace.openChunkOffset())
    text.erase(text.rfind('\n', text.size() - 2) + 1);
  return text;
}

void everyCommand(const std::string& path) {
  TraceReader trace(path);
  std::string records = recordLines(trace);
  // compact (Note [Compressed chunks]): a file that reads as the same records, or a refusal.
  if (trace.version() >= memtrace::format::kTimeUnitVersion) {
    memtrace::reader::Compacted compacted = memtrace::reader::compactTrace(path);
    TraceReader again(inputFile(reinterpret_cast<const uint8_t*>(compacted.file.data()),
                                compacted.file.size(), 1));
    if (recordLines(again) != records) {
      std::fprintf(stderr, "compact changed the records of %s\n", path.c_str());
      std::abort();
    }
  }
  for (Until until : {Until::kEnd, Until::kLastStop}) {
    TraceSummary summary = summarize(trace, kAllDevices, until);
    resolveTraining(trace, summary);
    for (Point::Kind kind :
         {Point::Kind::kPeak, Point::Kind::kEnd, Point::Kind::kOom, Point::Kind::kTime}) {
      Point point{kind, summary.duration_ns / 2};
      if (kind == Point::Kind::kOom && summary.first_failed_event == UINT64_MAX) continue;
      bool first = until == Until::kEnd && kind == Point::Kind::kPeak;
      reportAt(trace, summary, point, GroupBy::kLine, FramePolicy::kInnermost, true);
      if (first) {
        for (GroupBy group_by : {GroupBy::kFunction, GroupBy::kFile, GroupBy::kStack,
                                 GroupBy::kModule, GroupBy::kCategory})
          reportAt(trace, summary, point, group_by, FramePolicy::kUser, false);
      }
      std::ostringstream out;
      exportPytorchSnapshot(out, trace, summary, point);
    }
    std::ostringstream out;
    exportPerfetto(out, trace, summary, 64);
    // --device: each device the trace has, and one it has not (refused).
    for (const DeviceSummary& device : summary.devices) {
      if (device.device < 0) continue;
      TraceSummary one = summarize(trace, device.device, until);
      reportAt(trace, one, Point{}, GroupBy::kLine, FramePolicy::kInnermost, false);
      exportPytorchSnapshot(out, trace, one, Point{Point::Kind::kEnd, 0});
    }
    try {
      summarize(trace, memtrace::format::kMaxDevices - 1, until);
    } catch (const TraceError&) {
    }
  }
}

void readEveryWay(const std::vector<uint8_t>& input) {
  try {
    everyCommand(inputFile(input.data(), input.size()));
  } catch (const TraceError&) {
    // Refused in one line: what bad input should get.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> input(data, data + size);
  std::vector<uint8_t> fixed = withChecksums(data, size);
  readEveryWay(input);
  if (fixed != input) readEveryWay(fixed);
  return 0;
}
