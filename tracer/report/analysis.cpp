#include "tracer/report/analysis.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "tracer/format/peak.h"
#include "tracer/format/ranges.h"
#include "tracer/reader/live_set.h"
#include "tracer/report/block_replay.h"

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

  // Note [Sizes in the trace]: what allocations sized by unknown answers hold now.
  static void count(UnknownSizes& sizes, const Allocation& allocation, bool add) {
    bool bounded = allocation.size_at_most != UINT64_MAX;
    uint64_t extra = bounded && allocation.size_at_most > allocation.size
                         ? allocation.size_at_most - allocation.size
                         : 0;
    if (add) {
      sizes.bytes += allocation.size;
      sizes.extra_bytes += extra;
      sizes.unbounded += bounded ? 0 : 1;
    } else {
      sizes.bytes -= std::min(sizes.bytes, allocation.size);
      sizes.extra_bytes -= std::min(sizes.extra_bytes, extra);
      sizes.unbounded -= std::min<uint64_t>(sizes.unbounded, bounded ? 0 : 1);
    }
  }
  void unknownGone(const Allocation& gone) {
    if (gone.unknown_size && selected(summary.device_filter, gone.device))
      count(unknown_now, gone, false);
  }

  void onSizeAnswer(const reader::SimulatedSize& size, const Allocation* linked, bool newly) {
    summary.duration_ns = std::max(summary.duration_ns, size.time_ns);
    if (!selected(summary.device_filter, size.context->device)) return;
    ++summary.simulated_size_count;
    SizeKey key{size.python_stack, size.native_stack, size.traced, size.question};
    auto [found, added] = size_sites.try_emplace(key, summary.simulated_sizes.size());
    if (added) {
      SimulatedSizeSite site;
      site.python_stack = size.python_stack;
      site.native_stack = size.native_stack;
      site.traced = size.traced;
      site.module = size.module;
      site.question = size.question;
      summary.simulated_sizes.push_back(site);
    }
    SimulatedSizeSite& site = summary.simulated_sizes[found->second];
    ++site.count;
    site.bytes = std::max(site.bytes, size.bytes);
    site.at_most = std::max(site.at_most, size.at_most);
    site.certainty = std::max(site.certainty, size.certainty);
    if (size.bytes == 0 && !size.address) {
      summary.unheld_size_unbounded |= size.at_most == UINT64_MAX;
      if (size.at_most != UINT64_MAX)
        summary.unheld_size_at_most = std::max(summary.unheld_size_at_most, size.at_most);
    }
    if (!linked || !newly || !selected(summary.device_filter, linked->device)) return;
    count(unknown_now, *linked, true);
    // Allocated at or before the peak and live since: it was live at the peak.
    if (summary.peak_bytes && linked->index <= summary.peak_event)
      count(summary.unknown_sizes_at_peak, *linked, true);
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
    if (marker.kind == format::MarkerKind::kAnnotation) {
      std::string_view name = tables.string(marker.name);
      if (name.starts_with(format::kAllocatorSettingsMark)) {
        // Note [Allocated bytes, replayed]: rules other than the default ones.
        blocks.loseAll();
        summary.torch_allocator_settings =
            std::string(name.substr(std::string_view(format::kAllocatorSettingsMark).size()));
      }
    }
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

  void onCategory(uint64_t, format::Category, const Allocation* allocation) {
    summary.training = true;
    ++summary.categories_told;
    if (!allocation) ++summary.categories_ignored;
  }
  void onOwnerModule(uint64_t, uint32_t, const Allocation*) { ++summary.owner_modules_told; }

  void onTrainingPhase(uint64_t time_ns, format::TrainingPhase new_phase) {
    summary.training = true;
    summary.duration_ns = std::max(summary.duration_ns, time_ns);
    phase = new_phase;
  }

  // The flight recorder's records (Note [The flight recorder's file]).
  void onSection(const reader::Section& section) {
    FlightSummary& flight = summary.flight;
    flight.flight = true;
    flight.window_events = section.window_events;
    phase = section.phase;
    switch (section.kind) {
      case format::SectionKind::kPeak:
        flight.peak_section = true;
        break;
      case format::SectionKind::kOutOfMemory:
        flight.oom_section = true;
        break;
      case format::SectionKind::kWindow:
        flight.dropped = true;
        flight.window_start_ns = section.time_ns;
        apply_totals = true;
        break;
      case format::SectionKind::kFrame:
        if (apply_totals) applyTotals(section);
        break;
      case format::SectionKind::kCount:
        break;
    }
  }

  // At the first frame after a kWindow: the run's counts up to there stand in for what the
  // replay counted of the sections before it. Event indices stay the file's own.
  void applyTotals(const reader::Section& section) {
    apply_totals = false;
    // The events before the kept ones are gone, and with them the blocks they placed.
    blocks.loseAll();
    const reader::RunTotals& totals = section.totals;
    summary.events = totals.events;
    summary.allocations = totals.allocations;
    summary.frees = totals.frees;
    summary.failed_allocations = totals.failed_allocations;
    summary.untraced_allocations = totals.untraced_allocations;
    summary.allocated_bytes = 0;
    for (DeviceSummary& d : summary.devices) d.allocated_bytes = 0;
    for (const reader::DeviceTotals& totals_of : totals.devices) {
      DeviceSummary& d = device(totals_of.device);
      d.allocated_bytes = totals_of.allocated_bytes;
      if (totals_of.peak_bytes > d.peak_bytes) {
        d.peak_bytes = totals_of.peak_bytes;
        d.peak_time_ns = totals_of.peak_time_ns;
        d.peak_event = UINT64_MAX;  // dropped
      }
      if (selected(summary.device_filter, totals_of.device))
        summary.allocated_bytes += totals_of.allocated_bytes;
    }
    if (summary.device_filter == kAllDevices) summary.allocated_bytes = totals.allocated_bytes;
    summary.flight.kept_events = 0;
    counting_kept = true;
    // The step under way began before the kept events: its peak is counted from here.
    step = StepSummary{};
    step.step = summary.steps.empty() ? 1 : summary.steps.back().step + 1;
    step.begin_ns = summary.steps.empty() ? 0 : summary.steps.back().end_ns;
  }

  void onStepPeak(const reader::StepPeak& peak) {
    summary.training = true;
    step_peaks = true;
    summary.duration_ns = std::max(summary.duration_ns, peak.end_ns);
    StepSummary recorded;
    recorded.step = peak.step;
    recorded.finished = true;
    recorded.begin_ns = peak.begin_ns;
    recorded.end_ns = peak.end_ns;
    recorded.peak_bytes = peak.peak_bytes;
    recorded.peak_time_ns = peak.peak_time_ns;
    recorded.peak_phase = peak.phase;
    summary.steps.push_back(recorded);
    step_modules.push_back(peak.module);
    step = StepSummary{};
    step.step = peak.step + 1;
    step.begin_ns = peak.end_ns;
  }

  void onStepEnd(uint64_t time_ns, uint64_t number) {
    summary.training = true;
    summary.duration_ns = std::max(summary.duration_ns, time_ns);
    step.step = number;
    step.finished = true;
    step.end_ns = time_ns;
    summary.steps.push_back(step);
    step_modules.push_back(step_module);
    step = StepSummary{};
    step.step = number + 1;
    step.begin_ns = time_ns;
  }

  void onEvent(const Event& event) {
    int index = event.context->device;  // -1 to 63: the reader's bound
    if (index >= 0) devices_with_events |= uint64_t{1} << index;
    ++summary.events;
    if (counting_kept) ++summary.flight.kept_events;
    summary.duration_ns = std::max(summary.duration_ns, event.time_ns);
    if (event.context->level == format::Level::kSegment)
      summary.segment_level = true;
    else
      summary.tensor_level = true;
    if (event.context->api == format::Api::kCuMemCreate) summary.physical_memory = true;
  }

  // PyTorch's reserved memory (Note [PyTorch's own allocator]): up and down by what each record
  // says, as PyTorch counts reserved_bytes.
  void onSegment(const reader::Segment& segment) {
    blocks.onSegment(segment);
    summary.torch_segments = true;
    summary.duration_ns = std::max(summary.duration_ns, segment.time_ns);
    DeviceSummary& d = device(segment.device);
    bool grows = segment.grows();
    change(d.torch_reserved_end_bytes, d.torch_reserved_peak_bytes, segment.size, grows);
    if (selected(summary.device_filter, segment.device))
      change(torch_reserved, summary.torch_reserved_peak_bytes, segment.size, grows);
  }

  void onDeviceMemory(const reader::DeviceMemory& reading) {
    summary.duration_ns = std::max(summary.duration_ns, reading.time_ns);
    summary.device_memory.push_back(
        DeviceMemoryReading{reading.time_ns, summary.events, reading.device, reading.usedBytes(),
                            reading.total_bytes, device(reading.device).end_bytes});
  }

  // Mapped and reserved bytes go up and down by the records' sizes: cuMemUnmap and
  // cuMemAddressFree take whole mappings and reservations.
  static void change(uint64_t& bytes, uint64_t& peak, uint64_t size, bool up) {
    bytes = up ? bytes + size : bytes - std::min(size, bytes);
    peak = std::max(peak, bytes);
  }
  void onMemoryMap(const reader::MemoryMap& map) {
    change(mapped, summary.mapped_peak_bytes, map.size, true);
  }
  void onMemoryUnmap(const reader::AddressRange& range) {
    change(mapped, summary.mapped_peak_bytes, range.size, false);
  }
  void onAddressReserve(const reader::AddressRange& range) {
    change(reserved, summary.reserved_peak_bytes, range.size, true);
  }
  void onAddressFree(const reader::AddressRange& range) {
    change(reserved, summary.reserved_peak_bytes, range.size, false);
  }

  void onFailedAlloc(const Event& event) {
    ++summary.failed_allocations;
    if (summary.first_failed_event != UINT64_MAX) return;
    summary.first_failed_event = event.index;
    summary.first_failure = FailedRequest{event.index,           event.time_ns,      event.size,
                                          event.python_stack,    event.native_stack, event.module,
                                          event.context->device, event.traced};
  }

  void onDeviceRead(const reader::DeviceRead& read) {
    summary.duration_ns = std::max(summary.duration_ns, read.time_ns);
    if (!selected(summary.device_filter, read.context->device)) return;
    ++summary.device_read_count;
    summary.device_read_bytes += read.bytes;
    // By stacks as written: the distinct sites are few (the tables bound them), the reads not.
    ReadKey key{read.python_stack, read.native_stack, read.traced};
    auto [found, added] = read_sites.try_emplace(key, summary.device_reads.size());
    if (added)
      summary.device_reads.push_back(
          DeviceReadSite{read.python_stack, read.native_stack, read.traced, read.module, 0, 0});
    DeviceReadSite& site = summary.device_reads[found->second];
    ++site.count;
    site.bytes += read.bytes;
  }

  void onAssumedValue(const reader::AssumedValue& value) {
    summary.duration_ns = std::max(summary.duration_ns, value.time_ns);
    if (!selected(summary.device_filter, value.context->device)) return;
    ++summary.assumed_value_count;
    // By stacks and what was assumed, as the reads are by stacks.
    AssumedKey key{ReadKey{value.python_stack, value.native_stack, value.traced}, value.assumed};
    auto [found, added] = assumed_sites.try_emplace(key, summary.assumed_values.size());
    if (added)
      summary.assumed_values.push_back(AssumedValueSite{
          value.python_stack, value.native_stack, value.traced, value.module, value.assumed, 0});
    ++summary.assumed_values[found->second].count;
  }

  void onUnmatchedFree(const Event&) { ++summary.unmatched_frees; }

  void onFree(const Event& event, const Allocation& freed) {
    ++summary.frees;
    remove(freed.size, freed.device);
    unknownGone(freed);
    if (event.context->api == format::Api::kTorchAllocator)
      changeAllocated(freed.device, blocks.onFree(freed.device, event.address), false);
  }

  // A free we never saw: the new allocation replaces the old.
  void onImpliedFree(const Event&, const Allocation& replaced) {
    ++summary.replaced_allocations;
    remove(replaced.size, replaced.device);
    unknownGone(replaced);
    blocks.lose(replaced.device);
  }

  // PyTorch's allocated bytes (Note [Allocated bytes, replayed]), by a block's size.
  void changeAllocated(int device_index, uint64_t block, bool up) {
    DeviceSummary& d = device(device_index);
    change(d.torch_allocated_end_bytes, d.torch_allocated_peak_bytes, block, up);
    if (selected(summary.device_filter, device_index))
      change(torch_allocated, summary.torch_allocated_peak_bytes, block, up);
  }

  void onAlloc(const Event& event, const Allocation& allocation) {
    ++summary.allocations;
    if (!event.traced) ++summary.untraced_allocations;
    if (event.context->api == format::Api::kTorchAllocator) {
      // A block told at the attach (Note [Attaching from the package]) was placed before the
      // replay saw its segment's history.
      if (!event.traced) blocks.lose(allocation.device);
      changeAllocated(allocation.device,
                      blocks.onAlloc(allocation.device, event.address, event.size), true);
    }
    DeviceSummary& d = device(allocation.device);
    d.allocated_bytes += event.size;
    d.end_bytes += event.size;
    if (format::raisePeak(d.peak_bytes, d.end_bytes)) {
      d.peak_event = event.index;
      d.peak_time_ns = event.time_ns;
      d.torch_reserved_at_peak_bytes = d.torch_reserved_end_bytes;
      d.torch_allocated_at_peak_bytes = d.torch_allocated_end_bytes;
    }
    if (selected(summary.device_filter, allocation.device)) {
      summary.allocated_bytes += event.size;
      current += event.size;
      if (allocation.unknown_size) count(unknown_now, allocation, true);
      // Note [New peak]: the trace's, and each step's.
      if (format::raisePeak(summary.peak_bytes, current)) {
        summary.peak_event = event.index;
        summary.peak_time_ns = event.time_ns;
        summary.torch_reserved_at_peak_bytes = torch_reserved;
        summary.torch_allocated_at_peak_bytes = torch_allocated;
        summary.unknown_sizes_at_peak = unknown_now;
      }
      if (format::raisePeak(step.peak_bytes, current)) {
        step.peak_event = event.index;
        step.peak_time_ns = event.time_ns;
        step.peak_phase = phase;
        step_module = event.module;
      }
    }
  }

  struct ReadKey {
    uint32_t python_stack;
    uint32_t native_stack;
    bool traced;
    bool operator==(const ReadKey&) const = default;
  };
  struct ReadKeyHash {
    size_t operator()(const ReadKey& key) const {
      return (uint64_t{key.python_stack} << 33 | uint64_t{key.native_stack} << 1 | key.traced) *
             0x9E3779B97F4A7C15ULL;
    }
  };

  struct SizeKey {
    uint32_t python_stack;
    uint32_t native_stack;
    bool traced;
    uint32_t question;
    bool operator==(const SizeKey&) const = default;
  };
  struct SizeKeyHash {
    size_t operator()(const SizeKey& key) const {
      return (ReadKeyHash{}(ReadKey{key.python_stack, key.native_stack, key.traced}) ^
              key.question) *
             0x9E3779B97F4A7C15ULL;
    }
  };
  struct AssumedKey {
    ReadKey where;
    uint32_t assumed;
    bool operator==(const AssumedKey&) const = default;
  };
  struct AssumedKeyHash {
    size_t operator()(const AssumedKey& key) const {
      return ReadKeyHash{}(key.where) ^ (uint64_t{key.assumed} * 0xC2B2AE3D27D4EB4FULL);
    }
  };

  TraceSummary& summary;
  const reader::Tables& tables;
  std::unordered_map<ReadKey, size_t, ReadKeyHash> read_sites;  // index into device_reads
  std::unordered_map<SizeKey, size_t, SizeKeyHash> size_sites;  // into simulated_sizes
  UnknownSizes unknown_now;  // Note [Sizes in the trace]: held now, on the selected devices
  // Index into assumed_values.
  std::unordered_map<AssumedKey, size_t, AssumedKeyHash> assumed_sites;
  uint64_t current = 0;
  uint64_t mapped = 0;           // bytes mapped now
  uint64_t reserved = 0;         // bytes of address space reserved now
  uint64_t torch_reserved = 0;   // PyTorch's reserved memory now (selected devices)
  uint64_t torch_allocated = 0;  // PyTorch's allocated bytes now (selected devices)
  BlockReplay blocks;            // the blocks PyTorch handed out (Note [Allocated bytes, replayed])
  uint64_t devices_with_events = 0;  // bit d: an event ran on device d (the whole file)
  TraceSummary at_last_stop;
  bool stopped = false;  // tracing is stopped at this point of the trace
  format::TrainingPhase phase = format::TrainingPhase::kNone;
  StepSummary step;                    // the step the trace is in
  uint32_t step_module = 0;            // the module of its peak's allocation
  std::vector<uint32_t> step_modules;  // of summary.steps'
  bool apply_totals = false;           // a kWindow was read: the next kFrame's totals are the run's
  bool counting_kept = false;
  bool step_peaks = false;  // the steps come from kStepPeak records (a flight file)
};

