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
#include "tools/report/live_view.h"
#include "tracer/common/byte_format.h"
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

constexpr const char* kUsage =
    R"(usage: memtrace-report [report] TRACE [--estimate est.json] [options]
       memtrace-report [report] FOLDER | TRACE TRACE... [options]   a job's ranks as one
       memtrace-report diff A B [--fail-over 5%|SIZE] [--format text|json] [options]
       memtrace-report parse TRACE [-o FILE]
       memtrace-report html TRACE | FOLDER | TRACE TRACE... [-o report.html] [options]
       memtrace-report flamegraph TRACE [--format svg|folded] [-o FILE] [--at ...] [--device N]
       memtrace-report export perfetto TRACE [-o trace.json] [--device N] [--points N]
       memtrace-report export pytorch TRACE [-o snapshot.pickle] [--at ...] [--device N]
       memtrace-report live PID | TRACE | FOLDER [--interval S] [--group-by ...] [--once]
       memtrace-report COMMAND --help         the options of COMMAND)";

constexpr const char* kDescription =
    R"(Reads a trace written by libmemtrace.so. Without a command (or with `report`) it prints
the peak of live CUDA memory and what was live there, grouped by source location (Mem,
Cumulative Mem, Median, Count, Location), largest first. Given a folder or several traces
(the ranks of a torch.distributed job: memtrace run torchrun ...), it reads them as one job:
every rank's peak, which rank peaks and by how much over the median rank, and that rank's
table beside the others' figures for the same rows.
Exit status: 0 done; 1 diff --fail-over: B's peak went over the threshold; 2 bad input or bad
usage, with one line on stderr saying why.
)";

constexpr const char* kExamples = R"(
examples:
  memtrace-report trace.bin                            the peak and what was live there
  memtrace-report trace.bin --group-by module --top 10
  memtrace-report trace.bin --at oom --frame user      at the first failed allocation
  memtrace-report trace.bin --estimate est.json        the prediction beside the measurement
  memtrace-report html trace.bin -o report.html        the self-contained HTML page
  memtrace-report memtrace-job-1234/                   every rank of a job, as one
  memtrace-report diff yesterday.bin today.bin --fail-over 5%
  memtrace-report flamegraph trace.bin --format folded -o live.folded
  memtrace-report export perfetto trace.bin -o trace.json   (ui.perfetto.dev)
  memtrace-report export pytorch trace.bin -o snapshot.pickle   (pytorch.org/memory_viz)
  memtrace-report live 1234                            follow process 1234 (and its children)

An output file is never overwritten without -f/--force.)";

using memtrace::tools::UsageError;

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
  bool force = false;
  std::string estimate;
  size_t lanes = 10;
  size_t points = 0;  // 0: the command's default
  bool point_given = false;
  std::vector<std::string> traces;  // a job's (report, html) or a diff's two
  bool job = false;                 // report or html of a folder or several traces
  std::string fail_over;            // diff: as given ("5%", "100MiB")
  bool group_by_given = false;
  double interval = 1.0;  // live
  bool once = false;      // live
};

// The command line as CLI11 leaves it: text, turned into Options (with the messages the
// tool has always given) by toOptions().
struct Arguments {
  std::string trace;
  std::string group_by, frame, top, at, device, until, format, estimate, output, lanes, points;
  std::string fail_over;
  std::string interval;
  bool once = false;
  bool force = false;
};

uint64_t parseUnsigned(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end || errno || text[0] == '-')
    throw UsageError(std::string(what) + " must be a non-negative integer, not '" + text + "'");
  return value;
}

bool isFolder(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// diff --fail-over: a share of A's peak ("5%") or a size ("100MiB").
struct Threshold {
  std::optional<double> percent;
  uint64_t bytes = 0;
};

Threshold parseThreshold(const std::string& text) {
  Threshold threshold;
  if (!text.empty() && text.back() == '%') {
    char* end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() + text.size() - 1 && value >= 0 && value <= 1e6) {
      threshold.percent = value;
      return threshold;
    }
  } else if (std::optional<int64_t> bytes = memtrace::parseByteSize(text)) {
    threshold.bytes = static_cast<uint64_t>(*bytes);
    return threshold;
  }
  throw UsageError("--fail-over takes a share of A's peak (5%) or a size (100MiB), not '" + text +
                   "'");
}

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

constexpr const char* kCommands = "report, diff, parse, html, flamegraph, export, live";

