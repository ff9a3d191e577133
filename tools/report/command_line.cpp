#include "tools/report/command_line.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>
#include <utility>

#include "tools/common/cli.h"
#include "tracer/common/byte_format.h"

namespace memtrace::report {

namespace {

using memtrace::tools::UsageError;

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
       memtrace-report compact TRACE -o SMALLER.bin
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

// The commands as written on the command line (the first word; `export` takes a second).
const std::vector<std::pair<std::string, Command>> kCommandWords = {
    {"report", Command::kReport},
    {"diff", Command::kDiff},
    {"parse", Command::kParse},
    {"html", Command::kHtml},
    {"flamegraph", Command::kFlamegraph},
    {"export", Command::kExportPerfetto},
    {"live", Command::kLive},
    {"compact", Command::kCompact}};
constexpr const char* kCommands = "report, diff, parse, html, flamegraph, export, live, compact";

bool isCommand(const std::string& word) {
  for (const auto& [name, command] : kCommandWords)
    if (word == name) return true;
  return false;
}

bool isFolder(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::optional<uint64_t> parseUnsigned(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end || errno || text[0] == '-') return std::nullopt;
  return value;
}

std::optional<Point> parsePoint(const std::string& text) {
  Point point;
  if (text == "peak") {
    point.kind = Point::Kind::kPeak;
  } else if (text == "end") {
    point.kind = Point::Kind::kEnd;
  } else if (text == "oom") {
    point.kind = Point::Kind::kOom;
  } else {
    char* end = nullptr;
    double seconds = std::strtod(text.c_str(), &end);
    if (*end || !(seconds >= 0) || seconds > 1e9) return std::nullopt;
    point.kind = Point::Kind::kTime;
    point.time_ns = static_cast<uint64_t>(seconds * 1e9);
  }
  return point;
}

// --- CLI11 transforms whose refusals are the tool's own lines ----------------------------------
// Each takes an option's text and turns it into what the option's variable reads (a name into
// its enum's value, a number into its canonical digits), or returns why it refuses the text.
// CommandLine::refusing() runs them as CLI11 transforms, and keeps a refusal until the rules
// between options are checked, so that with several mistakes the one said is the one the tool
// has always said first (Refusal's order). Each has no description of its own: the help shows
// the option's type name, as written below.
using Transform = std::function<std::string(std::string&)>;

// Names to values (CLI::CheckedTransformer), refused as "--frame takes innermost or user, not
// 'outer'".
template <typename T>
Transform namedValues(std::vector<std::pair<std::string, T>> names, std::string refusal) {
  CLI::CheckedTransformer checked(names);
  return [checked, names, refusal](std::string& value) -> std::string {
    // Only the names: CheckedTransformer alone also takes the values they map to ("0").
    for (const auto& [name, mapped] : names) {
      if (value == name) return checked(value);
    }
    return fmt::format("{}, not '{}'", refusal, value);
  };
}

// A non-negative integer no larger than `most`; `beyond(value)` says why a larger one is
// refused.
Transform unsignedValue(const std::string& option, uint64_t most = UINT64_MAX,
                        std::function<std::string(uint64_t)> beyond = nullptr) {
  return [option, most, beyond](std::string& value) -> std::string {
    std::optional<uint64_t> parsed = parseUnsigned(value);
    if (!parsed) return option + " must be a non-negative integer, not '" + value + "'";
    if (*parsed > most) return beyond(*parsed);
    value = std::to_string(*parsed);
    return {};
  };
}

Transform checkedBy(std::function<bool(const std::string&)> accepts, std::string refusal) {
  return [accepts, refusal](std::string& value) -> std::string {
    return accepts(value) ? std::string() : fmt::format("{}, not '{}'", refusal, value);
  };
}

// The options whose values are checked, in the order the tool says their refusals.
enum class Refusal {
  kGroupBy,
  kFrame,
  kTop,
  kAt,
  kDevice,
  kUntil,
  kLanes,
  kPoints,
  kFormat,
  kFailOver,
  kInterval  // after live's rules between options (finish())
};

const std::vector<std::pair<std::string, GroupBy>> kGroupings = {
    {"line", GroupBy::kLine},   {"function", GroupBy::kFunction}, {"file", GroupBy::kFile},
    {"stack", GroupBy::kStack}, {"module", GroupBy::kModule},     {"category", GroupBy::kCategory}};

// The subcommands and their options. Each takes only the options it uses: an option of
// another command is named as such (finish()).
class CommandLine {
 public:
  CommandLine() : app_("", "memtrace-report") {
    memtrace::tools::setUpApp(app_, "memtrace-report", kUsage);
    app_.description(kDescription);
    app_.footer(kExamples);
    app_.require_subcommand(0, 1);
    CLI::App* report = addCommand(app_, Command::kReport, "report",
                                  "the peak, and what was live there by location", "report");
    addLiveSet(report, true);
    addFormat(report, "text (default), json or csv", "text|json|csv",
              {{"text", Format::kText}, {"json", Format::kJson}, {"csv", Format::kCsv}},
              "--format takes text, json or csv");
    addEstimate(report, "its predicted peak beside the measured one, and a Predicted column");
    addOutput(report);
    report->footer(R"(
examples:
  memtrace-report trace.bin --top 10 --group-by function
  memtrace-report report trace.bin --format json -o report.json
  memtrace-report trace.bin --until stop --frame user)");

    CLI::App* diff = addCommand(
        app_, Command::kDiff, "diff",
        "two traces (two runs, or two ranks) compared at their peaks: the peaks, and by line, "
        "function, module and category what grew, shrank, appeared and went",
        "diff");
    addGroupBy(diff, "compare by this grouping only (line, function, module and category)");
    addFrame(diff,
             "the Python frame that stands for an allocation: the innermost in your own code, "
             "or the innermost (user)");
    addTop(diff, "changed rows to show per grouping; 0 shows all (20)");
    addDevice(diff);
    addUntil(diff);
    addFormat(diff, "text (default) or json", "text|json",
              {{"text", Format::kText}, {"json", Format::kJson}},
              "--format takes text or json for diff");
    diff->add_option("--fail-over", options_.fail_over,
                     "exit with status 1 when B's peak is over A's by more than this: a share "
                     "of A's peak (5%) or a size (100MiB)")
        ->type_name("PERCENT%|SIZE")
        ->transform(refusing(
            Refusal::kFailOver, "",
            checkedBy([](const std::string& text) { return parseThreshold(text).has_value(); },
                      "--fail-over takes a share of A's peak (5%) or a size (100MiB)")));
    addOutput(diff);
    diff->footer(
        "\nexamples:\n  memtrace-report diff yesterday.bin today.bin\n"
        "  memtrace-report diff base.bin new.bin --fail-over 5% --format json -o diff.json\n"
        "  memtrace-report diff job/rank0.bin job/rank1.bin --group-by line");

    CLI::App* parse = addCommand(app_, Command::kParse, "parse",
                                 "every record of the trace as a line of text", "parse");
    addOutput(parse);
    parse->footer("\nexample:\n  memtrace-report parse trace.bin | grep failed-alloc");

    CLI::App* compact = addCommand(
        app_, Command::kCompact, "compact",
        "the trace rewritten smaller: its records unchanged, in chunks compressed with zlib "
        "(format version 9; every command reads it as it read the trace)",
        "compact");
    addOutput(compact);
    compact->footer("\nexample:\n  memtrace-report compact trace.bin -o trace.small.bin");

    CLI::App* html = addCommand(
        app_, Command::kHtml, "html",
        "one self-contained HTML file (no network needed): the live bytes over time, stacked "
        "by the top locations, with the peak and the marks; a flame graph of what was live at "
        "--at; the summary and the table of the text report",
        "html");
    addLiveSet(html, true);
    addEstimate(html, "also draws the predicted peak on the timeline");
    html->add_option("--lanes", options_.lanes,
                     "locations stacked on the timeline; the rest are \"other\" (10)")
        ->type_name("N")
        ->transform(refusing(Refusal::kLanes, "0", unsignedValue("--lanes")));
    addPoints(html,
              "time buckets of the timeline, each keeping its lowest, highest and last value "
              "(2000)");
    addOutput(html);
    html->footer(
        "\nexamples:\n  memtrace-report html trace.bin -o report.html\n"
        "  memtrace-report html trace.bin --estimate est.json --at end -f -o report.html");

    CLI::App* flamegraph = addCommand(
        app_, Command::kFlamegraph, "flamegraph",
        "what was live at --at by full stack (Python frames, then native frames): an SVG "
        "icicle, or folded stacks for flamegraph.pl and speedscope",
        "flamegraph");
    addLiveSet(flamegraph, false);
    addFormat(flamegraph, "svg (default) or folded", "svg|folded",
              {{"svg", Format::kSvg}, {"folded", Format::kFolded}},
              "--format takes svg or folded for flamegraph");
    addOutput(flamegraph);
    flamegraph->footer(
        "\nexamples:\n  memtrace-report flamegraph trace.bin -o live.svg\n"
        "  memtrace-report flamegraph trace.bin --at end --format folded | flamegraph.pl");

    CLI::App* live = addCommand(
        app_, Command::kLive, "live",
        "follow a running process's trace in the terminal, as it is written: the bytes live now "
        "and at the peak so far, by line and by nn.Module (keys: q quit, l by line, m by "
        "module, < > another rank). TRACE is a PID (its trace and its children's: every rank "
        "of a torchrun job), a trace file or a job's folder; nothing is asked of the process",
        "live");
    live->add_option("--interval", options_.interval, "seconds between refreshes (1)")
        ->type_name("SECONDS")
        ->transform(refusing(Refusal::kInterval, "1",
                             checkedBy(
                                 [](const std::string& text) {
                                   char* end = nullptr;
                                   double seconds = std::strtod(text.c_str(), &end);
                                   return !text.empty() && !*end && seconds >= 0.05 &&
                                          seconds <= 3600;
                                 },
                                 "--interval takes seconds from 0.05 to 3600")));
    // Any grouping CLI11 reads; live takes line, function or file (finish()).
    addGroupBy(live, "the rows' grouping besides nn.Module (line)");
    addFrame(live,
             "the Python frame that stands for an allocation: the innermost in your own code, "
             "or the innermost (user)");
    addTop(live, "rows to show; 0: what the terminal holds (0; 20 with --once)");
    live->add_flag("--once", options_.once,
                   "print one frame as plain text (or JSON, --format json) and exit");
    addFormat(live, "with --once: text (default) or json", "text|json",
              {{"text", Format::kText}, {"json", Format::kJson}},
              "--format takes text or json for live");
    live->footer(
        "\nexamples:\n  memtrace-report live 1234                 the process and its children\n"
        "  memtrace-report live memtrace-job-42/      every rank of a local job\n"
        "  memtrace-report live trace.bin --once --format json");

    export_ = app_.add_subcommand("export",
                                  "perfetto: Chrome trace event JSON; pytorch: "
                                  "PyTorch's memory snapshot pickle");
    export_->allow_extras();  // `export svg`: named by finish()
    CLI::App* perfetto = addCommand(
        *export_, Command::kExportPerfetto, "perfetto",
        "Chrome trace event JSON for ui.perfetto.dev and chrome://tracing: a counter of live "
        "bytes per device, marks, peaks and failed allocations as instant events, phases as "
        "slices",
        "export perfetto");
    addDevice(perfetto);
    addUntil(perfetto);
    addPoints(perfetto,
              "buckets of the counter, each keeping its lowest, highest and last value (100000)");
    addOutput(perfetto);
    perfetto->footer("\nexample:\n  memtrace-report export perfetto trace.bin -o trace.json");
    CLI::App* pytorch = addCommand(
        *export_, Command::kExportPytorch, "pytorch",
        "PyTorch's memory snapshot pickle for pytorch.org/memory_viz and "
        "torch.cuda._memory_viz: the events up to --at (the end by default) and what was "
        "live there",
        "export pytorch");
    addPoint(pytorch, "(end)");
    addDevice(pytorch);
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
    return finish(command_given ? std::string() : args.size() > 1 ? args[1] : std::string());
  }

