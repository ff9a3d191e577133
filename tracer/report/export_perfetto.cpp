// Chrome trace event JSON (the "JSON trace format" that Perfetto and chrome://tracing
// open): one counter track of live bytes per device, instant events for the marks, the
// peaks and the failed allocations, and begin/end slices for phases.
#include "tracer/report/export_perfetto.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tracer/common/byte_format.h"
#include "tracer/report/locations.h"
#include "tracer/report/timeline.h"

namespace memtrace::report {
namespace {

using nlohmann::json;

// Trace event times are microseconds; keep the nanoseconds as decimals.
double micros(uint64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

std::string deviceName(int device) {
  return device < 0 ? std::string("device ?") : fmt::format("cuda:{}", device);
}

// Thread ids of the tracks: counters live on the process, marks and phases on their own.
constexpr int kMarksTrack = 1;
constexpr int kPhasesTrack = 2;

}  // namespace

void exportPerfetto(std::ostream& out, reader::TraceReader& trace, const TraceSummary& summary,
                    size_t buckets) {
  const int64_t pid = summary.process.pid;
  bool first = true;
  auto emit = [&](const json& event) {
    out << (first ? "\n" : ",\n") << event.dump(-1, ' ', false, json::error_handler_t::replace);
    first = false;
  };
  std::string command;
  for (const std::string& argument : summary.process.command_line)
    command += (command.empty() ? "" : " ") + argument;
  json metadata = {{"source", "memtrace"},
                   {"command_line", summary.process.command_line},
                   {"pid", pid},
                   {"start_unix_ns", summary.process.start_unix_ns},
                   {"peak_bytes", summary.peak_bytes},
                   {"peak_time_ns", summary.peak_time_ns}};
  out << "{\"displayTimeUnit\": \"ms\", \"metadata\": "
      << metadata.dump(-1, ' ', false, json::error_handler_t::replace) << ", \"traceEvents\": [";
  emit({{"ph", "M"},
        {"name", "process_name"},
        {"pid", pid},
        {"tid", 0},
        {"args", {{"name", "memtrace: " + command}}}});
  emit({{"ph", "M"},
        {"name", "thread_name"},
        {"pid", pid},
        {"tid", kMarksTrack},
        {"args", {{"name", "marks"}}}});
  emit({{"ph", "M"},
        {"name", "thread_name"},
        {"pid", pid},
        {"tid", kPhasesTrack},
        {"args", {{"name", "phases"}}}});

  Locator locator(trace.tables(), GroupBy::kLine, FramePolicy::kUser);
  LocationTable no_lanes;
  TimelineOptions options;
  options.buckets = buckets;
  options.lanes = 0;
  bool marks_written = false;
  for (const DeviceSummary& device : summary.devices) {
    if (summary.device_filter != kAllDevices && device.device != summary.device_filter) continue;
    TraceSummary one_device = summary;
    one_device.device_filter = device.device;
    Timeline timeline = computeTimeline(trace, one_device, locator, no_lanes, options);
    std::string counter = "live bytes " + deviceName(device.device);
    for (const TimelineSample& sample : timeline.samples)
      emit({{"ph", "C"},
            {"name", counter},
            {"pid", pid},
            {"tid", 0},
            {"ts", micros(sample.time_ns)},
            {"args", {{"bytes", sample.bytes}}}});
    emit({{"ph", "i"},
          {"s", "p"},
          {"cat", "peak"},
          {"pid", pid},
          {"tid", kMarksTrack},
          {"name", fmt::format("peak {} on {}", formatBytes(timeline.peak_bytes),
                               deviceName(device.device))},
          {"ts", micros(timeline.peak_time_ns)},
          {"args",
           {{"bytes", timeline.peak_bytes},
            {"device", device.device},
            {"event", timeline.peak_event}}}});
    for (const TimelineFailure& failure : timeline.failures)
      emit({{"ph", "i"},
            {"s", "p"},
            {"cat", "oom"},
            {"pid", pid},
            {"tid", kMarksTrack},
            {"name", fmt::format("out of memory: {} on {}", formatBytes(failure.size),
                                 deviceName(device.device))},
            {"ts", micros(failure.time_ns)},
            {"args", {{"size", failure.size}, {"device", device.device}}}});
    if (marks_written) continue;
    marks_written = true;
    for (const TimelineMark& mark : timeline.marks) {
      const char* kind = format::markerName(mark.kind);
      json event = {{"pid", pid}, {"ts", micros(mark.time_ns)}, {"cat", kind}};
      switch (mark.kind) {
        case format::MarkerKind::kPhaseBegin:
          event.update({{"ph", "B"}, {"tid", kPhasesTrack}, {"name", mark.name}});
          break;
        case format::MarkerKind::kPhaseEnd:
          event.update({{"ph", "E"}, {"tid", kPhasesTrack}});
          break;
        default:
          event.update({{"ph", "i"},
                        {"s", "p"},
                        {"tid", kMarksTrack},
                        {"name", mark.name.empty() ? std::string(kind) : mark.name}});
      }
      emit(event);
    }
  }
  out << "\n]}\n";
}

}  // namespace memtrace::report