bool isCommand(const std::string& word) {
  return word == "report" || word == "diff" || word == "parse" || word == "html" ||
         word == "flamegraph" || word == "export" || word == "live";
}

// The subcommands and their options. Each takes only the options it uses: an option of
// another command is named as such (toOptions()).
class CommandLine {
 public:
  CommandLine() : app_("", "memtrace-report") {
    memtrace::tools::setUpApp(app_, "memtrace-report", kUsage);
    app_.description(kDescription);
    app_.footer(kExamples);
    app_.require_subcommand(0, 1);
    CLI::App* report =
        addCommand(app_, "report", "the peak, and what was live there by location", "report");
    addLiveSet(report, true);
    report->add_option("--format", arguments_.format, "text (default), json or csv")
        ->type_name("text|json|csv");
    addEstimate(report, "its predicted peak beside the measured one, and a Predicted column");
    addOutput(report);
    report->footer(R"(
examples:
  memtrace-report trace.bin --top 10 --group-by function
  memtrace-report report trace.bin --format json -o report.json
  memtrace-report trace.bin --until stop --frame user)");

    CLI::App* diff = addCommand(
        app_, "diff",
        "two traces (two runs, or two ranks) compared at their peaks: the peaks, and by line, "
        "function, module and category what grew, shrank, appeared and went",
        "diff");
    diff->add_option("--group-by", arguments_.group_by,
                     "compare by this grouping only (line, function, module and category)")
        ->type_name("line|function|file|stack|module|category");
    diff->add_option("--frame", arguments_.frame,
                     "the Python frame that stands for an allocation (innermost)")
        ->type_name("innermost|user");
    diff->add_option("--top", arguments_.top, "changed rows to show per grouping; 0 shows all (20)")
        ->type_name("N");
    diff->add_option("--device", arguments_.device, "only device N's memory (all devices)")
        ->type_name("N");
    addUntil(diff);
    diff->add_option("--format", arguments_.format, "text (default) or json")
        ->type_name("text|json");
    diff->add_option("--fail-over", arguments_.fail_over,
                     "exit with status 1 when B's peak is over A's by more than this: a share "
                     "of A's peak (5%) or a size (100MiB)")
        ->type_name("PERCENT%|SIZE");
    addOutput(diff);
    diff->footer(
        "\nexamples:\n  memtrace-report diff yesterday.bin today.bin\n"
        "  memtrace-report diff base.bin new.bin --fail-over 5% --format json -o diff.json\n"
        "  memtrace-report diff job/rank0.bin job/rank1.bin --group-by line");

    CLI::App* parse =
        addCommand(app_, "parse", "every record of the trace as a line of text", "parse");
    addOutput(parse);
    parse->footer("\nexample:\n  memtrace-report parse trace.bin | grep failed-alloc");

    CLI::App* html = addCommand(
        app_, "html",
        "one self-contained HTML file (no network needed): the live bytes over time, stacked "
        "by the top locations, with the peak and the marks; a flame graph of what was live at "
        "--at; the summary and the table of the text report",
        "html");
    addLiveSet(html, true);
    addEstimate(html, "also draws the predicted peak on the timeline");
    html->add_option("--lanes", arguments_.lanes,
                     "locations stacked on the timeline; the rest are \"other\" (10)")
        ->type_name("N");
    html->add_option("--points", arguments_.points,
                     "time buckets of the timeline, each keeping its lowest, highest and last "
                     "value (2000)")
        ->type_name("N");
    addOutput(html);
    html->footer(
        "\nexamples:\n  memtrace-report html trace.bin -o report.html\n"
        "  memtrace-report html trace.bin --estimate est.json --at end -f -o report.html");

    CLI::App* flamegraph = addCommand(
        app_, "flamegraph",
        "what was live at --at by full stack (Python frames, then native frames): an SVG "
        "icicle, or folded stacks for flamegraph.pl and speedscope",
        "flamegraph");
    addLiveSet(flamegraph, false);
    flamegraph->add_option("--format", arguments_.format, "svg (default) or folded")
        ->type_name("svg|folded");
    addOutput(flamegraph);
    flamegraph->footer(
        "\nexamples:\n  memtrace-report flamegraph trace.bin -o live.svg\n"
        "  memtrace-report flamegraph trace.bin --at end --format folded | flamegraph.pl");

    CLI::App* live = addCommand(
        app_, "live",
        "follow a running process's trace in the terminal, as it is written: the bytes live now "
        "and at the peak so far, by line and by nn.Module (keys: q quit, l by line, m by "
        "module, < > another rank). TRACE is a PID (its trace and its children's: every rank "
        "of a torchrun job), a trace file or a job's folder; nothing is asked of the process",
        "live");
    live->add_option("--interval", arguments_.interval, "seconds between refreshes (1)")
        ->type_name("SECONDS");
    live->add_option("--group-by", arguments_.group_by,
                     "the rows' grouping besides nn.Module (line)")
        ->type_name("line|function|file");
    live->add_option("--frame", arguments_.frame,
                     "the Python frame that stands for an allocation (innermost)")
        ->type_name("innermost|user");
    live->add_option("--top", arguments_.top, "rows to show; 0: what the terminal holds (0)")
        ->type_name("N");
    live->add_flag("--once", arguments_.once,
                   "print one frame as plain text (or JSON, --format json) and exit");
    live->add_option("--format", arguments_.format, "with --once: text (default) or json")
        ->type_name("text|json");
    live->footer(
        "\nexamples:\n  memtrace-report live 1234                 the process and its children\n"
        "  memtrace-report live memtrace-job-42/      every rank of a local job\n"
        "  memtrace-report live trace.bin --once --format json");

    export_ = app_.add_subcommand("export",
                                  "perfetto: Chrome trace event JSON; pytorch: "
                                  "PyTorch's memory snapshot pickle");
    export_->allow_extras();  // `export svg`: named by toOptions()
    CLI::App* perfetto = addCommand(
        *export_, "perfetto",
        "Chrome trace event JSON for ui.perfetto.dev and chrome://tracing: a counter of live "
        "bytes per device, marks, peaks and failed allocations as instant events, phases as "
        "slices",
        "export perfetto");
    perfetto->add_option("--device", arguments_.device, "only device N's memory (all devices)")
        ->type_name("N");
    addUntil(perfetto);
    perfetto
        ->add_option("--points", arguments_.points,
                     "buckets of the counter, each keeping its lowest, highest and last "
                     "value (100000)")
        ->type_name("N");
    addOutput(perfetto);
    perfetto->footer("\nexample:\n  memtrace-report export perfetto trace.bin -o trace.json");
    CLI::App* pytorch = addCommand(
        *export_, "pytorch",
        "PyTorch's memory snapshot pickle for pytorch.org/memory_viz and "
        "torch.cuda._memory_viz: the events up to --at (the end by default) and what was "
        "live there",
        "export pytorch");
    addPoint(pytorch, "(end)");
    pytorch->add_option("--device", arguments_.device, "only device N's memory (all devices)")
        ->type_name("N");
    addUntil(pytorch);
    addOutput(pytorch);
    pytorch->footer("\nexample:\n  memtrace-report export pytorch trace.bin -o snapshot.pickle");
    export_->footer(
        "\nexamples:\n  memtrace-report export perfetto trace.bin -o trace.json\n"
        "  memtrace-report export pytorch trace.bin -o snapshot.pickle");
  }