 private:
  struct Leaf {
    CLI::App* app;
    Command command;
    std::string label;  // as messages name it: "export perfetto"
  };

  CLI::App* addCommand(CLI::App& parent, Command command, const char* name, const char* description,
                       const char* label) {
    CLI::App* app = parent.add_subcommand(name, description);
    // Options the command does not take stay behind, for finish() to name.
    app->allow_extras();
    app->add_option("TRACE", options_.trace, "the trace file libmemtrace.so wrote")->type_name("");
    leaves_.push_back({app, command, label});
    return app;
  }

  void addPoint(CLI::App* command, const char* default_point) {
    command
        ->add_option("--at", at_,
                     std::string("where to look: the peak, the end, the first failed "
                                 "allocation, or SECONDS after the start ") +
                         default_point)
        ->type_name("peak|end|oom|SECONDS")
        ->transform(
            refusing(Refusal::kAt, "",
                     checkedBy([](const std::string& text) { return parsePoint(text).has_value(); },
                               "--at takes peak, end, oom or a number of seconds")));
  }

  void addUntil(CLI::App* command) {
    command
        ->add_option("--until", options_.until,
                     "how far to read: the whole trace, or up to where tracing was last "
                     "stopped (what was traced, without what the program allocated "
                     "afterwards) (end)")
        ->type_name("end|stop")
        ->transform(refusing(Refusal::kUntil, "end",
                             namedValues<Until>({{"end", Until::kEnd}, {"stop", Until::kLastStop}},
                                                "--until takes end or stop")));
  }

