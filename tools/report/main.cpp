// memtrace-report: reads a trace offline.
//
//   memtrace-report trace.bin [options]     the peak, and what was live there by location
//   memtrace-report parse trace.bin         every record as text
//   memtrace-report html trace.bin          the self-contained HTML report (render_html.h)
//   memtrace-report flamegraph trace.bin    folded stacks or SVG of what was live
//   memtrace-report export perfetto|pytorch trace.bin
//
// Exit status: 0 done; 2 bad input or bad usage, with one line on stderr saying why.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/byte_format.h"
#include "reader/reader.h"
#include "report/analysis.h"
#include "report/export_perfetto.h"
#include "report/export_pytorch.h"
#include "report/flame.h"
#include "report/locations.h"
#include "report/parse_command.h"
#include "report/prediction.h"
#include "report/progress.h"
#include "report/render.h"
#include "report/render_flame.h"
#include "report/render_html.h"
#include "report/symbolizer.h"
#include "report/timeline.h"
#include "tools/common/tool_main.h"

namespace {

using namespace memtrace::report;

constexpr const char* kUsage =
    R"(usage: memtrace-report [report] TRACE [--estimate est.json] [options]
       memtrace-report parse TRACE
       memtrace-report html TRACE [-o report.html] [--estimate est.json] [options]
       memtrace-report flamegraph TRACE [--format svg|folded] [-o FILE] [--at ...] [--device N]
       memtrace-report export perfetto TRACE [-o trace.json] [--device N] [--points N]
       memtrace-report export pytorch TRACE [-o snapshot.pickle] [--at ...] [--device N]

Reads a trace written by libmemtrace.so and prints the peak of live CUDA memory and
what was live there, grouped by source location (Mem, Cumulative Mem, Median, Count,
Location), largest first.

options:
  --group-by line|function|file|stack|module
                                         how to group the live allocations (line); module:
                                         by the nn.Module that was running (Python package)
  --frame innermost|user                 the Python frame that stands for an allocation:
                                         the innermost, or the innermost in your own code
                                         (outside the standard library, site-packages
                                         and torch) (innermost)
  --top N                                rows to show; 0 shows all (20)
  --at peak|end|oom|SECONDS              where to look: the peak, the end, the first
                                         failed allocation, or SECONDS after the start (peak)
  --device N                             only device N's memory (all devices)
  --until end|stop                       how far to read: the whole trace, or up to where
                                         tracing was last stopped (what was traced, without
                                         what the program allocated afterwards) (end)
  --format text|json|csv                 (text); for flamegraph: svg|folded (svg)
  --estimate FILE                        memtrace-estimate's JSON: its predicted peak beside
                                         the measured one, and a Predicted column (the bytes
                                         it predicted live at its peak, same location)
  -o, --output FILE                      write there instead of standard output
  -h, --help                             this help

parse prints every record of TRACE as a line of text.

html writes one self-contained HTML file (no network needed): the live bytes over time,
stacked by the top locations, with the peak and the marks; a flame graph of what was live
at --at; the summary and the table of the text report.
  --estimate FILE                        also draws the predicted peak on the timeline
  --lanes N                              locations stacked on the timeline; the rest
                                         are "other" (10)
  --points N                             time buckets of the timeline, each keeping its
                                         lowest, highest and last value (2000)

flamegraph writes what was live at --at by full stack (Python frames, then native
frames): an SVG icicle, or folded stacks for flamegraph.pl and speedscope.

export perfetto writes Chrome trace event JSON for ui.perfetto.dev and chrome://tracing:
a counter of live bytes per device (--points buckets, 100000 by default), marks, peaks
and failed allocations as instant events, phases as slices.
export pytorch writes PyTorch's memory snapshot pickle for pytorch.org/memory_viz and
torch.cuda._memory_viz: the events up to --at (the end by default) and what was live there.
)";

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  Until until = Until::kEnd;
  std::string command = "report";
  std::string export_kind;  // export: perfetto or pytorch
  std::string trace;
  GroupBy group_by = GroupBy::kLine;
  FramePolicy frame = FramePolicy::kInnermost;
  size_t top = 20;
  Point point;
  int device = kAllDevices;
  std::string format;  // "" until given: text, or svg for flamegraph
  std::string output;
  std::string estimate;
  size_t lanes = 10;
  size_t points = 0;  // 0: the command's default
  bool point_given = false;
};