// Replays the trace once and copies the live set right after each event of `targets`
// (sorted), then goes on reading to apply the categories told later to those copies, each
// until its allocation is freed: what the allocation was, told when the package learnt it.
struct SnapshotVisitor : reader::LiveVisitor {
  SnapshotVisitor(const TraceSummary& summary, std::vector<uint64_t> targets)
      : summary(summary), targets(std::move(targets)), snapshots(this->targets.size()) {}

  bool stopBefore(const Event& event) const { return event.index >= summary.window_events; }

  void unwatch(uint64_t address) { watches.erase(address); }
  // Each of these comes after its event changed the live set.
  void onFree(const Event& event, const Allocation&) {
    unwatch(event.address);
    snapshotAfter(event);
  }
  void onImpliedFree(const Event& event, const Allocation&) { unwatch(event.address); }
  void onAlloc(const Event& event, const Allocation&) { snapshotAfter(event); }
  void onUnmatchedFree(const Event& event) { snapshotAfter(event); }
  void onFailedAlloc(const Event& event) { snapshotAfter(event); }

  void snapshotAfter(const Event& event) {
    while (next < targets.size() && targets[next] == event.index) {
      std::vector<LiveAllocation>& copy = snapshots[next];
      live->forEach([&](uint64_t address, const Allocation& entry) {
        if (!selected(summary.device_filter, entry.device)) return;
        copy.push_back(LiveAllocation{address, entry.size, entry.python_stack, entry.native_stack,
                                      entry.device, entry.traced, entry.module, entry.category});
        copy.back().phase = entry.phase;
      });
      std::sort(copy.begin(), copy.end(), [](const LiveAllocation& a, const LiveAllocation& b) {
        return a.address < b.address;
      });
      for (size_t i = 0; i < copy.size(); ++i) watches[copy[i].address].emplace_back(next, i);
      ++next;
    }
  }

