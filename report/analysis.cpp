#include "report/analysis.h"

#include <algorithm>

#include "reader/live_set.h"

namespace memtrace::report {
namespace {

using reader::Allocation;
using reader::Event;

struct SummaryVisitor : reader::LiveVisitor {
  explicit SummaryVisitor(TraceSummary& summary, const reader::Tables& tables)
      : summary(summary), tables(tables) {}

  DeviceSummary& device(int index) {
    // Devices are few: a linear search beats a map.
    for (DeviceSummary& d : summary.devices)
      if (d.device == index) return d;
    summary.devices.push_back(DeviceSummary{});
    summary.devices.back().device = index;
    return summary.devices.back();
  }

  void remove(uint64_t size, int device_index) {
    DeviceSummary& d = device(device_index);
    d.end_bytes -= std::min(size, d.end_bytes);
    if (selected(summary.device_filter, device_index)) current -= std::min(size, current);
  }

  void onMarker(const reader::Marker& marker) {
    summary.duration_ns = std::max(summary.duration_ns, marker.time_ns);
    if (marker.kind == format::MarkerKind::kTracingStopped) {
      // What the report says if the window ends here (Until::kLastStop).
      at_last_stop = summary;
      at_last_stop.window_events = summary.events;
      at_last_stop.window_end_ns = marker.time_ns;
      stopped = true;
    }
    if (marker.kind == format::MarkerKind::kTracingStarted) stopped = false;
    switch (marker.kind) {
      case format::MarkerKind::kProcessExit:
      case format::MarkerKind::kTraceClosed:
        summary.ended_cleanly = true;
        break;
      case format::MarkerKind::kAnnotation:
      case format::MarkerKind::kPhaseBegin:
      case format::MarkerKind::kPhaseEnd:
        summary.markers.push_back(
            MarkerSummary{marker.time_ns, marker.kind, std::string(tables.string(marker.name))});
        break;
      default:
        break;
    }
  }

  void onEvent(const Event& event) {
    int index = event.context->device;  // -1 to 63: the reader's bound
    if (index >= 0) devices_with_events |= uint64_t{1} << index;
    ++summary.events;
    summary.duration_ns = std::max(summary.duration_ns, event.time_ns);
    if (event.context->level == format::Level::kSegment)
      summary.segment_level = true;
    else
      summary.tensor_level = true;
  }

  void onFailedAlloc(const Event& event) {
    ++summary.failed_allocations;
    summary.first_failed_event = std::min(summary.first_failed_event, event.index);
  }

  void onUnmatchedFree(const Event&) { ++summary.unmatched_frees; }

  void onFree(const Event&, const Allocation& freed) {
    ++summary.frees;
    remove(freed.size, freed.device);
  }

  // A free we never saw: the new allocation replaces the old.
  void onImpliedFree(const Event&, const Allocation& replaced) {
    ++summary.replaced_allocations;
    remove(replaced.size, replaced.device);
  }

  void onAlloc(const Event& event, const Allocation& allocation) {
    ++summary.allocations;
    if (!event.traced) ++summary.untraced_allocations;
    DeviceSummary& d = device(allocation.device);
    d.allocated_bytes += event.size;
    d.end_bytes += event.size;
    if (d.end_bytes > d.peak_bytes) {
      d.peak_bytes = d.end_bytes;
      d.peak_event = event.index;
      d.peak_time_ns = event.time_ns;
    }
    if (selected(summary.device_filter, allocation.device)) {
      summary.allocated_bytes += event.size;
      current += event.size;
      // The peak is checked after every allocation: a free can only lower it.
      if (current > summary.peak_bytes) {
        summary.peak_bytes = current;
        summary.peak_event = event.index;
        summary.peak_time_ns = event.time_ns;
      }
    }
  }

  TraceSummary& summary;
  const reader::Tables& tables;
  uint64_t current = 0;
  uint64_t devices_with_events = 0;  // bit d: an event ran on device d (the whole file)
  TraceSummary at_last_stop;
  bool stopped = false;  // tracing is stopped at this point of the trace
};

// Replays to the point; the replay's live set is then the answer.
struct LiveSetVisitor : reader::LiveVisitor {
  LiveSetVisitor(LiveSet& result, const TraceSummary& summary) : result(result), summary(summary) {}