  // Returns the options, or the exit status of --help or --version.
  std::variant<Options, int> parse(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    // `report` is the default command: `memtrace-report trace.bin` and
    // `memtrace-report --format json trace.bin` read as `memtrace-report report ...`.
    bool command_given = !args.empty() && (isCommand(args[0]) || args[0] == "-h" ||
                                           args[0] == "--help" || args[0] == "--version");
    if (!command_given) args.insert(args.begin(), "report");
    if (std::optional<int> status = memtrace::tools::parseCommandLine(app_, args)) return *status;
    return toOptions(command_given ? std::string() : args.size() > 1 ? args[1] : std::string());
  }

 private:
  CLI::App* addCommand(CLI::App& parent, const char* name, const char* description,
                       const char* label) {
    CLI::App* command = parent.add_subcommand(name, description);
    // Options the command does not take stay behind, for toOptions() to name.
    command->allow_extras();
    command->add_option("TRACE", arguments_.trace, "the trace file libmemtrace.so wrote")
        ->type_name("");
    commands_.push_back({command, label});
    return command;
  }

  void addPoint(CLI::App* command, const char* default_point) {
    command
        ->add_option("--at", arguments_.at,
                     std::string("where to look: the peak, the end, the first failed "
                                 "allocation, or SECONDS after the start ") +
                         default_point)
        ->type_name("peak|end|oom|SECONDS");
  }