  void onCategory(uint64_t address, format::Category category, const Allocation* allocation) {
    if (!allocation) return;
    auto found = watches.find(address);
    if (found == watches.end()) return;
    for (auto [snapshot, index] : found->second) snapshots[snapshot][index].category = category;
  }
  void onOwnerModule(uint64_t address, uint32_t module, const Allocation* allocation) {
    if (!allocation) return;
    auto found = watches.find(address);
    if (found == watches.end()) return;
    for (auto [snapshot, index] : found->second) snapshots[snapshot][index].module = module;
  }

  const TraceSummary& summary;
  std::vector<uint64_t> targets;
  std::vector<std::vector<LiveAllocation>> snapshots;
  const format::LiveTable<Allocation>* live = nullptr;
  size_t next = 0;
  // Live allocations copied into a snapshot, by address: (snapshot, index in it).
  std::unordered_map<uint64_t, std::vector<std::pair<size_t, size_t>>> watches;
};

// The live sets right after the events `targets` (sorted, unique), categories resolved.
std::vector<std::vector<LiveAllocation>> snapshotsAt(reader::TraceReader& trace,
                                                     const TraceSummary& summary,
                                                     std::vector<uint64_t> targets) {
  SnapshotVisitor visitor(summary, std::move(targets));
  reader::LiveReplay replay(visitor);
  visitor.live = &replay.live();
  trace.read(replay);
  for (std::vector<LiveAllocation>& snapshot : visitor.snapshots)
    for (LiveAllocation& allocation : snapshot)
      allocation.category = categoryOf(allocation.category, allocation.traced, summary.training);
  return std::move(visitor.snapshots);
}