  bool stopBefore(const Event& event) const { return pastPoint(summary, result.point, event); }

  void onEvent(const Event& event) {
    result.event = event.index;
    result.time_ns = event.time_ns;
  }

  LiveSet& result;
  const TraceSummary& summary;
};

}  // namespace

bool pastPoint(const TraceSummary& summary, const Point& point, const reader::Event& event) {
  if (event.index >= summary.window_events) return true;
  switch (point.kind) {
    case Point::Kind::kPeak:
      return event.index > summary.peak_event;
    case Point::Kind::kOom:
      return event.index > summary.first_failed_event;
    case Point::Kind::kTime:
      return event.time_ns > point.time_ns;
    case Point::Kind::kEnd:
      return false;
  }
  return false;
}

TraceSummary summarize(reader::TraceReader& trace, int device_filter, Until until) {
  TraceSummary summary;
  summary.device_filter = device_filter;
  SummaryVisitor visitor(summary, trace.tables());
  reader::LiveReplay replay(visitor);
  trace.read(replay);
  if (until == Until::kLastStop && visitor.stopped) {
    // Tracing ended stopped: the report ends at that stop (whether the process ended
    // cleanly is still the whole file's to say).
    bool ended_cleanly = summary.ended_cleanly;
    summary = visitor.at_last_stop;
    summary.ended_cleanly = ended_cleanly;
    summary.duration_ns = summary.window_end_ns;
  }
  const reader::Tables& tables = trace.tables();
  if (device_filter != kAllDevices && !tables.device(device_filter) &&
      !(device_filter >= 0 && device_filter < format::kMaxDevices &&
        (visitor.devices_with_events >> device_filter & 1))) {
    // A filter on a device the trace never names would report 0 B as if it were measured.
    std::string seen;
    for (int index = 0; index < format::kMaxDevices; ++index)
      if (visitor.devices_with_events >> index & 1)
        seen += (seen.empty() ? "" : ", ") + std::to_string(index);
    throw reader::TraceError(trace.path() + ": device " + std::to_string(device_filter) +
                             " is not in the trace (" +
                             (seen.empty() ? "no event names a device" : "devices: " + seen) + ")");
  }
  summary.process = tables.process;
  summary.file_bytes = trace.fileSize();
  summary.cut_offset = trace.cutOffset();
  for (DeviceSummary& device : summary.devices) {
    if (const reader::Device* record = tables.device(device.device)) {
      device.name = std::string(tables.string(record->name));
      device.total_bytes = record->total_bytes;
    }
  }
  std::sort(summary.devices.begin(), summary.devices.end(),
            [](const DeviceSummary& a, const DeviceSummary& b) { return a.device < b.device; });
  summary.end_bytes = 0;
  for (const DeviceSummary& device : summary.devices)
    if (selected(device_filter, device.device)) summary.end_bytes += device.end_bytes;
  return summary;
}

LiveSet liveSetAt(reader::TraceReader& trace, const TraceSummary& summary, Point point) {
  if (point.kind == Point::Kind::kOom && summary.first_failed_event == UINT64_MAX)
    throw reader::TraceError(trace.path() + ": the trace has no failed allocation (no OOM)");
  LiveSet result;
  result.point = point;
  LiveSetVisitor visitor(result, summary);
  reader::LiveReplay replay(visitor);
  trace.read(replay);
  replay.live().forEach([&](uint64_t address, const Allocation& entry) {
    if (!selected(summary.device_filter, entry.device)) return;
    result.allocations.push_back(LiveAllocation{address, entry.size, entry.python_stack,
                                                entry.native_stack, entry.device, entry.traced,
                                                entry.module});
    result.bytes += entry.size;
  });
  // Table order depends on hashing; sort by address for a deterministic result.
  std::sort(result.allocations.begin(), result.allocations.end(),
            [](const LiveAllocation& a, const LiveAllocation& b) { return a.address < b.address; });
  return result;
}

}  // namespace memtrace::report