uint64_t parseUnsigned(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end || errno || text[0] == '-')
    throw UsageError(std::string(what) + " must be a non-negative integer, not '" + text + "'");
  return value;
}

Options parseArguments(int argc, char** argv) {
  Options options;
  std::vector<std::string> args(argv + 1, argv + argc);
  size_t i = 0;
  if (i < args.size() && (args[i] == "report" || args[i] == "parse" || args[i] == "html" ||
                          args[i] == "flamegraph" || args[i] == "export"))
    options.command = args[i++];
  if (options.command == "export") {
    if (i >= args.size() || (args[i] != "perfetto" && args[i] != "pytorch"))
      throw UsageError("export takes perfetto or pytorch, then the trace");
    options.export_kind = args[i++];
  }
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--group-by") {
      std::string v = value(arg);
      if (v == "line")
        options.group_by = GroupBy::kLine;
      else if (v == "function")
        options.group_by = GroupBy::kFunction;
      else if (v == "file")
        options.group_by = GroupBy::kFile;
      else if (v == "stack")
        options.group_by = GroupBy::kStack;
      else if (v == "module")
        options.group_by = GroupBy::kModule;
      else
        throw UsageError("--group-by takes line, function, file, stack or module, not '" + v + "'");
    } else if (arg == "--frame") {
      std::string v = value(arg);
      if (v == "innermost")
        options.frame = FramePolicy::kInnermost;
      else if (v == "user")
        options.frame = FramePolicy::kUser;
      else
        throw UsageError("--frame takes innermost or user, not '" + v + "'");
    } else if (arg == "--top") {
      options.top = parseUnsigned(value(arg), "--top");
    } else if (arg == "--at") {
      std::string v = value(arg);
      options.point_given = true;
      if (v == "peak")
        options.point.kind = Point::Kind::kPeak;
      else if (v == "end")
        options.point.kind = Point::Kind::kEnd;
      else if (v == "oom")
        options.point.kind = Point::Kind::kOom;
      else {
        char* end = nullptr;
        double seconds = std::strtod(v.c_str(), &end);
        if (v.empty() || *end || !(seconds >= 0) || seconds > 1e9)
          throw UsageError("--at takes peak, end, oom or a number of seconds, not '" + v + "'");
        options.point.kind = Point::Kind::kTime;
        options.point.time_ns = static_cast<uint64_t>(seconds * 1e9);
      }
    } else if (arg == "--device") {
      uint64_t device = parseUnsigned(value(arg), "--device");
      // Past an int it used to wrap (2^32 read as device 0); the summary says whether a
      // smaller index is in the trace.
      if (device > static_cast<uint64_t>(INT32_MAX))
        throw UsageError(fmt::format("--device takes a device index, not {}", device));
      options.device = static_cast<int>(device);
    } else if (arg == "--until") {
      std::string v = value(arg);
      if (v == "end")
        options.until = Until::kEnd;
      else if (v == "stop")
        options.until = Until::kLastStop;
      else
        throw UsageError("--until takes end or stop, not '" + v + "'");
    } else if (arg == "--format") {
      options.format = value(arg);
    } else if (arg == "--estimate") {
      options.estimate = value(arg);
    } else if (arg == "--lanes") {
      options.lanes = parseUnsigned(value(arg), "--lanes");
    } else if (arg == "--points") {
      options.points = parseUnsigned(value(arg), "--points");
      if (options.points == 0 || options.points > 10000000)
        throw UsageError("--points takes a number from 1 to 10000000");
    } else if (arg == "-o" || arg == "--output") {
      options.output = value(arg);
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "'");
    } else if (options.trace.empty()) {
      options.trace = arg;
    } else if (options.command == "report" && options.trace == args[0] &&
               access(args[0].c_str(), F_OK) != 0) {
      // `memtrace-report exprot trace.bin`: a misspelt command, not two trace files.
      throw UsageError("unknown command '" + args[0] +
                       "' (commands: report, parse, html, flamegraph, export)");
    } else {
      throw UsageError("more than one trace file given ('" + options.trace + "', '" + arg + "')");
    }
  }
  if (options.trace.empty()) throw UsageError("no trace file given");
  if (options.command == "flamegraph") {
    if (options.format.empty()) options.format = "svg";
    if (options.format != "svg" && options.format != "folded")
      throw UsageError("--format takes svg or folded for flamegraph, not '" + options.format + "'");
  } else if (options.command == "report") {
    if (options.format.empty()) options.format = "text";
    if (options.format != "text" && options.format != "json" && options.format != "csv")
      throw UsageError("--format takes text, json or csv, not '" + options.format + "'");
  } else if (!options.format.empty()) {
    throw UsageError("--format is for the report and flamegraph, not " + options.command);
  }
  if (!options.estimate.empty() && options.command != "html" && options.command != "report")
    throw UsageError("--estimate is for the report and html, not " + options.command);
  if (options.command == "export" && options.export_kind == "pytorch" && !options.point_given)
    options.point.kind = Point::Kind::kEnd;  // the whole history, as memory_viz shows it
  return options;
}

