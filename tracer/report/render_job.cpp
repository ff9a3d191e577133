#include "tracer/report/render_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "tracer/common/byte_format.h"
#include "tracer/report/html_assets.h"
#include "tracer/report/render.h"
#include "tracer/report/render_html.h"
#include "tracer/report/training.h"

namespace memtrace::report {
namespace {

using nlohmann::json;

// Beyond this many ranks the text table shows the others' lowest, median and highest figure
// instead of a column each (the JSON and CSV keep every rank).
constexpr size_t kRankColumns = 8;

std::string seconds(uint64_t ns) {
  return fmt::format("{:.3f} s", static_cast<double>(ns) / 1e9);
}

// "+3.000 MiB", "-1.000 MiB": a change.
std::string signedBytes(int64_t bytes) {
  return (bytes < 0 ? "" : "+") + formatSignedBytes(bytes);
}

std::string percentText(double value) {
  return fmt::format("{:+.1f} %", value);
}

std::string number(int64_t value) {
  return value < 0 ? std::string("-") : std::to_string(value);
}

std::string phaseText(const TracePeak& peak) {
  return peak.peak_phase ? format::trainingPhaseName(*peak.peak_phase) : "-";
}

std::string orDash(const std::string& text) {
  return text.empty() ? "-" : text;
}

size_t shown(size_t rows, size_t top) {
  return top == 0 ? rows : std::min(top, rows);
}

// How much the peak rank's peak is over the median rank's, as text.
std::string overMedianText(const JobReport& job) {
  const TracePeak& peak = job.ranks[job.peak_rank];
  const TracePeak& median = job.ranks[job.median_rank];
  uint64_t over = peak.summary.peak_bytes - median.summary.peak_bytes;
  std::string share =
      median.summary.peak_bytes
          ? " (" + percentText(100.0 * double(over) / double(median.summary.peak_bytes)) + ")"
          : "";
  return fmt::format("{} over the median rank's {} ({}){}", signedBytes(int64_t(over)),
                     formatBytes(median.summary.peak_bytes), median.label(), share);
}

json rankJson(const TracePeak& rank) {
  json categories = json::object();
  for (uint8_t value = 0; value < static_cast<uint8_t>(format::Category::kCount); ++value)
    if (rank.categories[value])
      categories[format::categoryName(static_cast<format::Category>(value))] =
          rank.categories[value];
  json entry = {
      {"trace", rank.path},
      {"label", rank.label()},
      {"rank", rank.distributed ? json(rank.distributed->rank) : json(nullptr)},
      {"host", rank.host},
      {"pid", rank.summary.process.pid},
      {"peak_bytes", rank.summary.peak_bytes},
      {"peak_event", rank.summary.peak_event},
      {"peak_time_ns", rank.summary.peak_time_ns},
      {"job_peak_time_ns", rank.offset_ns + rank.summary.peak_time_ns},
      {"offset_ns", rank.offset_ns},
      {"duration_ns", rank.summary.duration_ns},
      {"events", rank.summary.events},
      {"step", rank.peak_step ? json(rank.peak_step) : json(nullptr)},
      {"phase",
       rank.peak_phase ? json(format::trainingPhaseName(*rank.peak_phase)) : json(nullptr)},
      {"line", rank.peak_line},
      {"module", rank.peak_module},
      {"categories", categories},
      {"modules_at_peak",
       rank.summary.training ? moduleTableJson(rank.summary.peak_modules) : json(nullptr)},
      {"ended_cleanly", rank.summary.ended_cleanly},
      {"simulated", simulatedJson(rank.summary.simulated)}};
  if (rank.distributed) {
    const reader::DistributedInfo& d = *rank.distributed;
    entry["local_rank"] = d.local_rank;
    entry["group_rank"] = d.group_rank;
    entry["world_size"] = d.world_size;
    entry["restart_count"] = d.restart_count;
  }
  return entry;
}

json locationJson(const Location& location) {
  json entry = {{"location", location.name}, {"kind", locationKindName(location.kind)}};
  if (!location.file.empty()) entry["file"] = location.file;
  if (location.line) entry["line"] = location.line;
  if (!location.function.empty()) entry["function"] = location.function;
  if (!location.module.empty()) entry["module"] = location.module;
  return entry;
}

std::string shareText(double share) {
  return fmt::format("{:.1f} %", 100.0 * share);
}

// Note [The job's module table]: "model.4 holds 12.1 % of rank 3's peak, 3.0 % of rank 0's".
std::string differingText(const JobReport& job) {
  const ModuleShareDifference& d = *job.differing_module;
  const JobModuleRow& row = job.modules[d.row];
  return fmt::format("{} holds {} of {}'s peak ({}), {} of {}'s ({})", row.name,
                     shareText(d.highest_share), job.ranks[d.highest].label(),
                     formatBytes(row.bytes[d.highest]), shareText(d.lowest_share),
                     job.ranks[d.lowest].label(), formatBytes(row.bytes[d.lowest]));
}

json modulesJson(const JobReport& job) {
  json rows = json::array();
  for (const JobModuleRow& row : job.modules)
    rows.push_back({{"module", row.module}, {"location", row.name}, {"bytes", row.bytes}});
  json differing = nullptr;
  if (job.differing_module) {
    const ModuleShareDifference& d = *job.differing_module;
    differing = {{"location", job.modules[d.row].name}, {"highest_index", d.highest},
                 {"highest_share", d.highest_share},    {"lowest_index", d.lowest},
                 {"lowest_share", d.lowest_share},      {"text", differingText(job)}};
  }
  return {{"rows", rows}, {"differs_most", differing}};
}

json jobJson(const JobReport& job, size_t top) {
  json ranks = json::array();
  for (const TracePeak& rank : job.ranks) ranks.push_back(rankJson(rank));
  json rows = json::array();
  for (size_t i = 0; i < shown(job.rows.size(), top); ++i) {
    const JoinedRow& row = job.rows[i];
    json entry = locationJson(row.location);
    json bytes = json::array();
    for (const std::optional<uint64_t>& value : row.bytes)
      bytes.push_back(value ? json(*value) : json(nullptr));
    entry["bytes"] = bytes;
    entry["counts"] = row.counts;
    rows.push_back(std::move(entry));
  }
  const TracePeak& peak = job.ranks[job.peak_rank];
  const TracePeak& median = job.ranks[job.median_rank];
  return {
      {"format", "memtrace-job"},
      {"job_id", job.job_id},
      {"world_size", job.world_size},
      {"ranks", ranks},
      {"earlier_attempts", job.earlier_attempts},
      {"missing_ranks", job.missing_ranks},
      {"clocks", {{"aligned", "job start"}, {"one_host", job.one_host}, {"how", job.alignment}}},
      {"peak",
       {{"index", job.peak_rank},
        {"label", peak.label()},
        {"bytes", peak.summary.peak_bytes},
        {"median_index", job.median_rank},
        {"median_bytes", median.summary.peak_bytes},
        {"over_median_bytes", peak.summary.peak_bytes - median.summary.peak_bytes}}},
      {"modules", modulesJson(job)},
      {"table",
       {{"group_by", groupByName(job.group_by)},
        {"frame", job.frame == FramePolicy::kUser ? "user" : "innermost"},
        {"rank", job.peak_rank},
        {"locations", job.rows.size()},
        {"rows", rows}}}};
}

// Note [Saying a run was simulated] (render.h): the lines that say which traces were made on the
// simulated GPU, one for all when every trace was, on one profile; else one per such trace.
std::vector<std::string> simulatedLines(const std::vector<const TracePeak*>& traces,
                                        const std::string& all_of_them) {
  std::vector<std::string> lines;
  std::vector<const TracePeak*> simulated;
  for (const TracePeak* trace : traces)
    if (trace->summary.simulated) simulated.push_back(trace);
  if (simulated.empty()) return lines;
  bool one_profile = simulated.size() == traces.size();
  for (const TracePeak* trace : simulated)
    one_profile = one_profile && simulatedLabel(*trace->summary.simulated) ==
                                     simulatedLabel(*simulated.front()->summary.simulated);
  if (one_profile && traces.size() > 1) {
    lines.push_back(fmt::format("{} ({} — {})", all_of_them,
                                simulatedLabel(*simulated.front()->summary.simulated),
                                kSimulatedMeaning));
    return lines;
  }
  for (const TracePeak* trace : simulated)
    lines.push_back(fmt::format("{} ({} — {})", trace->label(),
                                simulatedLabel(*trace->summary.simulated), kSimulatedMeaning));
  return lines;
}

bool anySimulated(const std::vector<TracePeak>& traces) {
  for (const TracePeak& trace : traces)
    if (trace.summary.simulated) return true;
  return false;
}

// The median of the values, the lower one of an even count.
uint64_t lowerMedian(std::vector<uint64_t> values) {
  if (values.empty()) return 0;
  auto middle = values.begin() + (values.size() - 1) / 2;
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// The columns of a table beside every rank: the peak rank's, then each other's (or, past
// kRankColumns ranks, the others' minimum, median and maximum).
std::string rankColumnsHeader(const JobReport& job) {
  std::string header = fmt::format("{:<11} ", job.ranks[job.peak_rank].label());
  if (job.ranks.size() <= kRankColumns) {
    for (size_t i = 0; i < job.ranks.size(); ++i)
      if (i != job.peak_rank) header += fmt::format("{:<11} ", job.ranks[i].label());
  } else {
    header += fmt::format("{:<11} {:<11} {:<11} ", "Others min", "median", "max");
  }
  return header;
}

// A row's cells under rankColumnsHeader: the peak rank's bytes, then each other rank's ("-"
// where it has none), or past kRankColumns ranks the others' minimum, median and maximum.
std::string rankCells(const JobReport& job, const std::vector<std::optional<uint64_t>>& bytes) {
  std::string line = fmt::format("{:<11} ", formatBytes(bytes[job.peak_rank].value_or(0)));
  bool columns = job.ranks.size() <= kRankColumns;
  std::vector<uint64_t> others;
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    if (i == job.peak_rank) continue;
    others.push_back(bytes[i].value_or(0));
    if (columns) line += fmt::format("{:<11} ", bytes[i] ? formatBytes(*bytes[i]) : "-");
  }
  if (!columns)
    line += fmt::format("{:<11} {:<11} {:<11} ",
                        formatBytes(*std::min_element(others.begin(), others.end())),
                        formatBytes(lowerMedian(others)),
                        formatBytes(*std::max_element(others.begin(), others.end())));
  return line;
}

// Every rank's module table at its peak, the peak rank's column first (Note [The job's module
// table]), and the module whose share differs most between ranks.
void renderJobModules(std::ostream& out, const JobReport& job) {
  if (job.modules.empty()) return;
  out << "\nBy module at each rank's peak (each row's categories: the JSON report, or the rank's "
         "own):\n";
  out << rankColumnsHeader(job) << "Module\n";
  for (const JobModuleRow& row : job.modules) {
    std::vector<std::optional<uint64_t>> bytes;
    for (uint64_t value : row.bytes) bytes.push_back(value ? std::optional(value) : std::nullopt);
    out << rankCells(job, bytes) << row.name << "\n";
  }
  if (job.ranks.size() < 2) return;
  if (job.differing_module)
    out << fmt::format("Differs most between ranks: {}.\n", differingText(job));
  else
    out << "Every module's share of the peak is the same on every rank (within 0.1 point).\n";
}

}  // namespace

void renderJobText(std::ostream& out, const JobReport& job, size_t top) {
  const TracePeak& peak = job.ranks[job.peak_rank];
  std::string world = job.world_size >= 0 ? fmt::format(", world size {}", job.world_size) : "";
  std::string id = job.job_id.empty() ? "" : fmt::format(" of job '{}'", job.job_id);
  out << fmt::format("memtrace job report: {} traces{}{}\n", job.ranks.size(), id, world);
  out << fmt::format("  clocks     aligned {}\n", job.alignment);
  std::vector<const TracePeak*> ranks;
  for (const TracePeak& rank : job.ranks) ranks.push_back(&rank);
  for (const std::string& line : simulatedLines(ranks, "every rank ran on the simulated GPU"))
    out << fmt::format("  simulated  {}\n", line);
  if (!job.missing_ranks.empty())
    out << fmt::format(
        "  note       no trace of rank {} (a rank that never allocated writes none)\n",
        fmt::join(job.missing_ranks, ", "));
  for (const std::string& path : job.earlier_attempts)
    out << fmt::format("  restarted  {}: an earlier attempt, set aside for the rank's latest\n",
                       path);
  for (const TracePeak& rank : job.ranks)
    if (!rank.summary.ended_cleanly)
      out << fmt::format(
          "  note       {} has no end mark: the process was killed or is still "
          "running\n",
          rank.label());
  out << "\nPeak of every rank (times on the job's axis):\n";
  out << fmt::format("{:<9} {:<6} {:<12} {:<11} {:>9}  {:>5}  {:<9} {:<20} {}\n", "Rank", "Local",
                     "Host", "Peak", "At", "Step", "Phase", "Module", "Line");
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    const TracePeak& rank = job.ranks[i];
    std::string label = rank.distributed && rank.distributed->rank >= 0
                            ? std::to_string(rank.distributed->rank)
                            : rank.label();
    if (i == job.peak_rank) label += " *";
    out << fmt::format("{:<9} {:<6} {:<12} {:<11} {:>9}  {:>5}  {:<9} {:<20} {}\n", label,
                       rank.distributed ? number(rank.distributed->local_rank) : "-",
                       orDash(rank.host), formatBytes(rank.summary.peak_bytes),
                       seconds(rank.offset_ns + rank.summary.peak_time_ns),
                       rank.peak_step ? std::to_string(rank.peak_step) : "-", phaseText(rank),
                       orDash(rank.peak_module), orDash(rank.peak_line));
  }
  out << fmt::format("\n{} peaks highest: {}, {}.\n", peak.label(),
                     formatBytes(peak.summary.peak_bytes), overMedianText(job));

