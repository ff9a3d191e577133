#include "estimator/passes/simulate_live_bytes.h"

#include <algorithm>

namespace memtrace::estimator {

LiveBytesPeak simulateLiveBytes(const Graph& graph, const std::vector<TimelineEvent>& timeline) {
  LiveBytesPeak result;
  // First find where the peak is, then replay up to there to list what is live: keeping a
  // copy of the live set at every new maximum would cost a copy per step on a rising curve.
  int64_t live = 0;
  size_t peak_position = 0;
  bool any = false;
  for (size_t position = 0; position < timeline.size(); ++position) {
    const TimelineEvent& event = timeline[position];
    int64_t bytes = graph.storage(event.storage).bytes;
    if (event.kind == MemoryEventKind::kAllocate) {
      live += bytes;
      if (live > result.peak_bytes || !any) {
        result.peak_bytes = live;
        result.peak_node = event.node;
        peak_position = position;
        any = true;
      }
    } else {
      live -= bytes;
    }
  }
  if (!any) return result;
  result.live_at_peak = liveAfter(graph, timeline, peak_position + 1);
  return result;
}

std::vector<StorageId> liveAfter(const Graph& graph, const std::vector<TimelineEvent>& timeline,
                                 size_t events) {
  std::vector<bool> is_live(graph.storages.size(), false);
  for (size_t position = 0; position < std::min(events, timeline.size()); ++position) {
    const TimelineEvent& event = timeline[position];
    is_live[event.storage.value] = event.kind == MemoryEventKind::kAllocate;
  }
  std::vector<StorageId> live;
  for (size_t index = 0; index < is_live.size(); ++index) {
    if (is_live[index]) live.push_back(StorageId(index));
  }
  return live;
}

}  // namespace memtrace::estimator
