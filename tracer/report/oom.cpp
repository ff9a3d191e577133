#include "tracer/report/oom.h"

#include <algorithm>

namespace memtrace::report {

std::optional<OomReport> analyzeOom(reader::TraceReader& trace, const TraceSummary& summary,
                                    FramePolicy frame) {
  // A report of another device than the request's has no OOM to show (its live set at that
  // moment is still what --at oom gives).
  if (!summary.first_failure || summary.first_failed_event >= summary.window_events ||
      !selected(summary.device_filter, summary.first_failure->device))
    return std::nullopt;
  OomReport oom;
  oom.request = *summary.first_failure;
  LiveSet live_set = liveSetAt(trace, summary, Point{Point::Kind::kOom, 0});
  // What competes with the request for memory is what was live on its device.
  if (oom.request.device >= 0) {
    std::erase_if(live_set.allocations, [&](const LiveAllocation& allocation) {
      return allocation.device != oom.request.device;
    });
    live_set.bytes = 0;
    for (const LiveAllocation& allocation : live_set.allocations) live_set.bytes += allocation.size;
  }
  oom.live_bytes = live_set.bytes;
  oom.live_allocations = live_set.allocations.size();
  // The tables now define every stack up to the failure, the request's included.
  const reader::Tables& tables = trace.tables();
  Locator lines(tables, GroupBy::kLine, frame);
  LiveAllocation request{0,
                         oom.request.size,
                         oom.request.python_stack,
                         oom.request.native_stack,
                         oom.request.device,
                         oom.request.traced,
                         oom.request.module};
  oom.line = lines.describe(request);
  oom.module = std::string(tables.string(oom.request.module));
  oom.by_line = lines.group(live_set);
  oom.by_module = Locator(tables, GroupBy::kModule, frame).group(live_set);
  if (summary.simulated) {
    oom.memory_bytes = summary.simulated->memory_bytes;
    oom.simulated = true;
  } else {
    for (const DeviceSummary& device : summary.devices)
      if (device.device == oom.request.device) oom.memory_bytes = device.total_bytes;
  }
  if (oom.memory_bytes)
    oom.over_bytes = static_cast<int64_t>(oom.live_bytes + oom.request.size) -
                     static_cast<int64_t>(oom.memory_bytes);
  return oom;
}

}  // namespace memtrace::report