  void addGroupBy(CLI::App* command, const char* description) {
    group_by_options_.push_back(
        command->add_option("--group-by", options_.group_by, description)
            ->type_name("line|function|file|stack|module|category")
            ->transform(refusing(
                Refusal::kGroupBy, "line",
                namedValues(kGroupings,
                            "--group-by takes line, function, file, stack, module or category"))));
  }

  void addFrame(CLI::App* command, const char* description) {
    command->add_option("--frame", options_.frame, description)
        ->type_name("innermost|user")
        ->transform(refusing(Refusal::kFrame, "innermost",
                             namedValues<FramePolicy>({{"innermost", FramePolicy::kInnermost},
                                                       {"user", FramePolicy::kUser}},
                                                      "--frame takes innermost or user")));
  }

  void addTop(CLI::App* command, const char* description) {
    top_options_.push_back(command->add_option("--top", options_.top, description)
                               ->type_name("N")
                               ->transform(refusing(Refusal::kTop, "0", unsignedValue("--top"))));
  }

  void addDevice(CLI::App* command) {
    command->add_option("--device", options_.device, "only device N's memory (all devices)")
        ->type_name("N")
        // Past an int it used to wrap (2^32 read as device 0); the summary says whether a
        // smaller index is in the trace.
        ->transform(refusing(Refusal::kDevice, "0",
                             unsignedValue("--device", INT32_MAX, [](uint64_t device) {
                               return fmt::format("--device takes a device index, not {}", device);
                             })));
  }