  renderJobModules(out, job);

  size_t rows = shown(job.rows.size(), top);
  out << fmt::format("\nLive at {}'s peak, by {}{}, beside the other ranks' figures at theirs",
                     peak.label(), groupByName(job.group_by),
                     job.frame == FramePolicy::kUser ? " in user code" : "");
  if (rows < job.rows.size()) out << fmt::format(" (top {} of {})", rows, job.rows.size());
  out << ":\n";
  out << rankColumnsHeader(job) << "Location\n";
  for (size_t r = 0; r < rows; ++r)
    out << rankCells(job, job.rows[r].bytes) << job.rows[r].location.name << "\n";
}

void renderJobJson(std::ostream& out, const JobReport& job, size_t top) {
  out << jobJson(job, top).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

void renderJobCsv(std::ostream& out, const JobReport& job, size_t top) {
  auto quote = [](const std::string& text) {
    std::string quoted = "\"";
    for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  };
  // Note [Saying a run was simulated]: a column, as in the report's CSV.
  bool simulated = anySimulated(job.ranks);
  out << "rank,local_rank,host,trace,peak_bytes,peak_time_ns,step,phase,peak_module,peak_line,"
         "bytes,count,location,file,line,function"
      << (simulated ? ",simulated_profile\n" : "\n");
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    const TracePeak& rank = job.ranks[i];
    std::string head = fmt::format(
        "{},{},{},{},{},{},{},{},{},{}", rank.distributed ? number(rank.distributed->rank) : "",
        rank.distributed ? number(rank.distributed->local_rank) : "", quote(rank.host),
        quote(rank.path), rank.summary.peak_bytes, rank.offset_ns + rank.summary.peak_time_ns,
        rank.peak_step ? std::to_string(rank.peak_step) : "",
        rank.peak_phase ? format::trainingPhaseName(*rank.peak_phase) : "", quote(rank.peak_module),
        quote(rank.peak_line));
    for (size_t r = 0; r < shown(job.rows.size(), top); ++r) {
      const JoinedRow& row = job.rows[r];
      out << head << ',' << row.bytes[i].value_or(0) << ',' << row.counts[i] << ','
          << quote(row.location.name) << ',' << quote(row.location.file) << ',' << row.location.line
          << ',' << quote(row.location.function);
      if (simulated)
        out << ',' << quote(rank.summary.simulated ? rank.summary.simulated->profile_name : "");
      out << '\n';
    }
  }
}