  void addUntil(CLI::App* command) {
    command
        ->add_option("--until", arguments_.until,
                     "how far to read: the whole trace, or up to where tracing was last "
                     "stopped (what was traced, without what the program allocated "
                     "afterwards) (end)")
        ->type_name("end|stop");
  }

  // What was live, where, and how it is grouped: the options of the report, html and
  // flamegraph.
  void addLiveSet(CLI::App* command, bool with_top) {
    command
        ->add_option("--group-by", arguments_.group_by,
                     "how to group the live allocations (line); module: by the nn.Module "
                     "that was running (Python package); category: parameter, gradient, "
                     "optimizer_state, ... (training, start_tracing(model=...))")
        ->type_name("line|function|file|stack|module|category");
    command
        ->add_option("--frame", arguments_.frame,
                     "the Python frame that stands for an allocation: the innermost, or the "
                     "innermost in your own code (outside the standard library, "
                     "site-packages and torch) (innermost)")
        ->type_name("innermost|user");
    if (with_top)
      command->add_option("--top", arguments_.top, "rows to show; 0 shows all (20)")
          ->type_name("N");
    addPoint(command, "(peak)");
    command->add_option("--device", arguments_.device, "only device N's memory (all devices)")
        ->type_name("N");
    addUntil(command);
  }

  void addEstimate(CLI::App* command, const char* what) {
    command
        ->add_option("--estimate", arguments_.estimate,
                     std::string("memtrace-estimate's JSON: ") + what)
        ->type_name("FILE");
  }

  void addOutput(CLI::App* command) {
    command->add_option("-o,--output", arguments_.output, "write there instead of standard output")
        ->type_name("FILE");
    command->add_flag("-f,--force", arguments_.force, "overwrite the output file if it exists");
  }

