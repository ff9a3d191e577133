#include "tracer/report/render.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>

#include "tracer/common/byte_format.h"
#include "tracer/report/training.h"

namespace memtrace::report {
namespace {

std::string seconds(uint64_t ns) {
  return fmt::format("{:.3f} s", static_cast<double>(ns) / 1e9);
}

std::string commandLine(const reader::ProcessInfo& process) {
  std::string text;
  for (const std::string& argument : process.command_line) {
    if (!text.empty()) text += ' ';
    bool plain = !argument.empty() && argument.find_first_of(" \t\"'\\$`") == std::string::npos;
    text += plain ? argument : "'" + argument + "'";
  }
  return text;
}

std::string wallClock(uint64_t unix_ns) {
  std::time_t seconds = static_cast<std::time_t>(unix_ns / 1000000000u);
  std::tm local;
  localtime_r(&seconds, &local);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::string levelText(const TraceSummary& summary) {
  // Which allocators hand out pieces of the segments.
  std::string segments = summary.physical_memory
                             ? "physical memory made with cuMemCreate (expandable segments, "
                               "NCCL) or segments of PyTorch's caching allocator"
                             : "segments of PyTorch's caching allocator";
  if (summary.segment_level && summary.tensor_level)
    return "mixed: tensors, and " + segments + " holding tensors";
  if (summary.segment_level)
    return "segments (an allocator is in front: each event is one of the " + segments +
           ", which hold tensors)";
  return "tensors (each event is one allocation request)";
}

// The milliseconds between a reading and the point, in words.
std::string fromPoint(int64_t from_point_ns, const std::string& point) {
  if (from_point_ns == 0) return "at the " + point;
  double ms = static_cast<double>(from_point_ns < 0 ? -from_point_ns : from_point_ns) / 1e6;
  return fmt::format("{:.1f} ms {} the {}", ms, from_point_ns < 0 ? "before" : "after", point);
}

// Note [Device memory readings]: the row of what no allocation call made, and what it is.
void renderOutsideText(std::ostream& out, const Report& report, const OutsideAllocations& outside) {
  if (outside.devices.empty()) return;
  std::string point = pointName(report.live_set.point);
  out << fmt::format(
      "\nDevice memory at the {} as the driver counts it (cuMemGetInfo: total - "
      "free), from the reading nearest it:\n",
      point);
  for (const OutsideReading& device : outside.devices) {
    const DeviceMemoryReading& reading = device.reading;
    out << fmt::format(
        "  device {}: {} used, read at {} ({}): {} live in allocations + {} "
        "outside any allocation call\n",
        reading.device, formatBytes(reading.used_bytes), seconds(reading.time_ns),
        fromPoint(device.from_point_ns, point), formatBytes(reading.live_bytes),
        formatBytes(device.outside_bytes));
    if (device.live_beyond_used_bytes)
      out << fmt::format(
          "    (live allocations exceed the used memory by {}: managed memory not yet on the "
          "device, or memory freed to a pool the driver counts as free)\n",
          formatBytes(device.live_beyond_used_bytes));
  }
  out << "Outside any allocation call: the CUDA context, the modules' code and data, libraries' "
         "own buffers,\nthe free memory memory pools keep, and any other process's memory on "
         "the device. Measured at\nthe reading and taken as unchanged to the "
      << point << ": approximate by whatever changed in between.\n";
}

std::string percent(double value) {
  return fmt::format("{:+.1f} %", value);
}

// What the estimator said, per shown row (empty without an estimate).
std::vector<std::optional<uint64_t>> predictions(const Report& report) {
  if (!report.prediction) return {};
  return predictedBytes(*report.prediction, report.table);
}

std::string predictionSource(const Prediction& prediction) {
  std::string text = "memtrace-estimate";
  if (!prediction.semantics.empty()) text += ", " + prediction.semantics + " semantics";
  if (prediction.lower_bound) text += ", a lower bound: some ops were unknown to it";
  return text;
}

size_t shownRows(const Report& report) {
  return report.top == 0 ? report.table.rows.size()
                         : std::min(report.top, report.table.rows.size());
}

// The OOM's tables are shorter than the report's: they come beside it.
constexpr size_t kOomRows = 10;

size_t oomRows(size_t top, size_t rows) {
  return std::min(top == 0 ? rows : std::min(top, kOomRows), rows);
}

std::string locationLine(const Location& location, const std::string& module) {
  return location.name + (module.empty() ? "" : ", in " + module);
}

// The OOM section (Point::Kind::kOom): the request, where it was made, what was live on its
// device then by line and module, and how far over the device's memory it went.
void renderOomText(std::ostream& out, const Report& report) {
  if (!report.oom) return;
  const OomReport& oom = *report.oom;
  std::string device =
      oom.request.device >= 0 ? fmt::format(" on device {}", oom.request.device) : "";
  out << fmt::format("Out of memory at {} (event {}){}: a request of {} ({} bytes) failed\n",
                     seconds(oom.request.time_ns), oom.request.event, device,
                     formatBytes(oom.request.size), oom.request.size);
  out << fmt::format("  requested at  {}\n", locationLine(oom.line, oom.module));
  out << fmt::format("  live then     {} in {} allocations{}; live + request = {}\n",
                     formatBytes(oom.live_bytes), oom.live_allocations, device,
                     formatBytes(oom.live_bytes + oom.request.size));
  if (!oom.memory_bytes) {
    out << "  memory        the device's memory is not in the trace\n";
  } else {
    std::string whose =
        oom.simulated
            ? fmt::format("the simulated {}'s{}", report.summary.simulated->profile_name,
                          report.summary.simulated->memory_set_by_user ? ", set by the user" : "")
            : std::string("the device's total");
    if (oom.over_bytes > 0)
      out << fmt::format("  memory        {} ({}): {}over by {} ({} bytes)\n",
                         formatBytes(oom.memory_bytes), whose,
                         oom.torch_segments ? "reserved + request " : "",
                         formatBytes(static_cast<uint64_t>(oom.over_bytes)), oom.over_bytes);
    else
      out << fmt::format(
          "  memory        {} ({}): {} under it; the rest was held outside any allocation "
          "call\n                (the CUDA context, libraries' buffers, memory pools' free "
          "memory, fragmentation)\n",
          formatBytes(oom.memory_bytes), whose,
          formatBytes(static_cast<uint64_t>(-oom.over_bytes)));
  }
  if (oom.torch_segments) {
    // Note [PyTorch's own allocator]: why a request under the free memory can fail.
    out << fmt::format(
        "  reserved      {} by PyTorch's caching allocator; {} of it in no tensor, the longest "
        "free stretch in one segment at most {}{}\n",
        formatBytes(oom.reserved_bytes), formatBytes(oom.free_in_segments_bytes),
        formatBytes(oom.largest_free_bytes),
        oom.largest_free_bytes < oom.request.size && oom.free_in_segments_bytes >= oom.request.size
            ? ": the free memory is there, in pieces too small for the request (fragmentation)"
            : "");
    for (const OomReport::PinnedSegment& segment : oom.segments) {
      std::string pinned;
      for (size_t i = 0; i < segment.pinned_by.rows.size() && i < 3; ++i)
        pinned += fmt::format("{}{} ({})", i ? ", " : "", segment.pinned_by.rows[i].location.name,
                              formatBytes(segment.pinned_by.rows[i].bytes));
      if (segment.pinned_by.rows.size() > 3)
        pinned += fmt::format(", and {} more", segment.pinned_by.rows.size() - 3);
      out << fmt::format("    segment {:#x}, {}: {} free (at most {} in one piece), kept by {}\n",
                         segment.address, formatBytes(segment.size),
                         formatBytes(segment.free_bytes), formatBytes(segment.largest_free_bytes),
                         pinned);
    }
  }
  auto table = [&](const LocationTable& rows, const char* by) {
    size_t shown = oomRows(report.top, rows.rows.size());
    out << fmt::format("  Live at the OOM by {}", by);
    if (shown < rows.rows.size()) out << fmt::format(", top {} of {}", shown, rows.rows.size());
    out << ":\n";
    out << fmt::format("  {:<11} {:>7}  {}\n", "Mem", "Count", "Location");
    for (size_t i = 0; i < shown; ++i)
      out << fmt::format("  {:<11} {:>7}  {}\n", formatBytes(rows.rows[i].bytes),
                         rows.rows[i].count, rows.rows[i].location.name);
  };
  table(oom.by_line, "line");
  table(oom.by_module, "module");
  out << "\n";
}

// Note [Saying a run was simulated]: the reads of device values, by line.
void renderDeviceReadsText(std::ostream& out, const Report& report) {
  const TraceSummary& s = report.summary;
  if (!s.simulated && !s.device_read_count) return;
  if (!s.device_read_count) {
    out << "\nReads of device values: none (no copy from the device to the host: nothing the "
           "program did\ndepended on a value computed on the device).\n";
    return;
  }
  size_t shown = report.top == 0 ? report.device_reads.size()
                                 : std::min(report.top, report.device_reads.size());
  out << fmt::format(
      "\nReads of device values ({} copies from the device to the host, {}), by line{}:\n",
      s.device_read_count, formatBytes(s.device_read_bytes),
      report.device_reads.size() > shown
          ? fmt::format(", top {} of {}", shown, report.device_reads.size())
          : "");
  out << fmt::format("{:>7}  {:<11} {}\n", "Count", "Bytes", "Location");
  for (size_t i = 0; i < shown; ++i) {
    const DeviceReadRow& row = report.device_reads[i];
    out << fmt::format("{:>7}  {:<11} {}\n", row.count, formatBytes(row.bytes), row.location.name);
  }
  out << kDeviceReadsMeaning << "\n";
}

// Note [Sizes in the trace]: the sizes nobody measured, by line, and what the peak holds of them.
std::string atMostText(uint64_t at_most) {
  return at_most == UINT64_MAX ? std::string("no bound") : formatBytes(at_most);
}

void renderSimulatedSizesText(std::ostream& out, const Report& report) {
  const TraceSummary& s = report.summary;
  if (!s.simulated_size_count) return;
  size_t shown = report.top == 0 ? report.simulated_sizes.size()
                                 : std::min(report.top, report.simulated_sizes.size());
  out << fmt::format(
      "\nSizes nobody measured ({} answers of the simulated libraries), by line{}:\n",
      s.simulated_size_count,
      report.simulated_sizes.size() > shown
          ? fmt::format(", top {} of {}", shown, report.simulated_sizes.size())
          : "");
  out << fmt::format("{:>7}  {:<11} {:<11} {:<10} {}\n", "Count", "Answered", "At most",
                     "Certainty", "Call, at location");
  for (size_t i = 0; i < shown; ++i) {
    const SimulatedSizeRow& row = report.simulated_sizes[i];
    out << fmt::format("{:>7}  {:<11} {:<11} {:<10} {}'s {} at {}\n", row.count,
                       formatBytes(row.bytes), atMostText(row.at_most),
                       format::certaintyName(row.certainty), row.library, row.call,
                       row.location.name);
  }
  const UnknownSizes& peak = s.unknown_sizes_at_peak;
  out << fmt::format("At the peak: {} of it live", formatBytes(peak.bytes));
  if (peak.bytes)
    out << fmt::format(", at most {} more{}", formatBytes(peak.extra_bytes),
                       peak.unbounded ? fmt::format(" ({} without a bound)", peak.unbounded) : "");
  if (s.unheld_size_unbounded || s.unheld_size_at_most)
    out << fmt::format("; answers of 0 bytes could have held up to {} while in use",
                       s.unheld_size_unbounded ? std::string("an unknown size")
                                               : formatBytes(s.unheld_size_at_most));
  out << ".\n" << kSimulatedSizesMeaning << "\n";
}

// Note [Values where they decide the path]: the values assumed, by line.
void renderAssumedValuesText(std::ostream& out, const Report& report) {
  const TraceSummary& s = report.summary;
  if (!s.assumed_value_count) return;
  size_t shown = report.top == 0 ? report.assumed_values.size()
                                 : std::min(report.top, report.assumed_values.size());
  out << fmt::format(
      "\nValues the simulated run assumed where they decided the path ({}), by line{}:\n",
      s.assumed_value_count,
      report.assumed_values.size() > shown
          ? fmt::format(", top {} of {}", shown, report.assumed_values.size())
          : "");
  out << fmt::format("{:>7}  {}\n", "Count", "Location: assumed");
  for (size_t i = 0; i < shown; ++i) {
    const AssumedValueRow& row = report.assumed_values[i];
    out << fmt::format("{:>7}  {}: {}\n", row.count, row.location.name, row.assumed);
  }
  out << kAssumedValuesMeaning << "\n";
}

}  // namespace

std::string simulatedLabel(const reader::SimulatedDeviceInfo& simulated) {
  std::string label = "SIMULATED: profile " + simulated.profile_name;
  if (simulated.memory_set_by_user)
    label += ", " + formatBytes(simulated.memory_bytes) + " set by the user";
  return label;
}

nlohmann::json simulatedJson(const std::optional<reader::SimulatedDeviceInfo>& simulated) {
  if (!simulated) return nullptr;
  return {{"profile", simulated->profile_name},
          {"profile_file", simulated->profile_file},
          {"memory_bytes", simulated->memory_bytes},
          {"memory_set_by_user", simulated->memory_set_by_user},
          {"devices", simulated->device_count},
          {"label", simulatedLabel(*simulated)},
          {"meaning", kSimulatedMeaning}};
}

nlohmann::json deviceReadsJson(const TraceSummary& summary, const std::vector<DeviceReadRow>& rows,
                               size_t top) {
  using nlohmann::json;
  json entries = json::array();
  size_t shown = top == 0 ? rows.size() : std::min(top, rows.size());
  for (size_t i = 0; i < shown; ++i) {
    const DeviceReadRow& row = rows[i];
    json entry = {{"location", row.location.name},
                  {"kind", locationKindName(row.location.kind)},
                  {"count", row.count},
                  {"bytes", row.bytes}};
    if (!row.location.file.empty()) entry["file"] = row.location.file;
    if (row.location.line) entry["line"] = row.location.line;
    if (!row.location.function.empty()) entry["function"] = row.location.function;
    entries.push_back(std::move(entry));
  }
  return {{"count", summary.device_read_count},
          {"bytes", summary.device_read_bytes},
          {"locations", rows.size()},
          {"rows", entries},
          {"meaning", kDeviceReadsMeaning}};
}

nlohmann::json simulatedSizesJson(const TraceSummary& summary,
                                  const std::vector<SimulatedSizeRow>& rows, size_t top) {
  using nlohmann::json;
  auto bound = [](uint64_t at_most) { return at_most == UINT64_MAX ? json() : json(at_most); };
  json entries = json::array();
  size_t shown = top == 0 ? rows.size() : std::min(top, rows.size());
  for (size_t i = 0; i < shown; ++i) {
    const SimulatedSizeRow& row = rows[i];
    json entry = {{"location", row.location.name},
                  {"kind", locationKindName(row.location.kind)},
                  {"library", row.library},
                  {"call", row.call},
                  {"shapes", json::parse(row.shapes, nullptr, false)},
                  {"count", row.count},
                  {"bytes", row.bytes},
                  {"at_most", bound(row.at_most)},
                  {"certainty", format::certaintyName(row.certainty)}};
    if (!row.location.file.empty()) entry["file"] = row.location.file;
    if (row.location.line) entry["line"] = row.location.line;
    if (!row.location.function.empty()) entry["function"] = row.location.function;
    entries.push_back(std::move(entry));
  }
  const UnknownSizes& peak = summary.unknown_sizes_at_peak;
  return {
      {"count", summary.simulated_size_count},
      {"locations", rows.size()},
      {"rows", entries},
      {"at_peak",
       {{"bytes", peak.bytes}, {"extra_bytes", peak.extra_bytes}, {"unbounded", peak.unbounded}}},
      {"unheld_at_most",
       summary.unheld_size_unbounded ? json() : json(summary.unheld_size_at_most)},
      {"meaning", kSimulatedSizesMeaning}};
}

nlohmann::json assumedValuesJson(const TraceSummary& summary,
                                 const std::vector<AssumedValueRow>& rows, size_t top) {
  using nlohmann::json;
  json entries = json::array();
  size_t shown = top == 0 ? rows.size() : std::min(top, rows.size());
  for (size_t i = 0; i < shown; ++i) {
    const AssumedValueRow& row = rows[i];
    json entry = {{"location", row.location.name},
                  {"kind", locationKindName(row.location.kind)},
                  {"assumed", row.assumed},
                  {"count", row.count}};
    if (!row.location.file.empty()) entry["file"] = row.location.file;
    if (row.location.line) entry["line"] = row.location.line;
    if (!row.location.function.empty()) entry["function"] = row.location.function;
    entries.push_back(std::move(entry));
  }
  return {{"count", summary.assumed_value_count},
          {"locations", rows.size()},
          {"rows", entries},
          {"meaning", kAssumedValuesMeaning}};
}

// Note [PyTorch's own allocator]: PyTorch's segments at the failure; null without them.
nlohmann::json torchAllocatorAtOomJson(const OomReport& oom) {
  using nlohmann::json;
  if (!oom.torch_segments) return nullptr;
  json segments = json::array();
  for (const OomReport::PinnedSegment& segment : oom.segments) {
    json pinned = json::array();
    for (const TableRow& row : segment.pinned_by.rows)
      pinned.push_back(
          {{"location", row.location.name}, {"bytes", row.bytes}, {"count", row.count}});
    segments.push_back({{"address", segment.address},
                        {"size", segment.size},
                        {"free_bytes", segment.free_bytes},
                        {"largest_free_bytes", segment.largest_free_bytes},
                        {"pinned_by", pinned}});
  }
  return {{"reserved_bytes", oom.reserved_bytes},
          {"free_in_segments_bytes", oom.free_in_segments_bytes},
          {"largest_free_bytes", oom.largest_free_bytes},
          {"segments", segments}};
}

nlohmann::json oomJson(const std::optional<OomReport>& oom, size_t top) {
  using nlohmann::json;
  if (!oom) return nullptr;
  auto rows = [&](const LocationTable& table) {
    json entries = json::array();
    for (size_t i = 0; i < oomRows(top, table.rows.size()); ++i) {
      const TableRow& row = table.rows[i];
      json entry = {{"bytes", row.bytes},
                    {"count", row.count},
                    {"location", row.location.name},
                    {"kind", locationKindName(row.location.kind)}};
      if (!row.location.file.empty()) entry["file"] = row.location.file;
      if (row.location.line) entry["line"] = row.location.line;
      if (!row.location.function.empty()) entry["function"] = row.location.function;
      if (!row.location.module.empty()) entry["module"] = row.location.module;
      entries.push_back(std::move(entry));
    }
    return json{{"locations", table.rows.size()}, {"rows", entries}};
  };
  json request = {{"event", oom->request.event}, {"time_ns", oom->request.time_ns},
                  {"bytes", oom->request.size},  {"device", oom->request.device},
                  {"location", oom->line.name},  {"kind", locationKindName(oom->line.kind)},
                  {"module", oom->module}};
  if (!oom->line.file.empty()) request["file"] = oom->line.file;
  if (oom->line.line) request["line"] = oom->line.line;
  if (!oom->line.function.empty()) request["function"] = oom->line.function;
  return {{"request", request},
          {"live_bytes", oom->live_bytes},
          {"live_allocations", oom->live_allocations},
          {"memory_bytes", oom->memory_bytes ? json(oom->memory_bytes) : json(nullptr)},
          {"memory_source", !oom->memory_bytes ? json(nullptr)
                            : oom->simulated   ? json("simulated")
                                               : json("device")},
          {"over_bytes", oom->memory_bytes ? json(oom->over_bytes) : json(nullptr)},
          {"torch_allocator", torchAllocatorAtOomJson(*oom)},
          {"by_line", rows(oom->by_line)},
          {"by_module", rows(oom->by_module)}};
}

std::string pointName(const Point& point) {
  switch (point.kind) {
    case Point::Kind::kPeak:
      return "peak";
    case Point::Kind::kEnd:
      return "end";
    case Point::Kind::kOom:
      return "oom";
    case Point::Kind::kTime:
      return fmt::format("{:.6g} s", static_cast<double>(point.time_ns) / 1e9);
  }
  return "?";
}

namespace {

// Note [One line holds the peak]: the line's bytes by module and by the library's own line.
void renderDominantLineText(std::ostream& out, const Report& report) {
  if (!report.dominant_line) return;
  const LineBreakdown& line = *report.dominant_line;
  out << fmt::format(
      "\nOne line holds {:.0f} % of the {} ({}): {}. The user's code cannot tell its allocations "
      "apart, so here they are by module and by the innermost line in a library other than torch "
      "(where the library's configuration acts: checkpointing, attention, batch, dtype):\n",
      100.0 * double(line.bytes) / double(line.point_bytes), pointName(report.live_set.point),
      formatBytes(line.bytes), line.line.name);
  auto table = [&](const std::vector<TableRow>& rows, const char* what) {
    out << fmt::format("  {:<11} {:>7}  {}\n", "Mem", "Count", what);
    size_t shown = report.top ? std::min(report.top, rows.size()) : rows.size();
    for (size_t i = 0; i < shown; ++i)
      out << fmt::format("  {:<11} {:>7}  {}\n", formatBytes(rows[i].bytes), rows[i].count,
                         rows[i].location.name);
    if (shown < rows.size())
      out << fmt::format("  ... {} more hold {}\n", rows.size() - shown,
                         formatBytes(line.bytes - rows[shown - 1].cumulative_bytes));
  };
  table(line.by_module, "Module");
  table(line.by_library_line, "Library line");
}

}  // namespace

void renderText(std::ostream& out, const Report& report) {
  const TraceSummary& s = report.summary;
  out << fmt::format("memtrace report: {}\n", report.trace_path);
  out << fmt::format("  command    {}\n", commandLine(s.process));
  out << fmt::format("  process    pid {}, started {}, {}\n", s.process.pid,
                     wallClock(s.process.start_unix_ns), s.process.tracer_version);
  out << fmt::format("  duration   {}, {} events ({} allocations, {} frees, {} failed)\n",
                     seconds(s.duration_ns), s.events, s.allocations, s.frees,
                     s.failed_allocations);
  out << fmt::format("  stacks     {}\n", format::stackModeName(s.process.stack_mode));
  out << fmt::format("  level      {}\n", levelText(s));
  if (s.mapped_peak_bytes || s.reserved_peak_bytes)
    out << fmt::format(
        "  mapped     at most {} mapped (cuMemMap) into {} of reserved address "
        "space (cuMemAddressReserve; no memory of its own)\n",
        formatBytes(s.mapped_peak_bytes), formatBytes(s.reserved_peak_bytes));
  // Note [Saying a run was simulated]: where the device is named, and once without a device.
  std::string simulated =
      s.simulated ? fmt::format(" ({} — {})", simulatedLabel(*s.simulated), kSimulatedMeaning) : "";
  if (s.simulated && s.devices.empty())
    out << fmt::format("  simulated  {}\n", simulated.substr(2, simulated.size() - 3));
  for (const DeviceSummary& device : s.devices) {
    std::string name = device.name.empty() ? "(unnamed)" : device.name;
    if (device.total_bytes) name += ", " + formatBytes(device.total_bytes);
    name += simulated;
    out << fmt::format("  device {:<3} {}: peak {} at {}{}\n",
                       device.device < 0 ? std::string("?") : std::to_string(device.device), name,
                       formatBytes(device.peak_bytes), seconds(device.peak_time_ns),
                       s.torch_segments
                           ? fmt::format("{}, reserved at most {}",
                                         device.torch_allocated_known
                                             ? ", allocated at most " +
                                                   formatBytes(device.torch_allocated_peak_bytes)
                                             : std::string(),
                                         formatBytes(device.torch_reserved_peak_bytes))
                           : std::string());
  }
  if (s.cut_offset)
    out << fmt::format(
        "  note       the file ends in a partial chunk at byte {} of {} (the "
        "process was killed?): read up to there\n",
        s.cut_offset, s.file_bytes);
  else if (!s.ended_cleanly)
    out << "  note       the trace has no end mark: the process was killed or is still running\n";
  if (s.window_events != UINT64_MAX)
    out << fmt::format(
        "  window     up to where tracing was last stopped, at {}: what came after is "
        "not counted\n",
        seconds(s.window_end_ns));
  if (s.flight.flight)
    out << (s.flight.dropped
                ? fmt::format(
                      "  flight     a flight recorder's file: it kept the {} events from {} on "
                      "(at least {}), the live set at the peak{}; the counts above are the "
                      "whole run's\n",
                      s.flight.kept_events, seconds(s.flight.window_start_ns),
                      s.flight.window_events,
                      s.flight.oom_section ? " and at the first failed allocation" : "")
                : fmt::format(
                      "  flight     a flight recorder's file: every event is still in it (it "
                      "keeps at least the last {})\n",
                      s.flight.window_events));
  if (s.unmatched_frees || s.replaced_allocations)
    out << fmt::format(
        "  note       {} frees of unknown addresses, {} allocations over live "
        "ones (frees made through unhooked calls)\n",
        s.unmatched_frees, s.replaced_allocations);
  out << "\n";
  std::string scope =
      s.device_filter == kAllDevices ? "" : fmt::format(" on device {}", s.device_filter);
  // A flight file's event numbers are its own, not the run's: none is said.
  out << fmt::format("Peak memory{}: {} ({} bytes) at {}{}\n", scope, formatBytes(s.peak_bytes),
                     s.peak_bytes, seconds(s.peak_time_ns),
                     s.flight.dropped ? std::string() : fmt::format(", event {}", s.peak_event));
  out << fmt::format("Total allocated: {}; live at the end: {}\n", formatBytes(s.allocated_bytes),
                     formatBytes(s.end_bytes));
  if (s.torch_segments) {
    // Note [PyTorch's own allocator]: what its segments held beside the tensors at the peak is
    // its cache, its rounding and its fragmentation; none of it is free for another process.
    uint64_t idle =
        s.torch_reserved_at_peak_bytes - std::min(s.torch_reserved_at_peak_bytes, s.peak_bytes);
    if (s.flight.dropped)  // a compacted flight file holds the segments of its kept events only
      out << fmt::format(
          "Reserved by PyTorch's caching allocator: at most {} over the kept events (from {}), "
          "{} at the end; the run's own maximum is not in a flight recorder's file\n",
          formatBytes(s.torch_reserved_peak_bytes), seconds(s.flight.window_start_ns),
          formatBytes(s.torch_reserved_end_bytes));
    else
      out << fmt::format(
          "Reserved by PyTorch's caching allocator: at most {} ({} bytes: max_memory_reserved); "
          "{} at the peak, {} of it in no tensor (rounding, cache, fragmentation); {} at the "
          "end\n",
          formatBytes(s.torch_reserved_peak_bytes), s.torch_reserved_peak_bytes,
          formatBytes(s.torch_reserved_at_peak_bytes), formatBytes(idle),
          formatBytes(s.torch_reserved_end_bytes));
    // Note [Allocated bytes, replayed]: said only where every block was placed.
    if (s.torch_allocated_known)
      out << fmt::format(
          "Allocated by PyTorch's caching allocator: at most {} ({} bytes: "
          "max_memory_allocated, replayed from its rounding and split rules); {} at the peak, "
          "{} of it beyond the requests (rounding, blocks not split)\n",
          formatBytes(s.torch_allocated_peak_bytes), s.torch_allocated_peak_bytes,
          formatBytes(s.torch_allocated_at_peak_bytes),
          formatBytes(s.torch_allocated_at_peak_bytes -
                      std::min(s.torch_allocated_at_peak_bytes, s.peak_bytes)));
    else if (!s.torch_allocator_settings.empty())
      out << fmt::format(
          "Allocated by PyTorch's caching allocator (max_memory_allocated): not known, as the "
          "program set {}, whose rounding or splitting the replay of its blocks does not "
          "follow\n",
          s.torch_allocator_settings);
    else
      out << "Allocated by PyTorch's caching allocator (max_memory_allocated): not known, as "
             "not every block's history is in the trace (attached late, or a flight recorder's "
             "kept window)\n";
  }
  if (const Prediction* prediction = report.prediction) {
    // Against a measured peak of 0 B no percentage means anything: none is given.
    std::string against =
        s.peak_bytes
            ? percent(100.0 * (double(prediction->peak_requested_bytes) - double(s.peak_bytes)) /
                      double(s.peak_bytes)) +
                  " against the measured peak"
            : "nothing measured to compare with";
    out << fmt::format("Predicted peak: {} ({} bytes) by {}: {}\n",
                       formatBytes(prediction->peak_requested_bytes),
                       prediction->peak_requested_bytes, predictionSource(*prediction), against);
    if (!prediction->by_category.empty()) {
      std::string categories;
      for (const auto& [name, bytes] : prediction->by_category)
        categories +=
            fmt::format("{}{} {}", categories.empty() ? "" : ", ", name, formatBytes(bytes));
      out << fmt::format("Predicted categories at the step's peak: {}\n", categories);
    }
  }
  if (!s.markers.empty()) {
    out << "Marks:";
    size_t shown = std::min<size_t>(s.markers.size(), 10);
    for (size_t i = 0; i < shown; ++i) {
      const MarkerSummary& marker = s.markers[i];
      const char* prefix = marker.kind == format::MarkerKind::kPhaseBegin ? "begin "
                           : marker.kind == format::MarkerKind::kPhaseEnd ? "end"
                                                                          : "";
      out << fmt::format(" {}{}@{}", prefix, marker.name, seconds(marker.time_ns));
      if (i + 1 < shown) out << ",";
    }
    if (shown < s.markers.size()) out << fmt::format(" (and {} more)", s.markers.size() - shown);
    out << "\n";
  }
  out << "\n";
  renderTrainingText(out, s, report.prediction);
  renderOomText(out, report);

  const LocationTable& table = report.table;
  size_t shown = shownRows(report);
  out << fmt::format("Live at {} ({} in {} allocations), by {}{}", pointName(report.live_set.point),
                     formatBytes(report.live_set.bytes), report.live_set.allocations.size(),
                     groupByName(table.group_by),
                     table.frame_policy == FramePolicy::kUser ? " in user code" : "");
  if (shown < table.rows.size()) out << fmt::format(", top {} of {}", shown, table.rows.size());
  out << ":\n";
  std::vector<std::optional<uint64_t>> predicted = predictions(report);
  // With an estimate, its prediction for the same location stands beside what was measured.
  std::string predicted_header = report.prediction ? fmt::format("{:<11} ", "Predicted") : "";
  // PyTorch's allocated bytes of each row's tensors, where the replay placed every block (Note
  // [Allocated bytes, replayed]): what max_memory_allocated counts of them.
  if (table.allocated_known) predicted_header += fmt::format("{:<11} ", "Allocated");
  out << fmt::format("{:<11} {}{:<15} {:<11} {:>7}  {}\n", "Mem", predicted_header,
                     "Cumulative Mem", "Median", "Count", "Location");
  for (size_t i = 0; i < shown; ++i) {
    const TableRow& row = table.rows[i];
    std::string predicted_cell;
    if (report.prediction)
      predicted_cell = fmt::format("{:<11} ", predicted[i] ? formatBytes(*predicted[i]) : "-");
    if (table.allocated_known)
      predicted_cell += fmt::format("{:<11} ", formatBytes(row.allocated_bytes));
    out << fmt::format("{:<11} {}{:<15} {:<11} {:>7}  {}\n", formatBytes(row.bytes), predicted_cell,
                       formatBytes(row.cumulative_bytes), formatBytes(row.median_bytes), row.count,
                       row.location.name);
  }
  if (shown < table.rows.size()) {
    uint64_t rest = table.total_bytes - table.rows[shown - 1].cumulative_bytes;
    out << fmt::format("... {} more locations hold {}\n", table.rows.size() - shown,
                       formatBytes(rest));
  }
  OutsideAllocations outside = outsideAllocations(s, report.live_set);
  if (!outside.devices.empty())
    out << fmt::format("{:<11} {}{:<15} {:<11} {:>7}  {}\n", formatBytes(outside.bytes),
                       (report.prediction ? fmt::format("{:<11} ", "-") : "") +
                           (table.allocated_known ? fmt::format("{:<11} ", "-") : ""),
                       formatBytes(table.total_bytes + outside.bytes), "-", "-",
                       "outside any allocation call: context and libraries (below)");
  renderDominantLineText(out, report);
  if (report.prediction) {
    std::vector<PredictionFrameEntry> unmatched = unmatchedEntries(*report.prediction, table);
    std::sort(unmatched.begin(), unmatched.end(),
              [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
    if (!unmatched.empty()) {
      out << "\nPredicted live at the estimator's peak, but not live at the measured "
          << pointName(report.live_set.point) << ":\n";
      size_t listed = report.top ? std::min(report.top, unmatched.size()) : unmatched.size();
      for (size_t i = 0; i < listed; ++i) {
        const PredictionFrameEntry& entry = unmatched[i];
        std::string where = entry.file.empty()
                                ? "<no source line>"
                                : displayPath(entry.file) + ":" + std::to_string(entry.line) +
                                      " (" + entry.function + ")";
        out << fmt::format("{:<11} {}\n", formatBytes(entry.bytes), where);
      }
    }
  }
  renderOutsideText(out, report, outside);
  renderDeviceReadsText(out, report);
  renderSimulatedSizesText(out, report);
  renderAssumedValuesText(out, report);
}

namespace {

nlohmann::json dominantLineJson(const Report& report) {
  if (!report.dominant_line) return nullptr;
  const LineBreakdown& line = *report.dominant_line;
  auto rows = [&](const std::vector<TableRow>& table) {
    nlohmann::json list = nlohmann::json::array();
    size_t shown = report.top ? std::min(report.top, table.size()) : table.size();
    for (size_t i = 0; i < shown; ++i)
      list.push_back({{"location", table[i].location.name},
                      {"bytes", table[i].bytes},
                      {"count", table[i].count}});
    return list;
  };
  return {{"location", line.line.name},
          {"bytes", line.bytes},
          {"share", double(line.bytes) / double(line.point_bytes)},
          {"by_module", rows(line.by_module)},
          {"by_library_line", rows(line.by_library_line)}};
}

}  // namespace

nlohmann::json processJson(const TraceSummary& s) {
  return {{"pid", s.process.pid},
          {"command_line", s.process.command_line},
          {"executable", s.process.executable},
          {"start_unix_ns", s.process.start_unix_ns},
          {"tracer_version", s.process.tracer_version},
          {"stacks", format::stackModeName(s.process.stack_mode)}};
}

// A flight recorder's file (Note [The flight recorder's file]): null for a full trace.
nlohmann::json flightJson(const TraceSummary& s) {
  if (!s.flight.flight) return nullptr;
  return {{"window_events", s.flight.window_events},
          {"dropped", s.flight.dropped},
          {"window_start_ns", s.flight.window_start_ns},
          {"kept_events", s.flight.dropped ? s.flight.kept_events : s.events},
          {"peak_section", s.flight.peak_section},
          {"oom_section", s.flight.oom_section}};
}

nlohmann::json summaryJson(const TraceSummary& s) {
  using nlohmann::json;
  return {{"device_filter", s.device_filter},
          {"peak_bytes", s.peak_bytes},
          {"peak_event", s.peak_event},
          {"peak_time_ns", s.peak_time_ns},
          {"allocated_bytes", s.allocated_bytes},
          {"end_bytes", s.end_bytes},
          {"events", s.events},
          {"allocations", s.allocations},
          {"frees", s.frees},
          {"failed_allocations", s.failed_allocations},
          {"untraced_allocations", s.untraced_allocations},
          {"unmatched_frees", s.unmatched_frees},
          {"duration_ns", s.duration_ns},
          {"level", s.segment_level && s.tensor_level ? "mixed"
                    : s.segment_level                 ? "segment"
                                                      : "tensor"},
          {"ended_cleanly", s.ended_cleanly},
          {"mapped_peak_bytes", s.mapped_peak_bytes},
          {"reserved_peak_bytes", s.reserved_peak_bytes},
          {"torch_reserved_peak_bytes",
           s.torch_segments ? json(s.torch_reserved_peak_bytes) : json(nullptr)},
          {"torch_reserved_at_peak_bytes",
           s.torch_segments ? json(s.torch_reserved_at_peak_bytes) : json(nullptr)},
          {"torch_reserved_end_bytes",
           s.torch_segments ? json(s.torch_reserved_end_bytes) : json(nullptr)},
          {"torch_allocated_peak_bytes",
           s.torch_allocated_known ? json(s.torch_allocated_peak_bytes) : json(nullptr)},
          {"torch_allocated_at_peak_bytes",
           s.torch_allocated_known ? json(s.torch_allocated_at_peak_bytes) : json(nullptr)},
          {"torch_allocated_end_bytes",
           s.torch_allocated_known ? json(s.torch_allocated_end_bytes) : json(nullptr)},
          {"torch_allocator_settings",
           s.torch_allocator_settings.empty() ? json(nullptr) : json(s.torch_allocator_settings)},
          {"device_memory_readings", s.device_memory.size()},
          {"window_end_ns", s.window_events == UINT64_MAX ? json(nullptr) : json(s.window_end_ns)},
          {"cut_offset", s.cut_offset},
          {"open_chunk_offset", s.open_chunk_offset},
          {"flight", flightJson(s)}};
}

nlohmann::json devicesJson(const TraceSummary& s) {
  using nlohmann::json;
  json devices = json::array();
  auto reserved = [&](uint64_t bytes) { return s.torch_segments ? json(bytes) : json(nullptr); };
  for (const DeviceSummary& device : s.devices)
    devices.push_back(
        {{"device", device.device},
         {"torch_reserved_peak_bytes", reserved(device.torch_reserved_peak_bytes)},
         {"torch_reserved_at_peak_bytes", reserved(device.torch_reserved_at_peak_bytes)},
         {"torch_allocated_peak_bytes",
          device.torch_allocated_known ? json(device.torch_allocated_peak_bytes) : json(nullptr)},
         {"torch_allocated_at_peak_bytes", device.torch_allocated_known
                                               ? json(device.torch_allocated_at_peak_bytes)
                                               : json(nullptr)},
         {"name", device.name},
         {"total_bytes", device.total_bytes},
         {"peak_bytes", device.peak_bytes},
         {"peak_event", device.peak_event},
         {"peak_time_ns", device.peak_time_ns},
         {"allocated_bytes", device.allocated_bytes},
         {"end_bytes", device.end_bytes}});
  return devices;
}

nlohmann::json rowsJson(const Report& report, const Prediction* prediction) {
  using nlohmann::json;
  json rows = json::array();
  size_t shown = shownRows(report);
  std::vector<std::optional<uint64_t>> predicted;
  if (prediction) predicted = predictedBytes(*prediction, report.table);
  for (size_t i = 0; i < shown; ++i) {
    const TableRow& row = report.table.rows[i];
    json entry = {{"bytes", row.bytes},
                  {"cumulative_bytes", row.cumulative_bytes},
                  {"median_bytes", row.median_bytes},
                  {"count", row.count},
                  {"location", row.location.name},
                  {"kind", locationKindName(row.location.kind)}};
    if (!row.location.file.empty()) entry["file"] = row.location.file;
    if (row.location.line) entry["line"] = row.location.line;
    if (!row.location.function.empty()) entry["function"] = row.location.function;
    if (!row.location.module.empty()) entry["module"] = row.location.module;
    if (prediction) entry["predicted_bytes"] = predicted[i] ? json(*predicted[i]) : json(nullptr);
    entry["allocated_bytes"] =
        report.table.allocated_known ? json(row.allocated_bytes) : json(nullptr);
    rows.push_back(std::move(entry));
  }
  return rows;
}

void renderJson(std::ostream& out, const Report& report) {
  using nlohmann::json;
  const TraceSummary& s = report.summary;
  json markers = json::array();
  for (const MarkerSummary& marker : s.markers)
    markers.push_back({{"time_ns", marker.time_ns},
                       {"kind", format::markerName(marker.kind)},
                       {"name", marker.name}});
  json rows = rowsJson(report, report.prediction);
  json document = {
      {"trace", report.trace_path},
      {"simulated", simulatedJson(s.simulated)},
      {"process", processJson(s)},
      {"summary", summaryJson(s)},
      {"devices", devicesJson(s)},
      {"markers", markers},
      {"live",
       {{"at", pointName(report.live_set.point)},
        {"event", report.live_set.event},
        {"time_ns", report.live_set.time_ns},
        {"bytes", report.live_set.bytes},
        {"allocated_bytes",
         report.live_set.allocated_known ? json(report.live_set.allocated_bytes) : json(nullptr)},
        {"allocations", report.live_set.allocations.size()},
        {"group_by", groupByName(report.table.group_by)},
        {"frame", report.table.frame_policy == FramePolicy::kUser ? "user" : "innermost"},
        {"locations", report.table.rows.size()},
        {"rows", rows}}}};
  OutsideAllocations outside = outsideAllocations(s, report.live_set);
  if (!outside.devices.empty()) {
    json readings = json::array();
    for (const OutsideReading& device : outside.devices)
      readings.push_back({{"device", device.reading.device},
                          {"time_ns", device.reading.time_ns},
                          {"from_point_ns", device.from_point_ns},
                          {"used_bytes", device.reading.used_bytes},
                          {"total_bytes", device.reading.total_bytes},
                          {"live_bytes", device.reading.live_bytes},
                          {"outside_bytes", device.outside_bytes},
                          {"live_beyond_used_bytes", device.live_beyond_used_bytes}});
    document["live"]["outside_allocations"] = {{"bytes", outside.bytes}, {"devices", readings}};
  }
  document["live"]["dominant_line"] = dominantLineJson(report);
  if (s.training) document["training"] = trainingJson(s, report.prediction);
  document["oom"] = oomJson(report.oom, report.top);
  if (s.simulated || s.device_read_count)
    document["device_reads"] = deviceReadsJson(s, report.device_reads, report.top);
  if (s.simulated || s.simulated_size_count)
    document["simulated_sizes"] = simulatedSizesJson(s, report.simulated_sizes, report.top);
  if (s.assumed_value_count)
    document["assumed_values"] = assumedValuesJson(s, report.assumed_values, report.top);
  if (const Prediction* prediction = report.prediction) {
    json unmatched = json::array();
    for (const PredictionFrameEntry& entry : unmatchedEntries(*prediction, report.table))
      unmatched.push_back({{"file", entry.file},
                           {"line", entry.line},
                           {"function", entry.function},
                           {"bytes", entry.bytes}});
    document["estimate"] = {{"path", prediction->path},
                            {"semantics", prediction->semantics},
                            {"lower_bound", prediction->lower_bound},
                            {"peak_requested_bytes", prediction->peak_requested_bytes},
                            {"peak_allocated_bytes", prediction->peak_allocated_bytes},
                            {"predicted_only", unmatched}};
  }
  // Names come from the traced program and may be any bytes: replace invalid UTF-8.
  out << document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

void renderCsv(std::ostream& out, const Report& report) {
  auto quote = [](const std::string& text) {
    std::string quoted = "\"";
    for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  };
  // Note [Saying a run was simulated]: a column, so that every row says it and a program that
  // reads the CSV reads it as it reads the others.
  const std::optional<reader::SimulatedDeviceInfo>& simulated = report.summary.simulated;
  out << "mem_bytes,cumulative_bytes,median_bytes,count,location,file,line,function";
  out << (report.prediction ? ",predicted_bytes" : "")
      << (report.table.allocated_known ? ",allocated_bytes" : "")
      << (simulated ? ",simulated_profile\n" : "\n");
  size_t shown = shownRows(report);
  std::vector<std::optional<uint64_t>> predicted = predictions(report);
  for (size_t i = 0; i < shown; ++i) {
    const TableRow& row = report.table.rows[i];
    out << row.bytes << ',' << row.cumulative_bytes << ',' << row.median_bytes << ',' << row.count
        << ',' << quote(row.location.name) << ',' << quote(row.location.file) << ','
        << row.location.line << ',' << quote(row.location.function);
    if (report.prediction) {
      out << ',';
      if (predicted[i]) out << *predicted[i];
    }
    if (report.table.allocated_known) out << ',' << row.allocated_bytes;
    if (simulated) out << ',' << quote(simulated->profile_name);
    out << '\n';
  }
}

}  // namespace memtrace::report
