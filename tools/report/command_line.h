// memtrace-report's command line: the commands, their options, and what they become.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tracer/report/analysis.h"
#include "tracer/report/locations.h"

namespace memtrace::report {

// What memtrace-report does.
enum class Command {
  kReport,          // the peak, and what was live there by location (the default)
  kDiff,            // two traces compared at their peaks
  kParse,           // every record as text
  kHtml,            // the self-contained page
  kFlamegraph,      // an SVG icicle or folded stacks of what was live
  kExportPerfetto,  // Chrome trace event JSON
  kExportPytorch,   // PyTorch's memory snapshot pickle
  kLive,            // a running process's trace (or a job's), followed in the terminal
  kCompact,         // the trace rewritten with compressed chunks (Note [Compressed chunks])
};

// The command as messages name it: "export" for both exports.
const char* commandWord(Command command);

// An output format; each command takes its own (--format).
enum class Format { kText, kJson, kCsv, kSvg, kFolded };

struct Options {
  Command command = Command::kReport;
  std::string trace;
  std::vector<std::string> traces;  // a job's (report, html), a diff's two, or live's targets
  bool job = false;                 // report or html of a folder or several traces
  Until until = Until::kEnd;
  GroupBy group_by = GroupBy::kLine;
  bool group_by_given = false;
  FramePolicy frame = FramePolicy::kUser;
  size_t top = 20;
  Point point;
  bool point_given = false;
  int device = kAllDevices;
  Format format = Format::kText;  // the command's default when not given (flamegraph: svg)
  std::string output;
  bool force = false;
  std::string estimate;
  size_t lanes = 10;
  size_t points = 0;      // 0: the command's default
  std::string fail_over;  // diff: as given ("5%", "100MiB"), checked
  double interval = 1.0;  // live: seconds between refreshes
  bool once = false;      // live: one frame, then exit
};

// diff --fail-over: a share of A's peak ("5%") or a size ("100MiB").
struct Threshold {
  std::optional<double> percent;
  uint64_t bytes = 0;
};

// The threshold `text` says; nothing when it says none.
std::optional<Threshold> parseThreshold(const std::string& text);

// The options of `argv`, or the exit status of --help or --version. Throws
// tools::UsageError, in one line, for a command line it refuses.
std::variant<Options, int> parseCommandLine(int argc, char** argv);

}  // namespace memtrace::report