void renderJobHtml(std::ostream& out, const JobReport& job, size_t top) {
  json data = jobJson(job, top);
  json timelines = json::array();
  for (const TracePeak& rank : job.ranks) timelines.push_back(timelineJson(rank.timeline));
  data["timelines"] = timelines;
  data["over_median"] = overMedianText(job);
  writePage(out, assets::kJobHtml,
            "memtrace: a job of " + std::to_string(job.ranks.size()) + " traces", assets::kJobJs,
            data);
}

// ---- diff -------------------------------------------------------------------------------

namespace {

std::string peakText(const TracePeak& peak) {
  std::string where;
  if (peak.peak_step) where += fmt::format(", step {}", peak.peak_step);
  if (peak.peak_phase) where += fmt::format(", {}", format::trainingPhaseName(*peak.peak_phase));
  if (!peak.peak_line.empty()) where += ", " + peak.peak_line;
  return fmt::format("{} ({} bytes) at {}{}", formatBytes(peak.summary.peak_bytes),
                     peak.summary.peak_bytes, seconds(peak.summary.peak_time_ns), where);
}

json sideJson(const TracePeak& peak) {
  json side = rankJson(peak);
  side.erase("offset_ns");
  side.erase("job_peak_time_ns");
  return side;
}

}  // namespace