  void addPoints(CLI::App* command, const char* description) {
    command->add_option("--points", options_.points, description)
        ->type_name("N")
        ->transform(refusing(Refusal::kPoints, "1", [](std::string& value) -> std::string {
          std::string error = unsignedValue("--points")(value);
          if (!error.empty()) return error;
          if (value == "0" || value.size() > 8 || std::stoull(value) > 10000000)
            return "--points takes a number from 1 to 10000000";
          return {};
        }));
  }

  void addFormat(CLI::App* command, const char* description, const char* names,
                 std::vector<std::pair<std::string, Format>> formats, const char* refusal) {
    format_options_.push_back(command->add_option("--format", options_.format, description)
                                  ->type_name(names)
                                  ->transform(refusing(Refusal::kFormat, formats.front().first,
                                                       namedValues(formats, refusal))));
  }

  // `transform` as a CLI11 transform whose refusal waits for finish(): the value becomes
  // `placeholder` (one the option takes) meanwhile, or stays as given when it is empty (an
  // option read as text).
  CLI::Validator refusing(Refusal rank, std::string placeholder, Transform transform) {
    return CLI::Validator(
        [this, rank, placeholder, transform](std::string& value) -> std::string {
          // Every value given is checked, the last one decides (options keep their last value).
          std::string error = transform(value);
          if (error.empty()) {
            refusals_.erase(rank);
            return {};
          }
          refusals_[rank] = std::move(error);
          if (placeholder.empty()) return {};  // a text option: kept as given
          value = placeholder;
          return transform(value);
        },
        "");
  }

