#include "tracer/report/timeline.h"

#include <algorithm>
#include <unordered_map>

#include "tracer/format/peak.h"
#include "tracer/reader/live_set.h"

namespace memtrace::report {
namespace {

using reader::Allocation;
using reader::Event;

// Which lane an allocation's bytes go to, by the name the locator gives its location.
// An allocation's location depends only on whether it was traced and on its Python stack
// (or, without one, its native stack), or on its nn.Module when grouping by module, so the
// answer is cached per stack (or module) id: describe() runs once per distinct one, never
// per event.
class LaneAssigner {
 public:
  LaneAssigner(Locator& locator, const LocationTable& table, size_t lanes,
               const std::unordered_map<uint64_t, format::Category>* categories, bool training,
               const ToldOfAllocations* told = nullptr)
      : locator_(locator),
        by_module_(table.group_by == GroupBy::kModule),
        categories_(categories),
        training_(training),
        told_(told) {
    size_t named = std::min(lanes, table.rows.size());
    for (size_t i = 0; i < named; ++i) lane_of_name_.emplace(table.rows[i].location.name, i);
    other_ = static_cast<uint32_t>(named);
  }

  uint32_t other() const { return other_; }

  // By category: the allocation's category for its whole life, by its event index.
  uint32_t laneOfAllocation(const Event& event, const Allocation& allocation) {
    if (told_ && !lane_of_name_.empty() && (!allocation.traced || by_module_))
      return laneOfTold(event, allocation);
    if (!categories_ || lane_of_name_.empty()) return laneOf(allocation);
    auto told = categories_->find(event.index);
    format::Category category =
        categoryOf(told == categories_->end() ? format::Category::kUnknown : told->second,
                   allocation.traced, training_);
    auto it = lane_of_name_.find(format::categoryName(category));
    return it == lane_of_name_.end() ? other_ : static_cast<uint32_t>(it->second);
  }

  // Note [What was live before tracing]: an untraced allocation is named by what it was told
  // to hold at any time of its life, and an owned one is its module's when grouping by module.
  uint32_t laneOfTold(const Event& event, const Allocation& allocation) {
    auto owner = told_->owners.find(event.index);
    uint32_t module = owner == told_->owners.end() ? allocation.module : owner->second;
    if (by_module_ && (allocation.traced || module))
      return cachedIn(lane_by_module_, module,
                      LiveAllocation{0, 0, 0, 0, 0, allocation.traced, module});
    auto told = told_->categories.find(event.index);
    format::Category category =
        told == told_->categories.end() ? format::Category::kUnknown : told->second;
    LiveAllocation untraced{0, 0, 0, 0, 0, false, module, category};
    return cached(untraced_by_holding_[static_cast<size_t>(untracedHolding(untraced))], untraced);
  }

  // Cached, so the lane of a free (from the allocation it frees) is its allocation's lane.
  uint32_t laneOf(const Allocation& allocation) {
    if (lane_of_name_.empty()) return other_;  // one lane: nothing to tell apart
    if (!allocation.traced) return cached(untraced_, LiveAllocation{0, 0, 0, 0, 0, false, 0});
    if (by_module_)
      return cachedIn(lane_by_module_, allocation.module,
                      LiveAllocation{0, 0, 0, 0, 0, true, allocation.module});
    if (allocation.python_stack)
      return cachedIn(by_python_stack_, allocation.python_stack,
                      LiveAllocation{0, 0, allocation.python_stack, 0, 0, true, 0});
    if (allocation.native_stack)
      return cachedIn(by_native_stack_, allocation.native_stack,
                      LiveAllocation{0, 0, 0, allocation.native_stack, 0, true, 0});
    return cached(no_stack_, LiveAllocation{0, 0, 0, 0, 0, true, 0});
  }

 private:
  uint32_t assign(const LiveAllocation& allocation) {
    auto it = lane_of_name_.find(locator_.describe(allocation).name);
    return it == lane_of_name_.end() ? other_ : static_cast<uint32_t>(it->second);
  }
  uint32_t cached(int64_t& slot, const LiveAllocation& allocation) {
    if (slot < 0) slot = assign(allocation);
    return static_cast<uint32_t>(slot);
  }
  uint32_t cachedIn(std::vector<int32_t>& cache, uint32_t id, const LiveAllocation& allocation) {
    if (cache.size() <= id) cache.resize(std::max<size_t>(id + 1, cache.size() * 2), -1);
    if (cache[id] < 0) cache[id] = static_cast<int32_t>(assign(allocation));
    return static_cast<uint32_t>(cache[id]);
  }