void renderDiffText(std::ostream& out, const TraceDiff& diff, size_t top,
                    const DiffVerdict& verdict) {
  out << fmt::format("memtrace diff: A {}\n               B {}\n", diff.a.path, diff.b.path);
  for (const TracePeak* side : {&diff.a, &diff.b})
    if (side->summary.simulated)
      out << fmt::format("               {} {} — {}\n", side == &diff.a ? "A" : "B",
                         simulatedLabel(*side->summary.simulated), kSimulatedMeaning);
  out << "\n";
  out << fmt::format("Peak  A {}\n      B {}\n", peakText(diff.a), peakText(diff.b));
  int64_t change = static_cast<int64_t>(diff.b.summary.peak_bytes) -
                   static_cast<int64_t>(diff.a.summary.peak_bytes);
  std::optional<double> percent = peakChangePercent(diff);
  out << fmt::format("      B - A: {} bytes{}\n",
                     change >= 0 ? "+" + std::to_string(change) : std::to_string(change),
                     percent ? " (" + percentText(*percent) + ")" : "");
  if (!verdict.threshold.empty())
    out << fmt::format("      {} the threshold ({})\n", verdict.over ? "OVER" : "within",
                       verdict.threshold);
  for (const DiffTable& table : diff.tables) {
    size_t rows = shown(table.rows.size(), top);
    out << fmt::format("\nBy {}, live at each one's peak: {} changed, {} the same",
                       groupByName(table.group_by), table.rows.size(), table.unchanged);
    if (rows < table.rows.size()) out << fmt::format(" (the {} largest changes)", rows);
    out << (rows ? ":\n" : ".\n");
    if (!rows) continue;
    out << fmt::format("{:<12} {:<11} {:<11} {:<9} {}\n", "Change", "A", "B", "", "Location");
    for (size_t r = 0; r < rows; ++r) {
      const DiffRow& row = table.rows[r];
      out << fmt::format("{:<12} {:<11} {:<11} {:<9} {}\n", signedBytes(row.delta()),
                         row.change == Change::kAppeared ? "-" : formatBytes(row.a_bytes),
                         row.change == Change::kWent ? "-" : formatBytes(row.b_bytes),
                         changeName(row.change), row.location.name);
    }
  }
}