void writeOutput(const Options& options, const std::string& text) {
  if (options.output.empty()) {
    std::cout << text;
    std::cout.flush();
    return;
  }
  std::ofstream file(options.output, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) throw std::runtime_error(options.output + ": cannot write: " + std::strerror(errno));
}

int run(const Options& options) {
  memtrace::reader::TraceReader trace(options.trace);
  std::ostringstream out;
  if (options.command == "parse") {
    printRecords(trace, out);
    writeOutput(options, out.str());
    return 0;
  }
  // Read before the trace, so that a bad estimate fails at once.
  std::optional<Prediction> prediction;
  if (!options.estimate.empty()) prediction = loadPrediction(options.estimate);

  Progress progress(options.trace, trace.fileSize());
  Report report;
  report.trace_path = options.trace;
  report.top = options.top;
  progress.pass("finding the peak");
  report.summary = summarize(trace, options.device, options.until);
  if (trace.cutOffset())
    spdlog::warn(
        "{}: ends in a partial chunk at byte {} (the process was killed?); read up to there",
        options.trace, trace.cutOffset());
  if (options.command == "export") {
    if (options.export_kind == "perfetto") {
      progress.pass("writing the counters");
      exportPerfetto(out, trace, report.summary, options.points ? options.points : 100000);
    } else {
      progress.pass("writing the snapshot");
      exportPytorchSnapshot(out, trace, report.summary, options.point);
    }
    progress.done();
    writeOutput(options, out.str());
    return 0;
  }
  progress.pass("replaying to the " + pointName(options.point));
  report.live_set = liveSetAt(trace, report.summary, options.point);
  Locator locator(trace.tables(), options.group_by, options.frame);
  report.table = locator.group(report.live_set);
  if (options.command == "report") {
    progress.done();
    report.prediction = prediction ? &*prediction : nullptr;
    if (options.format == "json")
      renderJson(out, report);
    else if (options.format == "csv")
      renderCsv(out, report);
    else
      renderText(out, report);
    writeOutput(options, out.str());
    return 0;
  }
  // The tables now hold every stack and module up to the point: what the flame graph of
  // the live set needs.
  Symbolizer symbolizer(trace.tables());
  FlameGraph flame = buildFlameGraph(trace.tables(), report.live_set, locator, symbolizer);
  if (options.command == "flamegraph") {
    progress.done();
    if (options.format == "folded")
      renderFolded(out, flame);
    else
      renderFlameSvg(out, flame,
                     fmt::format("memtrace: live at {} ({}), {}", pointName(options.point),
                                 memtrace::formatBytes(report.live_set.bytes), options.trace));
    writeOutput(options, out.str());
    return 0;
  }
  // html. The timeline assigns allocations to the table's top rows through the same
  // locator. Its symbolizer, if the table needed one, knows the modules up to the point;
  // an allocation whose module was loaded later cannot be one of those rows anyway.
  progress.pass("drawing the timeline");
  TimelineOptions timeline_options;
  timeline_options.lanes = options.lanes;
  if (options.points) timeline_options.buckets = options.points;
  Timeline timeline =
      computeTimeline(trace, report.summary, locator, report.table, timeline_options);
  progress.done();
  renderHtml(out, HtmlReport{report, timeline, flame, prediction ? &*prediction : nullptr});
  writeOutput(options, out.str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A trace or estimate the tool cannot read is bad input too: every failure exits 2.
  memtrace::tools::ErrorPolicy policy;
  policy.user_error_suffix = " (memtrace-report --help shows the usage)";
  return memtrace::tools::toolMain<UsageError>("memtrace-report", policy,
                                               [&] { return run(parseArguments(argc, argv)); });
}