  // Throws the first refusal up to `last` in Refusal's order, if any.
  void refuseUpTo(Refusal last) {
    if (!refusals_.empty() && refusals_.begin()->first <= last)
      throw UsageError(refusals_.begin()->second);
  }

  // What was live, where, and how it is grouped: the options of the report, html and
  // flamegraph.
  void addLiveSet(CLI::App* command, bool with_top) {
    addGroupBy(command,
               "how to group the live allocations (line); module: by the nn.Module that was "
               "running (Python package); category: parameter, gradient, optimizer_state, ... "
               "(training, start_tracing(model=...))");
    addFrame(command,
             "the Python frame that stands for an allocation: the innermost in your own code "
             "(outside the standard library, site-packages and torch), or the innermost: the "
             "allocating frame (user)");
    if (with_top) addTop(command, "rows to show; 0 shows all (20)");
    addPoint(command, "(peak)");
    addDevice(command);
    addUntil(command);
  }

  void addEstimate(CLI::App* command, const char* what) {
    command
        ->add_option("--estimate", options_.estimate,
                     std::string("memtrace-estimate's JSON: ") + what)
        ->type_name("FILE");
  }

  void addOutput(CLI::App* command) {
    command->add_option("-o,--output", options_.output, "write there instead of standard output")
        ->type_name("FILE");
    command->add_flag("-f,--force", options_.force, "overwrite the output file if it exists");
  }