void renderDiffJson(std::ostream& out, const TraceDiff& diff, size_t top,
                    const DiffVerdict& verdict) {
  json tables = json::object();
  for (const DiffTable& table : diff.tables) {
    json rows = json::array();
    for (size_t r = 0; r < shown(table.rows.size(), top); ++r) {
      const DiffRow& row = table.rows[r];
      json entry = locationJson(row.location);
      entry["change"] = changeName(row.change);
      entry["a_bytes"] = row.a_bytes;
      entry["b_bytes"] = row.b_bytes;
      entry["delta_bytes"] = row.delta();
      entry["a_count"] = row.a_count;
      entry["b_count"] = row.b_count;
      rows.push_back(std::move(entry));
    }
    tables[groupByName(table.group_by)] = {
        {"changed", table.rows.size()}, {"unchanged", table.unchanged}, {"rows", rows}};
  }
  std::optional<double> percent = peakChangePercent(diff);
  json document = {
      {"format", "memtrace-diff"},
      {"a", sideJson(diff.a)},
      {"b", sideJson(diff.b)},
      {"peak",
       {{"a_bytes", diff.a.summary.peak_bytes},
        {"b_bytes", diff.b.summary.peak_bytes},
        {"delta_bytes", static_cast<int64_t>(diff.b.summary.peak_bytes) -
                            static_cast<int64_t>(diff.a.summary.peak_bytes)},
        {"delta_percent", percent ? json(*percent) : json(nullptr)}}},
      {"fail_over", verdict.threshold.empty() ? json(nullptr) : json(verdict.threshold)},
      {"over", verdict.over},
      {"tables", tables}};
  out << document.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

}  // namespace memtrace::report