  Locator& locator_;
  std::unordered_map<std::string, size_t> lane_of_name_;
  uint32_t other_ = 0;
  std::vector<int32_t> by_python_stack_;
  std::vector<int32_t> by_native_stack_;
  bool by_module_;
  const std::unordered_map<uint64_t, format::Category>* categories_;
  bool training_;
  std::vector<int32_t> lane_by_module_;
  int64_t untraced_ = -1;
  int64_t no_stack_ = -1;
  const ToldOfAllocations* told_;
  int64_t untraced_by_holding_[static_cast<size_t>(format::Category::kCount)] = {-1, -1, -1, -1,
                                                                                 -1, -1, -1};
};

struct TimelineVisitor : reader::LiveVisitor {
  TimelineVisitor(Timeline& timeline, const TraceSummary& summary, LaneAssigner& lanes,
                  size_t lane_count, uint64_t bucket_ns)
      : timeline(timeline),
        summary(summary),
        lanes(lanes),
        bucket_ns(bucket_ns),
        current(lane_count, 0) {}

  // The three samples a bucket keeps (Note [Timeline downsampling]).
  struct Bucket {
    bool open = false;
    uint64_t index = 0;
    TimelineSample low, high, last;
  };

  TimelineSample now(const Event& event) const {
    return TimelineSample{event.time_ns, event.index, total, current};
  }

  void flush() {
    if (!bucket.open) return;
    TimelineSample* kept[3] = {&bucket.low, &bucket.high, &bucket.last};
    std::sort(std::begin(kept), std::end(kept),
              [](const TimelineSample* a, const TimelineSample* b) { return a->event < b->event; });
    uint64_t previous_event = UINT64_MAX;
    for (TimelineSample* sample : kept) {
      if (sample->event == previous_event) continue;
      previous_event = sample->event;
      timeline.samples.push_back(std::move(*sample));
    }
    bucket.open = false;
  }

  void record(const Event& event) {
    uint64_t index = event.time_ns / bucket_ns;
    if (bucket.open && index != bucket.index) flush();
    if (!bucket.open) {
      bucket.open = true;
      bucket.index = index;
      bucket.low = bucket.high = bucket.last = now(event);
      return;
    }
    if (total < bucket.low.bytes) bucket.low = now(event);
    if (total > bucket.high.bytes) bucket.high = now(event);
    bucket.last.time_ns = event.time_ns;
    bucket.last.event = event.index;
    bucket.last.bytes = total;
    bucket.last.lanes = current;
  }

  // The lane an allocation went to (by its address while it is live): by category, or by what
  // was told of it, it is not a function of the allocation alone.
  uint32_t laneAtFree(uint64_t address, const Allocation& removed) {
    auto found = lane_by_address.find(address);
    if (found == lane_by_address.end()) return lanes.laneOf(removed);
    uint32_t lane = found->second;
    lane_by_address.erase(found);
    return lane;
  }

  void remove(uint64_t address, const Allocation& removed) {
    uint32_t lane = laneAtFree(address, removed);
    if (!selected(summary.device_filter, removed.device)) return;
    total -= std::min(total, removed.size);
    current[lane] -= std::min(current[lane], removed.size);
  }

  // Past the summary's window (Until::kLastStop): the timeline ends with the report.
  bool stopBefore(const Event& event) const { return event.index >= summary.window_events; }

  void onMarker(const reader::Marker& marker) {
    if (summary.window_events != UINT64_MAX && marker.time_ns > summary.window_end_ns) return;
    timeline.marks.push_back(
        TimelineMark{marker.time_ns, marker.kind, std::string(tables->string(marker.name))});
  }

  // Training phases as bands, steps as annotations (timeline.h).
  void onTrainingPhase(uint64_t time_ns, format::TrainingPhase phase) {
    if (summary.window_events != UINT64_MAX && time_ns > summary.window_end_ns) return;
    if (phase == training_phase) return;
    if (training_phase != format::TrainingPhase::kNone)
      timeline.marks.push_back(TimelineMark{time_ns, format::MarkerKind::kPhaseEnd,
                                            format::trainingPhaseName(training_phase)});
    if (phase != format::TrainingPhase::kNone)
      timeline.marks.push_back(
          TimelineMark{time_ns, format::MarkerKind::kPhaseBegin, format::trainingPhaseName(phase)});
    training_phase = phase;
  }

  // A flight recorder's sections stand for dropped events (Note [The flight recorder's
  // file]): each is marked, so that the page says where the line is no record of the run.
  void onSection(const reader::Section& section) {
    const char* name = nullptr;
    switch (section.kind) {
      case format::SectionKind::kPeak:
        name = "the live set at the peak (flight recorder: its events were dropped)";
        break;
      case format::SectionKind::kOutOfMemory:
        name = "the live set at the first failed allocation (flight recorder)";
        break;
      case format::SectionKind::kWindow:
        name = "the kept events begin (flight recorder: the events before were dropped)";
        break;
      default:
        return;
    }
    timeline.marks.push_back(TimelineMark{section.time_ns, format::MarkerKind::kAnnotation, name});
  }
  void onStepPeak(const reader::StepPeak& step) { onStepEnd(step.end_ns, step.step); }

