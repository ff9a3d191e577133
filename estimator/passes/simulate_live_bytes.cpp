#include "estimator/passes/simulate_live_bytes.h"

namespace memtrace::estimator {

LiveBytesPeak simulateLiveBytes(const Graph& graph, const std::vector<TimelineEvent>& timeline) {
  LiveBytesPeak result;
  // First find where the peak is, then replay up to there to list what is live: keeping a
  // copy of the live set at every new maximum would cost a copy per step on a rising curve.
  int64_t live = 0;
  size_t peakPosition = 0;
  bool any = false;
  for (size_t position = 0; position < timeline.size(); ++position) {
    const TimelineEvent& event = timeline[position];
    int64_t bytes = graph.storage(event.storage).bytes;
    if (event.kind == MemoryEventKind::Allocate) {
      live += bytes;
      if (live > result.peakBytes || !any) {
        result.peakBytes = live;
        result.peakNode = event.node;
        peakPosition = position;
        any = true;
      }
    } else {
      live -= bytes;
    }
  }
  if (!any) return result;

  std::vector<bool> isLive(graph.storages.size(), false);
  for (size_t position = 0; position <= peakPosition; ++position) {
    const TimelineEvent& event = timeline[position];
    isLive[event.storage.value] = event.kind == MemoryEventKind::Allocate;
  }
  for (size_t index = 0; index < isLive.size(); ++index) {
    if (isLive[index]) result.liveAtPeak.push_back(StorageId(index));
  }
  return result;
}

}  // namespace memtrace::estimator
