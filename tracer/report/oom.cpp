#include "tracer/report/oom.h"

#include <algorithm>

namespace memtrace::report {
namespace {

// The fragmentation view of an OOM (OomReport's torch_segments): the tensors of `live_set`
// (sorted by address) laid into its segments on the request's device.
void describeSegments(OomReport& oom, const LiveSet& live_set, Locator& lines) {
  std::vector<OomReport::PinnedSegment> segments;
  auto tensor = live_set.allocations.begin();
  for (const LiveSegment& segment : live_set.segments) {
    if (oom.request.device >= 0 && segment.device != oom.request.device) continue;
    oom.torch_segments = true;
    oom.reserved_bytes += segment.size;
    uint64_t end = segment.address + segment.size;
    while (tensor != live_set.allocations.end() && tensor->address < segment.address) ++tensor;
    OomReport::PinnedSegment pinned;
    pinned.address = segment.address;
    pinned.size = segment.size;
    LiveSet inside;
    uint64_t cursor = segment.address;
    for (; tensor != live_set.allocations.end() && tensor->address < end; ++tensor) {
      uint64_t gap = tensor->address > cursor ? tensor->address - cursor : 0;
      pinned.free_bytes += gap;
      pinned.largest_free_bytes = std::max(pinned.largest_free_bytes, gap);
      cursor = std::max(cursor, std::min(end, tensor->address + tensor->size));
      inside.allocations.push_back(*tensor);
      inside.bytes += tensor->size;
    }
    pinned.free_bytes += end - cursor;
    pinned.largest_free_bytes = std::max(pinned.largest_free_bytes, end - cursor);
    oom.free_in_segments_bytes += pinned.free_bytes;
    oom.largest_free_bytes = std::max(oom.largest_free_bytes, pinned.largest_free_bytes);
    if (pinned.free_bytes == 0 || inside.allocations.empty()) continue;
    pinned.pinned_by = lines.group(inside);
    segments.push_back(std::move(pinned));
  }
  std::stable_sort(segments.begin(), segments.end(),
                   [](const auto& a, const auto& b) { return a.free_bytes > b.free_bytes; });
  if (segments.size() > OomReport::kPinnedSegments) segments.resize(OomReport::kPinnedSegments);
  oom.segments = std::move(segments);
}

}  // namespace

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
  describeSegments(oom, live_set, lines);
  if (summary.simulated) {
    oom.memory_bytes = summary.simulated->memory_bytes;
    oom.simulated = true;
  } else {
    for (const DeviceSummary& device : summary.devices)
      if (device.device == oom.request.device) oom.memory_bytes = device.total_bytes;
  }
  // What the request competed with: PyTorch's reserved memory where its segments are known
  // (its free pieces are the allocator's, not the device's), the live bytes otherwise.
  uint64_t held =
      oom.torch_segments ? std::max(oom.reserved_bytes, oom.live_bytes) : oom.live_bytes;
  if (oom.memory_bytes)
    oom.over_bytes =
        static_cast<int64_t>(held + oom.request.size) - static_cast<int64_t>(oom.memory_bytes);
  return oom;
}

}  // namespace memtrace::report
