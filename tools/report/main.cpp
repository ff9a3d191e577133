// memtrace-report: reads a trace offline.
//
//   memtrace-report trace.bin [options]     the peak, and what was live there by location
//   memtrace-report parse trace.bin         every record as text
//   memtrace-report html trace.bin          the self-contained HTML report (render_html.h)
//   memtrace-report flamegraph trace.bin    folded stacks or SVG of what was live
//   memtrace-report export perfetto|pytorch trace.bin
//   memtrace-report job/ | memtrace-report rank0.bin rank1.bin ...   a job's ranks read as one
//   memtrace-report diff a.bin b.bin        two traces compared at their peaks
//   memtrace-report live PID|TRACE|FOLDER   a running process's trace (or a job's), followed
//
// Exit status: 0 done; 1 diff --fail-over: B's peak is over the threshold; 2 bad input or bad
// usage, with one line on stderr saying why.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tools/common/cli.h"
#include "tools/common/output.h"
#include "tools/common/progress.h"
#include "tools/common/tool_main.h"
#include "tools/report/command_line.h"
#include "tools/report/live_view.h"
#include "tracer/common/byte_format.h"
#include "tracer/reader/compact.h"
#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/diff.h"
#include "tracer/report/export_perfetto.h"
#include "tracer/report/export_pytorch.h"
#include "tracer/report/flame.h"
#include "tracer/report/job.h"
#include "tracer/report/locations.h"
#include "tracer/report/parse_command.h"
#include "tracer/report/prediction.h"
#include "tracer/report/render.h"
#include "tracer/report/render_flame.h"
#include "tracer/report/render_html.h"
#include "tracer/report/render_job.h"
#include "tracer/report/symbolizer.h"
#include "tracer/report/timeline.h"