// Replays to the point; the replay's live set is then the answer.
struct LiveSetVisitor : reader::LiveVisitor {
  LiveSetVisitor(LiveSet& result, const TraceSummary& summary) : result(result), summary(summary) {}

  bool stopBefore(const Event& event) const { return pastPoint(summary, result.point, event); }

  void onEvent(const Event& event) {
    result.event = event.index;
    result.time_ns = event.time_ns;
    result.last_allocation.reset();
    seen_event = true;
  }
  void onAlloc(const Event& event, const Allocation& allocation) {
    result.last_allocation = event.address;
    if (event.context->api == format::Api::kTorchAllocator)
      blocks.onAlloc(allocation.device, event.address, event.size);
  }
  void onFree(const Event& event, const Allocation& freed) {
    if (event.context->api == format::Api::kTorchAllocator)
      blocks.onFree(freed.device, event.address);
  }

  // Reserved memory as the kSegment records say, up to the point: a range taken out may cut
  // ranges put in by other records (an expandable segment unmaps by the block).
  void onSegment(const reader::Segment& segment) {
    blocks.onSegment(segment);
    if (!selected(summary.device_filter, segment.device) || pastPointAlready(segment)) return;
    if (segment.grows()) {
      segments[segment.address] = LiveSegment{segment.address, segment.size, segment.device,
                                              segment.graph_pool, segment.user_pool};
      return;
    }
    format::cutRanges(
        segments, segment.address, segment.address + segment.size,
        [](uint64_t, const LiveSegment& cut) { return cut.address + cut.size; },
        [](LiveSegment cut, uint64_t from, uint64_t to) {
          cut.address = from;
          cut.size = to - from;
          return cut;
        });
  }