  void onStepEnd(uint64_t time_ns, uint64_t step) {
    if (summary.window_events != UINT64_MAX && time_ns > summary.window_end_ns) return;
    timeline.marks.push_back(
        TimelineMark{time_ns, format::MarkerKind::kAnnotation, "step " + std::to_string(step)});
  }

  void onEvent(const Event&) { ++timeline.events; }

  void onFailedAlloc(const Event& event) {
    if (selected(summary.device_filter, event.context->device))
      timeline.failures.push_back(TimelineFailure{event.time_ns, event.size});
  }

  void onFree(const Event& event, const Allocation& freed) {
    remove(event.address, freed);
    if (selected(summary.device_filter, freed.device)) record(event);
  }

  // An allocation over a live address replaces it, as in summarize(): the sample is taken
  // after the allocation.
  void onImpliedFree(const Event& event, const Allocation& replaced) {
    remove(event.address, replaced);
  }

  void onAlloc(const Event& event, const Allocation& allocation) {
    uint32_t lane = lanes.laneOfAllocation(event, allocation);
    if (keeps_lanes) lane_by_address[event.address] = lane;
    if (!selected(summary.device_filter, allocation.device)) return;
    total += event.size;
    current[lane] += event.size;
    if (allocation.traced && !seen_traced) {
      seen_traced = true;
      timeline.first_traced_ns = event.time_ns;
    }
    if (format::raisePeak(timeline.peak_bytes, total)) {  // Note [New peak]
      timeline.peak_time_ns = event.time_ns;
      timeline.peak_event = event.index;
    }
    record(event);
  }

  Timeline& timeline;
  const TraceSummary& summary;
  const reader::Tables* tables = nullptr;
  LaneAssigner& lanes;
  uint64_t bucket_ns;
  std::vector<uint64_t> current;
  uint64_t total = 0;
  bool seen_traced = false;
  Bucket bucket;
  // The lane is not a function of the allocation alone (by category, or by what was told of
  // it later): kept by address for its free.
  bool keeps_lanes = false;
  std::unordered_map<uint64_t, uint32_t> lane_by_address;
  format::TrainingPhase training_phase = format::TrainingPhase::kNone;
};

}  // namespace

Timeline computeTimeline(reader::TraceReader& trace, const TraceSummary& summary, Locator& locator,
                         const LocationTable& table, const TimelineOptions& options) {
  Timeline timeline;
  // Categories are told after allocations (Note [Training records]): a first pass gathers them.
  std::unordered_map<uint64_t, format::Category> categories;
  bool by_category = table.group_by == GroupBy::kCategory;
  if (by_category) categories = toldCategories(trace, summary);
  // So are owners (Note [Weights and their modules]): the same pass gathers both when a lane is
  // named by what was told (Note [What was live before tracing]).
  bool names_told = false;
  for (size_t i = 0; i < std::min(options.lanes, table.rows.size()); ++i)
    names_told |= table.rows[i].location.kind == LocationKind::kUntraced &&
                  table.rows[i].location.holding != format::Category::kUnknown;
  if (table.group_by == GroupBy::kModule && summary.owner_modules_told) names_told = true;
  ToldOfAllocations told;
  if (names_told && !by_category) told = toldOfAllocations(trace, summary);
  LaneAssigner lanes(locator, table, options.lanes, by_category ? &categories : nullptr,
                     summary.training, names_told && !by_category ? &told : nullptr);
  for (uint32_t i = 0; i < lanes.other(); ++i)
    timeline.lanes.push_back(table.rows[i].location.name);
  timeline.lanes.push_back(options.lanes == 0 ? "all" : "other");
  timeline.duration_ns = summary.duration_ns;
  size_t buckets = std::max<size_t>(options.buckets, 1);
  // +1: the last event's time falls inside the last bucket, not one past it.
  timeline.bucket_ns = std::max<uint64_t>(1, summary.duration_ns / buckets + 1);

  TimelineVisitor visitor(timeline, summary, lanes, timeline.lanes.size(), timeline.bucket_ns);
  visitor.tables = &trace.tables();
  visitor.keeps_lanes = by_category || names_told;
  timeline.samples.push_back(
      TimelineSample{0, 0, 0, std::vector<uint64_t>(timeline.lanes.size(), 0)});
  reader::LiveReplay replay(visitor);
  trace.read(replay);
  visitor.flush();
  if (visitor.training_phase != format::TrainingPhase::kNone)
    timeline.marks.push_back(TimelineMark{timeline.duration_ns, format::MarkerKind::kPhaseEnd,
                                          format::trainingPhaseName(visitor.training_phase)});
  if (!visitor.seen_traced) timeline.first_traced_ns = timeline.duration_ns;
  // The line goes on to the end of the trace at the last value.
  const TimelineSample& last = timeline.samples.back();
  if (last.time_ns < timeline.duration_ns) {
    TimelineSample end = last;
    end.time_ns = timeline.duration_ns;
    timeline.samples.push_back(std::move(end));
  }
  return timeline;
}

}  // namespace memtrace::report