  // The rules between options and arguments, once CLI11 has read each value. `first_word`:
  // the first argument, when the command was not given (report was assumed).
  Options finish(const std::string& first_word) {
    const Leaf* active = nullptr;
    for (const Leaf& leaf : leaves_)
      if (leaf.app->parsed()) active = &leaf;
    if (!active) {
      std::vector<std::string> extra = export_->remaining();
      throw UsageError("export takes perfetto or pytorch, then the trace" +
                       (extra.empty() ? std::string() : ", not '" + extra.front() + "'"));
    }
    Options& options = options_;
    options.command = active->command;
    const char* word = commandWord(options.command);
    if (std::string unknown = memtrace::tools::firstUnknownOption(*active->app); !unknown.empty()) {
      std::vector<std::string> takers;
      for (const Leaf& leaf : leaves_)
        if (leaf.app->get_option_no_throw(unknown)) takers.push_back(leaf.label);
      if (takers.empty()) throw UsageError("unknown option '" + unknown + "'");
      if (takers.front() == "report") takers.front() = "the report";
      std::string list = takers.back();
      if (takers.size() > 1) {
        takers.pop_back();
        list = fmt::format("{} and {}", fmt::join(takers, ", "), list);
      }
      throw UsageError(fmt::format("{} is for {}, not {}", unknown, list, active->label));
    }
    if (options.trace.empty()) throw UsageError("no trace file given");
    options.traces.push_back(options.trace);
    for (const std::string& extra : active->app->remaining())
      if (extra.empty() || extra[0] != '-' || extra == "-") options.traces.push_back(extra);
    bool reads_a_job = options.command == Command::kReport || options.command == Command::kHtml;
    // live follows PIDs, trace files and folders, as many as given (runLive says which
    // it cannot find).
    bool live = options.command == Command::kLive;
    if (options.traces.size() > 1 && !live) {
      // `memtrace-report exprot trace.bin`: a misspelt command, not two trace files.
      if (!first_word.empty() && options.trace == first_word && access(first_word.c_str(), F_OK))
        throw UsageError(fmt::format("unknown command '{}' (commands: {})", first_word, kCommands));
      if (!reads_a_job && options.command != Command::kDiff)
        throw UsageError("more than one trace file given ('" + options.trace + "', '" +
                         options.traces[1] + "')");
    }
    if (options.command == Command::kCompact && options.output.empty())
      throw UsageError("compact writes a file: give it with -o FILE");
    if (options.command == Command::kDiff && options.traces.size() != 2)
      throw UsageError(
          fmt::format("diff compares two traces, A and B, not {}", options.traces.size()));
    options.job = reads_a_job && (options.traces.size() > 1 || isFolder(options.trace));
    if (!options.job && options.command != Command::kDiff && !live && isFolder(options.trace))
      throw UsageError(options.trace + " is a folder: " + word + " reads one trace");
    if (options.job && !options.estimate.empty())
      throw UsageError("--estimate is for one trace, not a job's (estimate each rank's trace)");
    if (options.job && !at_.empty() && at_ != "peak")
      throw UsageError("a job is read at each rank's peak: --at " + at_ + " is for one trace");
    for (const CLI::Option* option : group_by_options_)
      options.group_by_given = options.group_by_given || option->count() > 0;
    refuseUpTo(Refusal::kGroupBy);
    if (options.group_by == GroupBy::kCategory && !reads_a_job && options.command != Command::kDiff)
      throw UsageError(std::string("--group-by category is for the report and the HTML page, "
                                   "not ") +
                       word);
    refuseUpTo(Refusal::kFailOver);
    if (!at_.empty()) {
      options.point_given = true;
      options.point = *parsePoint(at_);
    } else if (options.command == Command::kExportPytorch) {
      options.point.kind = Point::Kind::kEnd;  // the whole history, as memory_viz shows it
    }
    bool format_given = false;
    for (const CLI::Option* option : format_options_)
      format_given = format_given || option->count();
    if (!format_given && options.command == Command::kFlamegraph) options.format = Format::kSvg;
    if (live) {
      if (options.format == Format::kJson && !options.once)
        throw UsageError("live --format json prints one frame: give --once too");
      if (options.group_by != GroupBy::kLine && options.group_by != GroupBy::kFunction &&
          options.group_by != GroupBy::kFile)
        throw UsageError("live groups by line, function or file (and by nn.Module, key m)");
      refuseUpTo(Refusal::kInterval);
      // Without --top the view fills the terminal; a frame printed once shows the report's 20.
      bool top_given = false;
      for (const CLI::Option* option : top_options_) top_given = top_given || option->count();
      if (!top_given && !options.once) options.top = 0;
    }
    return options;
  }

  CLI::App app_;
  CLI::App* export_ = nullptr;
  Options options_;
  std::string at_;  // --at as given: a job names it when it refuses it
  std::vector<Leaf> leaves_;
  std::vector<CLI::Option*> group_by_options_, format_options_, top_options_;
  std::map<Refusal, std::string> refusals_;  // the values refused, said by finish()
};

}  // namespace

const char* commandWord(Command command) {
  switch (command) {
    case Command::kReport:
      return "report";
    case Command::kDiff:
      return "diff";
    case Command::kParse:
      return "parse";
    case Command::kHtml:
      return "html";
    case Command::kFlamegraph:
      return "flamegraph";
    case Command::kExportPerfetto:
    case Command::kExportPytorch:
      return "export";
    case Command::kLive:
      return "live";
    case Command::kCompact:
      return "compact";
  }
  return "report";
}

std::optional<Threshold> parseThreshold(const std::string& text) {
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
  return std::nullopt;
}

std::variant<Options, int> parseCommandLine(int argc, char** argv) {
  CommandLine command_line;
  return command_line.parse(argc, argv);
}

}  // namespace memtrace::report