  // Whether `segment` comes after the point: after the event that is the point (a peak's
  // allocation, the failed allocation), or past its time. Events stop the replay themselves
  // (stopBefore); records between events do not.
  bool pastPointAlready(const reader::Segment& segment) const {
    switch (result.point.kind) {
      case Point::Kind::kPeak:
        return seen_event && result.event >= summary.peak_event;
      case Point::Kind::kOom:
        return seen_event && result.event >= summary.first_failed_event;
      case Point::Kind::kTime:
        return segment.time_ns > result.point.time_ns;
      case Point::Kind::kEnd:
        return false;
    }
    return false;
  }

  LiveSet& result;
  const TraceSummary& summary;
  std::map<uint64_t, LiveSegment> segments;
  // The blocks PyTorch handed out, placed as the summary's pass places them (its conditions for
  // losing a device decide whether they are known: TraceSummary::torch_allocated_known).
  BlockReplay blocks;
  bool seen_event = false;
};

// Like SnapshotVisitor, for many points at once (every step's peak), keeping only their
// bytes by category, so that memory stays the live set's however many steps a trace has: an
// allocation live at some of the points is in every one from the first after its allocation
// to the last before its free, so a category told later moves its bytes in that range.
struct CategoryBytesVisitor : reader::LiveVisitor {
  CategoryBytesVisitor(const TraceSummary& summary, const std::vector<uint64_t>& targets)
      : summary(summary), targets(targets), bytes(targets.size()) {}

  bool stopBefore(const Event& event) const { return event.index >= summary.window_events; }

  void onFree(const Event& event, const Allocation&) {
    watches.erase(event.address);
    bytesAfter(event);
  }
  void onImpliedFree(const Event& event, const Allocation&) { watches.erase(event.address); }
  void onAlloc(const Event& event, const Allocation&) { bytesAfter(event); }
  void onUnmatchedFree(const Event& event) { bytesAfter(event); }
  void onFailedAlloc(const Event& event) { bytesAfter(event); }

  void bytesAfter(const Event& event) {
    while (next < targets.size() && targets[next] == event.index) {
      live->forEach([&](uint64_t address, const Allocation& entry) {
        if (!selected(summary.device_filter, entry.device)) return;
        format::Category category = categoryOf(entry.category, entry.traced, summary.training);
        bytes[next][static_cast<size_t>(category)] += entry.size;
        watches.try_emplace(address, Watch{next, entry.size, category});
      });
      ++next;
    }
  }

  void onCategory(uint64_t address, format::Category told, const Allocation* allocation) {
    if (!allocation) return;
    auto found = watches.find(address);
    if (found == watches.end()) return;
    Watch& watch = found->second;
    format::Category category = categoryOf(told, allocation->traced, summary.training);
    for (size_t i = watch.first; i < next; ++i) {
      bytes[i][static_cast<size_t>(watch.category)] -= watch.size;
      bytes[i][static_cast<size_t>(category)] += watch.size;
    }
    watch.category = category;
  }

  struct Watch {
    size_t first;  // the first point it was live at
    uint64_t size;
    format::Category category;  // as counted at the points so far
  };
  const TraceSummary& summary;
  const std::vector<uint64_t>& targets;
  std::vector<CategoryBytes> bytes;
  const format::LiveTable<Allocation>* live = nullptr;
  size_t next = 0;
  std::unordered_map<uint64_t, Watch> watches;  // live allocations counted at some point
};

// The event index of each live allocation, and the categories told to them.
struct ToldVisitor : reader::LiveVisitor {
  void onAlloc(const Event& event, const Allocation&) { index_of[event.address] = event.index; }
  void onFree(const Event& event, const Allocation&) { index_of.erase(event.address); }
  void onCategory(uint64_t address, format::Category category, const Allocation* allocation) {
    auto found = index_of.find(address);
    if (allocation && found != index_of.end()) told[found->second] = category;
  }
  void onOwnerModule(uint64_t address, uint32_t module, const Allocation* allocation) {
    auto found = index_of.find(address);
    if (allocation && found != index_of.end()) owners[found->second] = module;
  }