  // `first_word`: the first argument, when the command was not given (report was assumed).
  Options toOptions(const std::string& first_word) {
    Options options;
    const CLI::App* active = nullptr;
    std::string label;
    for (const auto& [command, command_label] : commands_) {
      if (command->parsed()) {
        active = command;
        label = command_label;
      }
    }
    if (!active) {
      std::vector<std::string> extra = export_->remaining();
      throw UsageError("export takes perfetto or pytorch, then the trace" +
                       (extra.empty() ? std::string() : ", not '" + extra.front() + "'"));
    }
    options.command = active->get_parent() == export_ ? "export" : active->get_name();
    if (options.command == "export") options.export_kind = active->get_name();
    if (std::string unknown = memtrace::tools::firstUnknownOption(*active); !unknown.empty()) {
      std::vector<std::string> takers;
      for (const auto& [command, command_label] : commands_)
        if (command->get_option_no_throw(unknown)) takers.push_back(command_label);
      if (takers.empty()) throw UsageError("unknown option '" + unknown + "'");
      if (takers.front() == "report") takers.front() = "the report";
      std::string list = takers.back();
      if (takers.size() > 1) {
        takers.pop_back();
        list = fmt::format("{} and {}", fmt::join(takers, ", "), list);
      }
      throw UsageError(fmt::format("{} is for {}, not {}", unknown, list, label));
    }
    const Arguments& a = arguments_;
    if (a.trace.empty()) throw UsageError("no trace file given");
    options.traces.push_back(a.trace);
    for (const std::string& extra : active->remaining())
      if (extra.empty() || extra[0] != '-' || extra == "-") options.traces.push_back(extra);
    if (options.traces.size() > 1 && options.command != "live") {
      // `memtrace-report exprot trace.bin`: a misspelt command, not two trace files.
      if (!first_word.empty() && a.trace == first_word && access(first_word.c_str(), F_OK))
        throw UsageError(fmt::format("unknown command '{}' (commands: {})", first_word, kCommands));
      if (options.command != "report" && options.command != "html" && options.command != "diff")
        throw UsageError("more than one trace file given ('" + a.trace + "', '" +
                         options.traces[1] + "')");
    }
    if (options.command == "diff" && options.traces.size() != 2)
      throw UsageError(
          fmt::format("diff compares two traces, A and B, not {}", options.traces.size()));
    options.job = (options.command == "report" || options.command == "html") &&
                  (options.traces.size() > 1 || isFolder(a.trace));
    if (!options.job && options.command != "diff" && options.command != "live" && isFolder(a.trace))
      throw UsageError(a.trace + " is a folder: " + options.command + " reads one trace");
    if (options.job && !a.estimate.empty())
      throw UsageError("--estimate is for one trace, not a job's (estimate each rank's trace)");
    if (options.job && !a.at.empty() && a.at != "peak")
      throw UsageError("a job is read at each rank's peak: --at " + a.at + " is for one trace");
    options.fail_over = a.fail_over;
    options.trace = a.trace;
    options.output = a.output;
    options.force = a.force;
    options.estimate = a.estimate;
    options.format = a.format;
    options.group_by_given = !a.group_by.empty();
    if (a.group_by.empty() || a.group_by == "line")
      options.group_by = GroupBy::kLine;
    else if (a.group_by == "function")
      options.group_by = GroupBy::kFunction;
    else if (a.group_by == "file")
      options.group_by = GroupBy::kFile;
    else if (a.group_by == "stack")
      options.group_by = GroupBy::kStack;
    else if (a.group_by == "module")
      options.group_by = GroupBy::kModule;
    else if (a.group_by == "category")
      options.group_by = GroupBy::kCategory;
    else
      throw UsageError("--group-by takes line, function, file, stack, module or category, not '" +
                       a.group_by + "'");
    if (options.group_by == GroupBy::kCategory && options.command != "report" &&
        options.command != "html" && options.command != "diff")
      throw UsageError("--group-by category is for the report and the HTML page, not " +
                       options.command);
    if (a.frame.empty() || a.frame == "innermost")
      options.frame = FramePolicy::kInnermost;
    else if (a.frame == "user")
      options.frame = FramePolicy::kUser;
    else
      throw UsageError("--frame takes innermost or user, not '" + a.frame + "'");
    if (!a.top.empty()) options.top = parseUnsigned(a.top, "--top");
    if (!a.at.empty()) {
      options.point_given = true;
      if (a.at == "peak") {
        options.point.kind = Point::Kind::kPeak;
      } else if (a.at == "end") {
        options.point.kind = Point::Kind::kEnd;
      } else if (a.at == "oom") {
        options.point.kind = Point::Kind::kOom;
      } else {
        char* end = nullptr;
        double seconds = std::strtod(a.at.c_str(), &end);
        if (*end || !(seconds >= 0) || seconds > 1e9)
          throw UsageError("--at takes peak, end, oom or a number of seconds, not '" + a.at + "'");
        options.point.kind = Point::Kind::kTime;
        options.point.time_ns = static_cast<uint64_t>(seconds * 1e9);
      }
    }
    if (!a.device.empty()) {
      uint64_t device = parseUnsigned(a.device, "--device");
      // Past an int it used to wrap (2^32 read as device 0); the summary says whether a
      // smaller index is in the trace.
      if (device > static_cast<uint64_t>(INT32_MAX))
        throw UsageError(fmt::format("--device takes a device index, not {}", device));
      options.device = static_cast<int>(device);
    }
    if (a.until.empty() || a.until == "end")
      options.until = Until::kEnd;
    else if (a.until == "stop")
      options.until = Until::kLastStop;
    else
      throw UsageError("--until takes end or stop, not '" + a.until + "'");
    if (!a.lanes.empty()) options.lanes = parseUnsigned(a.lanes, "--lanes");
    if (!a.points.empty()) {
      options.points = parseUnsigned(a.points, "--points");
      if (options.points == 0 || options.points > 10000000)
        throw UsageError("--points takes a number from 1 to 10000000");
    }
    if (options.command == "flamegraph") {
      if (options.format.empty()) options.format = "svg";
      if (options.format != "svg" && options.format != "folded")
        throw UsageError("--format takes svg or folded for flamegraph, not '" + options.format +
                         "'");
    } else if (options.command == "diff") {
      if (options.format.empty()) options.format = "text";
      if (options.format != "text" && options.format != "json")
        throw UsageError("--format takes text or json for diff, not '" + options.format + "'");
      if (!options.fail_over.empty()) parseThreshold(options.fail_over);
    } else if (options.command == "live") {
      if (options.format.empty()) options.format = "text";
      if (options.format != "text" && options.format != "json")
        throw UsageError("--format takes text or json for live, not '" + options.format + "'");
      if (options.format == "json" && !a.once)
        throw UsageError("live --format json prints one frame: give --once too");
      if (options.group_by != GroupBy::kLine && options.group_by != GroupBy::kFunction &&
          options.group_by != GroupBy::kFile)
        throw UsageError("live groups by line, function or file (and by nn.Module, key m)");
      if (!a.interval.empty()) {
        char* end = nullptr;
        options.interval = std::strtod(a.interval.c_str(), &end);
        if (*end || !(options.interval >= 0.05) || options.interval > 3600)
          throw UsageError("--interval takes seconds from 0.05 to 3600, not '" + a.interval + "'");
      }
      options.once = a.once;
    } else if (options.command == "report") {
      if (options.format.empty()) options.format = "text";
      if (options.format != "text" && options.format != "json" && options.format != "csv")
        throw UsageError("--format takes text, json or csv, not '" + options.format + "'");
    }
    if (options.command == "export" && options.export_kind == "pytorch" && !options.point_given)
      options.point.kind = Point::Kind::kEnd;  // the whole history, as memory_viz shows it
    return options;
  }