namespace {

using namespace memtrace::report;
using memtrace::tools::UsageError;

// Whether B's peak is over A's by more than the threshold.
bool overThreshold(const TraceDiff& diff, const Threshold& threshold) {
  uint64_t a = diff.a.summary.peak_bytes, b = diff.b.summary.peak_bytes;
  if (b <= a) return false;
  if (threshold.percent) {
    std::optional<double> percent = peakChangePercent(diff);
    return !percent || *percent > *threshold.percent;  // from 0 B, any growth is over
  }
  return b - a > threshold.bytes;
}

JobOptions jobOptions(const Options& options) {
  JobOptions job;
  job.groupings = {options.group_by};
  job.frame = options.frame;
  job.device = options.device;
  job.until = options.until;
  return job;
}

int runJob(const Options& options) {
  std::vector<std::string> files = traceFiles(options.traces);
  if (files.size() == 1)
    spdlog::info("{}: one trace; a job's report needs its ranks' traces", options.traces.front());
  JobOptions job_options = jobOptions(options);
  job_options.timelines = options.command == Command::kHtml;
  if (options.points) job_options.timeline_buckets = options.points;
  JobReport job = readJob(files, job_options);
  std::ostringstream out;
  if (options.command == Command::kHtml)
    renderJobHtml(out, job, options.top);
  else if (options.format == Format::kJson)
    renderJobJson(out, job, options.top);
  else if (options.format == Format::kCsv)
    renderJobCsv(out, job, options.top);
  else
    renderJobText(out, job, options.top);
  memtrace::tools::writeOutput(options.output, out.str());
  return 0;
}

int runDiff(const Options& options) {
  JobOptions diff_options = jobOptions(options);
  diff_options.groupings =
      options.group_by_given ? std::vector<GroupBy>{options.group_by} : kDiffGroupings;
  TraceDiff diff = diffTraces(options.traces[0], options.traces[1], diff_options);
  DiffVerdict verdict;
  if (!options.fail_over.empty()) {
    verdict.threshold = options.fail_over;
    verdict.over = overThreshold(diff, *parseThreshold(options.fail_over));
  }
  std::ostringstream out;
  if (options.format == Format::kJson)
    renderDiffJson(out, diff, options.top, verdict);
  else
    renderDiffText(out, diff, options.top, verdict);
  memtrace::tools::writeOutput(options.output, out.str());
  return verdict.over ? 1 : 0;
}

int run(const Options& options) {
  if (options.job) return runJob(options);
  if (options.command == Command::kLive) {
    memtrace::tools::LiveOptions live;
    live.targets = options.traces;
    live.group_by = options.group_by;
    live.frame = options.frame;
    live.top = options.top;
    live.interval = options.interval;
    live.once = options.once;
    live.json = options.format == Format::kJson;
    return memtrace::tools::runLive(live);
  }
  if (options.command == Command::kDiff) return runDiff(options);
  if (options.command == Command::kCompact) {
    memtrace::reader::Compacted compacted = memtrace::reader::compactTrace(options.trace);
    memtrace::tools::writeOutput(options.output, compacted.file);
    uint64_t events = compacted.events ? compacted.events : 1;
    std::fprintf(stderr,
                 "%s: %llu events; %llu bytes in %llu chunks -> %zu bytes in %llu chunks "
                 "(%.2f -> %.2f bytes an event)\n",
                 options.output.c_str(), static_cast<unsigned long long>(compacted.events),
                 static_cast<unsigned long long>(compacted.bytes_in),
                 static_cast<unsigned long long>(compacted.chunks_in), compacted.file.size(),
                 static_cast<unsigned long long>(compacted.chunks_out),
                 static_cast<double>(compacted.bytes_in) / static_cast<double>(events),
                 static_cast<double>(compacted.file.size()) / static_cast<double>(events));
    return 0;
  }
  memtrace::reader::TraceReader trace(options.trace);
  std::ostringstream out;
  if (options.command == Command::kParse) {
    memtrace::tools::Progress progress("memtrace-report", options.trace, trace.fileSize());
    progress.pass("reading the records");
    printRecords(trace, out);
    progress.done();
    memtrace::tools::writeOutput(options.output, out.str());
    return 0;
  }
  // Read before the trace, so that a bad estimate fails at once.
  std::optional<Prediction> prediction;
  if (!options.estimate.empty()) prediction = loadPrediction(options.estimate);

  memtrace::tools::Progress progress("memtrace-report", options.trace, trace.fileSize());
  Report report;
  report.trace_path = options.trace;
  report.top = options.top;
  progress.pass("finding the peak");
  report.summary = summarize(trace, options.device, options.until);
  // What a flight recorder's file cannot show (Note [The flight recorder's file]).
  if (options.until == Until::kLastStop)
    refuseWithoutFullTrace(options.trace, report.summary, "--until stop");
  if (options.command == Command::kExportPerfetto)
    refuseWithoutFullTrace(options.trace, report.summary, "export perfetto (the full timeline)");
  if (options.device != kAllDevices && report.summary.flight.dropped &&
      report.summary.devices.size() > 1)
    refuseWithoutFullTrace(options.trace, report.summary,
                           "one device's own peak in a trace of several devices");
  refuseOutsideFlightWindow(options.trace, report.summary, options.point);
  if (trace.cutOffset())
    spdlog::warn(
        "{}: ends in a partial chunk at byte {} (the process was killed?); read up to there",
        options.trace, trace.cutOffset());
  if (options.command == Command::kExportPerfetto || options.command == Command::kExportPytorch) {
    if (options.command == Command::kExportPerfetto) {
      progress.pass("writing the counters");
      exportPerfetto(out, trace, report.summary, options.points ? options.points : 100000);
    } else {
      progress.pass("writing the snapshot");
      exportPytorchSnapshot(out, trace, report.summary, options.point);
    }
    progress.done();
    memtrace::tools::writeOutput(options.output, out.str());
    return 0;
  }
  // Before the replay to the point: each leaves the tables as its own pass did, and the
  // point's are the ones the table and the views below read.
  report.device_reads = deviceReadRows(trace, report.summary, options.frame);
  report.simulated_sizes = simulatedSizeRows(trace, report.summary, options.frame);
  report.assumed_values = assumedValueRows(trace, report.summary, options.frame);
  if (report.summary.first_failure) {
    progress.pass("replaying to the out-of-memory");
    report.oom = analyzeOom(trace, report.summary, options.frame);
  }
  progress.pass("replaying to the " + pointName(options.point));
  report.live_set = liveSetAt(trace, report.summary, options.point);
  Locator locator(trace.tables(), options.group_by, options.frame);
  report.table = locator.group(report.live_set);
  report.dominant_line =
      breakDownDominantLine(locator, trace.tables(), report.live_set, report.table);
  if ((options.command == Command::kReport || options.command == Command::kHtml) &&
      report.summary.training) {
    progress.pass("resolving the training categories");  // the page's module table too
    resolveTraining(trace, report.summary);
  }
  if (options.command == Command::kReport) {
    progress.done();
    report.prediction = prediction ? &*prediction : nullptr;
    if (options.format == Format::kJson)
      renderJson(out, report);
    else if (options.format == Format::kCsv)
      renderCsv(out, report);
    else
      renderText(out, report);
    memtrace::tools::writeOutput(options.output, out.str());
    return 0;
  }
  // The tables now hold every stack and module up to the point: what the flame graph of
  // the live set needs.
  Symbolizer symbolizer(trace.tables());
  FlameGraph flame = buildFlameGraph(trace.tables(), report.live_set, locator, symbolizer);
  if (options.command == Command::kFlamegraph) {
    progress.done();
    if (options.format == Format::kFolded)
      renderFolded(out, flame);
    else
      renderFlameSvg(
          out, flame,
          fmt::format("memtrace: live at {} ({}), {}{}", pointName(options.point),
                      memtrace::formatBytes(report.live_set.bytes), options.trace,
                      // Note [Saying a run was simulated], short: the title is one line.
                      report.summary.simulated ? " — " + simulatedLabel(*report.summary.simulated) +
                                                     " (no kernel ran, time not simulated)"
                                               : ""));
    memtrace::tools::writeOutput(options.output, out.str());
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
  memtrace::tools::writeOutput(options.output, out.str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A trace or estimate the tool cannot read is bad input too: every failure exits 2.
  memtrace::tools::ErrorPolicy policy;
  policy.user_error_suffix = " (memtrace-report --help shows the usage)";
  return memtrace::tools::toolMain<UsageError>("memtrace-report", policy, [&] {
    std::variant<Options, int> parsed = parseCommandLine(argc, argv);
    if (const int* status = std::get_if<int>(&parsed)) return *status;
    const Options& options = std::get<Options>(parsed);
    // Before anything is read: a refused command writes nothing and costs nothing.
    memtrace::tools::refuseToOverwrite(options.output, options.force);
    return run(options);
  });
}