  std::unordered_map<uint64_t, uint64_t> index_of;
  std::unordered_map<uint64_t, format::Category> told;
  std::unordered_map<uint64_t, uint32_t> owners;
};

}  // namespace

format::Category untracedHolding(const LiveAllocation& allocation) {
  switch (allocation.category) {
    case format::Category::kGradient:
    case format::Category::kOptimizerState:
    case format::Category::kActivation:
    case format::Category::kInput:
      // A module owns its parameters' gradients and optimizer state too (Note [Everything a
      // parameter has is its module's] in python/mem_tracer/training.py): what it holds is
      // its category, whichever module owns it.
      return allocation.category;
    case format::Category::kUnknown:
    case format::Category::kParameter:
    case format::Category::kTemporary:
    case format::Category::kCount:
      break;
  }
  // An owner module with no other category told: a parameter or a buffer (Note [Weights and
  // their modules]).
  if (allocation.module != 0 || allocation.category == format::Category::kParameter)
    return format::Category::kParameter;
  return format::Category::kUnknown;
}

const char* untracedName(format::Category holding) {
  switch (holding) {
    case format::Category::kParameter:
      return "weights, allocated before tracing";
    case format::Category::kInput:
      return "inputs, allocated before tracing";
    case format::Category::kGradient:
      return "gradients, allocated before tracing";
    case format::Category::kOptimizerState:
      return "optimizer state, allocated before tracing";
    case format::Category::kActivation:
      return "activations, allocated before tracing";
    case format::Category::kUnknown:
    case format::Category::kTemporary:
    case format::Category::kCount:
      break;
  }
  return "untraced";
}

format::Category categoryOf(format::Category told, bool traced, bool training) {
  if (told != format::Category::kUnknown) return told;
  return training && traced ? format::Category::kTemporary : format::Category::kUnknown;
}

std::unordered_map<uint64_t, format::Category> toldCategories(reader::TraceReader& trace,
                                                              const TraceSummary& summary) {
  ToldVisitor visitor;
  if (!summary.training) return {};
  reader::LiveReplay replay(visitor);
  trace.read(replay);
  return std::move(visitor.told);
}

ToldOfAllocations toldOfAllocations(reader::TraceReader& trace, const TraceSummary& summary) {
  ToldVisitor visitor;
  if (!summary.training && !summary.owner_modules_told) return {};
  reader::LiveReplay replay(visitor);
  trace.read(replay);
  return ToldOfAllocations{std::move(visitor.told), std::move(visitor.owners)};
}

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
  summary.simulated = tables.simulated;
  summary.file_bytes = trace.fileSize();
  summary.cut_offset = trace.cutOffset();
  summary.open_chunk_offset = trace.openChunkOffset();
  if (trace.flags() & format::FileFlags::kFlight) summary.flight.flight = true;
  for (DeviceSummary& device : summary.devices) {
    if (const reader::Device* record = tables.device(device.device)) {
      device.name = std::string(tables.string(record->name));
      device.total_bytes = record->total_bytes;
    }
  }
  std::sort(summary.devices.begin(), summary.devices.end(),
            [](const DeviceSummary& a, const DeviceSummary& b) { return a.device < b.device; });
  summary.end_bytes = 0;
  summary.torch_reserved_end_bytes = 0;
  summary.torch_allocated_end_bytes = 0;
  summary.torch_allocated_known = summary.torch_segments;
  for (DeviceSummary& device : summary.devices) {
    device.torch_allocated_known = summary.torch_segments && !visitor.blocks.lost(device.device);
    if (selected(device_filter, device.device)) {
      summary.end_bytes += device.end_bytes;
      summary.torch_reserved_end_bytes += device.torch_reserved_end_bytes;
      summary.torch_allocated_end_bytes += device.torch_allocated_end_bytes;
      summary.torch_allocated_known &= device.torch_allocated_known;
    }
  }
  if (!summary.steps.empty() && until == Until::kEnd && visitor.step.peak_event != UINT64_MAX) {
    // The trace ended inside a step (an OOM, a killed run, the evaluation after training).
    visitor.step.end_ns = summary.duration_ns;
    summary.steps.push_back(visitor.step);
    visitor.step_modules.push_back(visitor.step_module);
  }
  for (size_t i = 0; i < summary.steps.size() && i < visitor.step_modules.size(); ++i)
    summary.steps[i].peak_module = std::string(tables.string(visitor.step_modules[i]));
  return summary;
}

namespace {

std::string secondsText(uint64_t ns) {
  char text[32];
  snprintf(text, sizeof(text), "%.3f s", static_cast<double>(ns) / 1e9);
  return text;
}

std::string keptText(const TraceSummary& summary) {
  return "a flight recorder's file keeps the live set at the peak" +
         std::string(summary.flight.oom_section ? " and at the first failed allocation" : "") +
         " and the events from " + secondsText(summary.flight.window_start_ns) + " on (at least " +
         std::to_string(summary.flight.window_events) + ")";
}

}  // namespace