  CLI::App app_;
  CLI::App* export_ = nullptr;
  Arguments arguments_;
  std::vector<std::pair<CLI::App*, std::string>> commands_;  // the leaves, with their names
};

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
  job_options.timelines = options.command == "html";
  if (options.points) job_options.timeline_buckets = options.points;
  JobReport job = readJob(files, job_options);
  std::ostringstream out;
  if (options.command == "html")
    renderJobHtml(out, job, options.top);
  else if (options.format == "json")
    renderJobJson(out, job, options.top);
  else if (options.format == "csv")
    renderJobCsv(out, job, options.top);
  else
    renderJobText(out, job, options.top);
  memtrace::tools::writeOutput(options.output, out.str());
  return 0;
}

int runDiff(const Options& options, bool group_by_given) {
  JobOptions diff_options = jobOptions(options);
  diff_options.groupings = group_by_given ? std::vector<GroupBy>{options.group_by} : kDiffGroupings;
  TraceDiff diff = diffTraces(options.traces[0], options.traces[1], diff_options);
  DiffVerdict verdict;
  if (!options.fail_over.empty()) {
    verdict.threshold = options.fail_over;
    verdict.over = overThreshold(diff, parseThreshold(options.fail_over));
  }
  std::ostringstream out;
  if (options.format == "json")
    renderDiffJson(out, diff, options.top, verdict);
  else
    renderDiffText(out, diff, options.top, verdict);
  memtrace::tools::writeOutput(options.output, out.str());
  return verdict.over ? 1 : 0;
}

int run(const Options& options) {
  if (options.job) return runJob(options);
  if (options.command == "live") {
    memtrace::tools::LiveOptions live;
    live.targets = options.traces;
    live.group_by = options.group_by;
    live.frame = options.frame;
    live.top = options.top == 20 && !options.once ? 0 : options.top;
    live.interval = options.interval;
    live.once = options.once;
    live.json = options.format == "json";
    return memtrace::tools::runLive(live);
  }
  if (options.command == "diff") return runDiff(options, options.group_by_given);
  memtrace::reader::TraceReader trace(options.trace);
  std::ostringstream out;
  if (options.command == "parse") {
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
  if (options.command == "export" && options.export_kind == "perfetto")
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
  if (options.command == "export") {
    if (options.export_kind == "perfetto") {
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
  progress.pass("replaying to the " + pointName(options.point));
  report.live_set = liveSetAt(trace, report.summary, options.point);
  Locator locator(trace.tables(), options.group_by, options.frame);
  report.table = locator.group(report.live_set);
  if (options.command == "report") {
    if (report.summary.training) {
      progress.pass("resolving the training categories");
      resolveTraining(trace, report.summary);
    }
    progress.done();
    report.prediction = prediction ? &*prediction : nullptr;
    if (options.format == "json")
      renderJson(out, report);
    else if (options.format == "csv")
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
  if (options.command == "flamegraph") {
    progress.done();
    if (options.format == "folded")
      renderFolded(out, flame);
    else
      renderFlameSvg(out, flame,
                     fmt::format("memtrace: live at {} ({}), {}", pointName(options.point),
                                 memtrace::formatBytes(report.live_set.bytes), options.trace));
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
    CommandLine command_line;
    std::variant<Options, int> parsed = command_line.parse(argc, argv);
    if (const int* status = std::get_if<int>(&parsed)) return *status;
    const Options& options = std::get<Options>(parsed);
    // Before anything is read: a refused command writes nothing and costs nothing.
    memtrace::tools::refuseToOverwrite(options.output, options.force);
    return run(options);
  });
}