void refuseOutsideFlightWindow(const std::string& path, const TraceSummary& summary,
                               const Point& point) {
  if (!summary.flight.dropped || point.kind != Point::Kind::kTime) return;
  if (point.time_ns >= summary.flight.window_start_ns) return;
  throw reader::TraceError(path + ": --at " + secondsText(point.time_ns) + " is before what " +
                           keptText(summary) + ": use --at peak, end" +
                           (summary.failed_allocations ? ", oom" : "") + " or a time from " +
                           secondsText(summary.flight.window_start_ns));
}

void refuseWithoutFullTrace(const std::string& path, const TraceSummary& summary,
                            const std::string& what) {
  if (!summary.flight.dropped) return;
  throw reader::TraceError(path + ": " + what + " needs every event, and " + keptText(summary) +
                           " (record with MEMTRACE_MODE=full for it)");
}

LiveSet liveSetAt(reader::TraceReader& trace, const TraceSummary& summary, Point point) {
  if (point.kind == Point::Kind::kOom && summary.first_failed_event == UINT64_MAX)
    throw reader::TraceError(trace.path() + ": the trace has no failed allocation (no OOM)");
  refuseOutsideFlightWindow(trace.path(), summary, point);
  LiveSet result;
  result.point = point;
  LiveSetVisitor visitor(result, summary);
  reader::LiveReplay replay(visitor);
  trace.read(replay);
  for (const auto& [address, segment] : visitor.segments) result.segments.push_back(segment);
  replay.live().forEach([&](uint64_t address, const Allocation& entry) {
    if (!selected(summary.device_filter, entry.device)) return;
    result.allocations.push_back(LiveAllocation{address, entry.size, entry.python_stack,
                                                entry.native_stack, entry.device, entry.traced,
                                                entry.module, entry.category});
    result.allocations.back().phase = entry.phase;
    result.bytes += entry.size;
  });
  // Table order depends on hashing; sort by address for a deterministic result.
  std::sort(result.allocations.begin(), result.allocations.end(),
            [](const LiveAllocation& a, const LiveAllocation& b) { return a.address < b.address; });
  if ((summary.training || summary.owner_modules_told) && !result.allocations.empty()) {
    // Categories and modules told after the point (Note [Training records], Note [Weights and
    // their modules]) need the rest of the file.
    result.allocations = std::move(snapshotsAt(trace, summary, {result.event})[0]);
  } else {
    for (LiveAllocation& allocation : result.allocations)
      allocation.category = categoryOf(allocation.category, allocation.traced, summary.training);
  }
  result.allocated_known = summary.torch_allocated_known;
  if (result.allocated_known)
    for (LiveAllocation& allocation : result.allocations) {
      allocation.allocated = visitor.blocks.block(allocation.device, allocation.address);
      result.allocated_bytes += allocation.allocated;
    }
  return result;
}

const LiveAllocation* LiveSet::lastAllocation() const {
  if (!last_allocation) return nullptr;
  auto found = std::lower_bound(allocations.begin(), allocations.end(), *last_allocation,
                                [](const LiveAllocation& allocation, uint64_t address) {
                                  return allocation.address < address;
                                });
  return found != allocations.end() && found->address == *last_allocation ? &*found : nullptr;
}

CategoryBytes categoryBytes(const std::vector<LiveAllocation>& allocations) {
  CategoryBytes bytes{};
  for (const LiveAllocation& allocation : allocations)
    bytes[static_cast<size_t>(allocation.category)] += allocation.size;
  return bytes;
}

namespace {

bool isIndex(std::string_view part) {
  return !part.empty() &&
         std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// An owner the Python package names that is not a module (`<optimizer.step>`, `<DDP buckets>`:
// Note [Owners that are not modules] in python/mem_tracer/training.py): one part, never cut.
bool isNamedOwner(std::string_view path) {
  return !path.empty() && path.front() == '<';
}

// The named components of `path` (its indices not counted).
size_t namedDepth(std::string_view path) {
  if (isNamedOwner(path)) return 1;
  size_t depth = 0;
  for (size_t begin = 0; begin <= path.size();) {
    size_t end = std::min(path.find('.', begin), path.size());
    if (!isIndex(path.substr(begin, end - begin))) ++depth;
    begin = end + 1;
  }
  return depth;
}

// `path` cut after `depth` named components, with the indices right after them kept (a
// block's: `h.3`): as it is, and with each index as `*`.
std::pair<std::string, std::string> cutPath(std::string_view path, size_t depth) {
  if (isNamedOwner(path)) return {std::string(path), std::string(path)};
  std::string concrete;
  std::string folded;
  size_t named = 0;
  for (size_t begin = 0; begin <= path.size();) {
    size_t end = std::min(path.find('.', begin), path.size());
    std::string_view part = path.substr(begin, end - begin);
    bool index = isIndex(part);
    if (!index && named == depth) break;
    if (!concrete.empty()) {
      concrete += '.';
      folded += '.';
    }
    concrete += part;
    folded += index ? std::string_view("*") : part;
    if (!index) ++named;
    begin = end + 1;
  }
  return {std::move(concrete), std::move(folded)};
}

void sortModuleRows(std::vector<ModuleCategoryRow>& rows) {
  std::sort(rows.begin(), rows.end(), [](const ModuleCategoryRow& a, const ModuleCategoryRow& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.module != b.module ? a.module < b.module : a.without_module < b.without_module;
  });
}

}  // namespace

std::string foldedModulePath(std::string_view path, size_t depth) {
  return cutPath(path, depth).second;
}

ModuleCategoryTable moduleCategories(const std::vector<LiveAllocation>& allocations,
                                     const reader::Tables& tables, size_t max_rows) {
  // By module; the allocations no module owns by how the locator names them (Note [What was
  // live before tracing]): traced ones together (<no module>), untraced ones by what they hold.
  std::unordered_map<uint32_t, CategoryBytes> by_module;
  std::map<std::string, CategoryBytes> without_module;
  for (const LiveAllocation& allocation : allocations) {
    CategoryBytes& bytes = allocation.module || allocation.traced
                               ? by_module[allocation.module]
                               : without_module[untracedName(untracedHolding(allocation))];
    bytes[static_cast<size_t>(allocation.category)] += allocation.size;
  }
  ModuleCategoryTable table;
  for (const auto& [name, bytes] : without_module) {
    uint64_t total = 0;
    for (uint64_t size : bytes) total += size;
    table.rows.push_back(ModuleCategoryRow{"", 1, total, bytes, name});
  }
  if (by_module.empty()) {
    sortModuleRows(table.rows);
    table.depth = table.rows.empty() ? 0 : 1;
    return table;
  }
  // No table is readable deeper than this: the bound also keeps the work proportional to the
  // paths' bytes whatever a damaged file's paths hold.
  constexpr size_t kDeepest = 16;
  size_t deepest = 1;
  for (const auto& [module, bytes] : by_module)
    if (module) deepest = std::max(deepest, std::min(kDeepest, namedDepth(tables.string(module))));
  // The deepest cut that keeps the table readable (Note [The module table]).
  for (size_t depth = deepest; depth >= 1; --depth) {
    struct Folded {
      std::set<std::string> blocks;
      CategoryBytes categories{};
    };
    std::map<std::string, Folded> rows;
    for (const auto& [module, bytes] : by_module) {
      auto [concrete, folded] =
          module ? cutPath(tables.string(module), depth) : std::pair<std::string, std::string>{};
      Folded& row = rows[folded];
      row.blocks.insert(std::move(concrete));
      for (size_t i = 0; i < bytes.size(); ++i) row.categories[i] += bytes[i];
    }
    if (rows.size() > max_rows && depth > 1) continue;
    table.depth = depth;
    for (auto& [module, row] : rows) {
      uint64_t total = 0;
      for (uint64_t bytes : row.categories) total += bytes;
      table.rows.push_back(ModuleCategoryRow{module, row.blocks.size(), total, row.categories,
                                             module.empty() ? "<no module>" : ""});
    }
    break;
  }
  sortModuleRows(table.rows);
  return table;
}

void resolveTraining(reader::TraceReader& trace, TraceSummary& summary) {
  if (!summary.training) return;
  std::vector<uint64_t> targets;
  if (summary.allocations) targets.push_back(summary.peak_event);
  for (const StepSummary& step : summary.steps)
    if (step.peak_event != UINT64_MAX) targets.push_back(step.peak_event);
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  std::vector<std::vector<LiveAllocation>> snapshots = snapshotsAt(trace, summary, targets);
  auto bytesAt = [&](uint64_t event) {
    size_t index = std::lower_bound(targets.begin(), targets.end(), event) - targets.begin();
    return index < targets.size() && targets[index] == event ? categoryBytes(snapshots[index])
                                                             : CategoryBytes{};
  };
  if (summary.allocations) {
    summary.peak_categories = bytesAt(summary.peak_event);
    size_t index =
        std::lower_bound(targets.begin(), targets.end(), summary.peak_event) - targets.begin();
    summary.peak_modules = moduleCategories(snapshots[index], trace.tables());
  }
  for (StepSummary& step : summary.steps)
    if (step.peak_event != UINT64_MAX) step.peak_categories = bytesAt(step.peak_event);
}

OutsideAllocations outsideAllocations(const TraceSummary& summary, const LiveSet& live_set) {
  OutsideAllocations outside;
  for (const DeviceMemoryReading& reading : summary.device_memory) {
    if (!selected(summary.device_filter, reading.device)) continue;
    if (reading.events_before > summary.window_events) break;  // past the report's window
    int64_t from_point = static_cast<int64_t>(reading.time_ns - live_set.time_ns);
    auto same =
        std::find_if(outside.devices.begin(), outside.devices.end(),
                     [&](const OutsideReading& r) { return r.reading.device == reading.device; });
    if (same == outside.devices.end()) {
      outside.devices.push_back(OutsideReading{});
      same = outside.devices.end() - 1;
    } else if (std::llabs(same->from_point_ns) <= std::llabs(from_point)) {
      continue;  // the nearer reading stays
    }
    same->reading = reading;
    same->from_point_ns = from_point;
  }
  std::sort(outside.devices.begin(), outside.devices.end(),
            [](const OutsideReading& a, const OutsideReading& b) {
              return a.reading.device < b.reading.device;
            });
  for (OutsideReading& device : outside.devices) {
    const DeviceMemoryReading& reading = device.reading;
    if (reading.used_bytes >= reading.live_bytes)
      device.outside_bytes = reading.used_bytes - reading.live_bytes;
    else
      device.live_beyond_used_bytes = reading.live_bytes - reading.used_bytes;
    outside.bytes += device.outside_bytes;
  }
  return outside;
}

}  // namespace memtrace::report
