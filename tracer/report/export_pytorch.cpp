// PyTorch's memory snapshot (the pickle torch.cuda.memory._dump_snapshot() writes), so that
// a memtrace trace opens in pytorch.org/memory_viz and in torch/cuda/_memory_viz.py.
//
// Note [PyTorch snapshot export]
// A snapshot is the allocator's state at one moment ("segments", each holding "blocks")
// and the history of events that led there ("device_traces", one list per device). memtrace
// sees CUDA allocations, not the caching allocator's insides, so:
//   - each live allocation is a segment holding one block, "active_allocated", of its size;
//   - each allocation is a "segment_alloc" then an "alloc" of the same address and size,
//     and each free is "free_requested", "free_completed" then "segment_free", so that both
//     the active-memory timeline and the segment views of memory_viz replay it right;
//   - a failed allocation is an "oom" event; device_free is the device's memory less
//     what was live there, when the trace knows the device's size (else 0);
//   - frames are innermost first, as in PyTorch: native frames down to the interpreter
//     (Note [Mixed stacks in the flame graph]), then Python frames; untraced allocations
//     have none, which memory_viz shows as "allocated before _record_history was enabled";
//   - events whose device is unknown (-1) are put on device 0;
//   - in a trace with training records, each "alloc" and each block carries its
//     "category", named as PyTorch's memory profiler names them (parameter, gradient,
//     optimizer_state, activation, input, temporary, unknown: torch/profiler/
//     _memory_profiler.py's Category, lower case, which memory_viz colours by).
// The history ends at the point asked for (--at, the end by default) and the segments are
// what was live there.
#include "tracer/report/export_pytorch.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tracer/reader/live_set.h"
#include "tracer/report/pickle_writer.h"
#include "tracer/report/symbolizer.h"

namespace memtrace::report {
namespace {

using reader::Allocation;
using reader::Event;

enum class Action : uint8_t { kAlloc, kFree, kOom };

struct SnapshotEvent {
  Action action;
  int32_t device;
  uint64_t address;
  uint64_t size;
  uint64_t stream;
  uint64_t time_ns;
  uint32_t python_stack;
  uint32_t native_stack;
  bool traced;
  uint64_t index = 0;  // the allocation's event index (kAlloc)
};

// Events whose device is unknown (-1) go on device 0.
int32_t snapshotDevice(int device) {
  return std::max(device, 0);
}

struct HistoryVisitor : reader::LiveVisitor {
  HistoryVisitor(const TraceSummary& summary, Point point) : summary(summary), point(point) {}

  bool stopBefore(const Event& event) const { return pastPoint(summary, point, event); }

  // A flight recorder's sections stand for events it dropped (Note [The flight recorder's
  // file]): their allocations and frees are no history, and what was live before the kept
  // events shows as allocated before the history began.
  void onSection(const reader::Section& section) {
    in_section = section.kind != format::SectionKind::kFrame;
    if (in_section) events.clear();
  }

  void onFailedAlloc(const Event& event) {
    if (in_section) return;
    const reader::Context& context = *event.context;
    if (selected(summary.device_filter, context.device))
      events.push_back(SnapshotEvent{Action::kOom, snapshotDevice(context.device), 0, event.size,
                                     context.stream, event.time_ns, event.python_stack,
                                     event.native_stack, event.traced});
  }

  void onFree(const Event& event, const Allocation& freed) {
    if (!in_section) free(freed, event.address, event.time_ns);
  }
  // The free the recorder never saw comes first, at the time of the allocation over it.
  void onImpliedFree(const Event& event, const Allocation& replaced) {
    free(replaced, event.address, event.time_ns);
  }

  void onAlloc(const Event& event, const Allocation& allocation) {
    if (training) index_of[event.address] = event.index;
    if (!in_section && selected(summary.device_filter, allocation.device))
      events.push_back(SnapshotEvent{Action::kAlloc, snapshotDevice(allocation.device),
                                     event.address, event.size, allocation.stream, event.time_ns,
                                     event.python_stack, event.native_stack, event.traced,
                                     event.index});
  }

  void free(const Allocation& removed, uint64_t address, uint64_t time_ns) {
    int32_t device = snapshotDevice(removed.device);
    if (!selected(summary.device_filter, device)) return;
    events.push_back(SnapshotEvent{Action::kFree, device, address, removed.size, removed.stream,
                                   time_ns, removed.python_stack, removed.native_stack,
                                   removed.traced});
  }

  const TraceSummary& summary;
  Point point;
  std::vector<SnapshotEvent> events;
  bool training = summary.training;
  std::unordered_map<uint64_t, uint64_t> index_of;  // live allocations' event indices
  bool in_section = false;
};

class SnapshotWriter {
 public:
  SnapshotWriter(PickleWriter& pickle, const reader::Tables& tables)
      : pickle_(pickle), tables_(tables), symbolizer_(tables) {}

  // The frame list of a stack, written once and then shared through the pickle's memo.
  void frames(bool traced, uint32_t python_stack, uint32_t native_stack) {
    if (!traced) python_stack = native_stack = 0;
    auto [it, inserted] = memo_of_stack_.try_emplace({python_stack, native_stack}, 0);
    if (!inserted) return pickle_.get(it->second);
    pickle_.beginList();
    bool innermost = true;
    for (uint32_t id = native_stack; id; id = tables_.native_stacks[id].parent) {
      const NativeFrame& frame = symbolizer_.resolve(tables_.native_stacks[id].ip, innermost);
      innermost = false;
      if (python_stack && isInterpreterObject(frame.object)) break;
      frame_(frame.file.empty() ? frame.object : frame.file, frame.line, frame.function);
    }
    for (uint32_t id = python_stack; id; id = tables_.python_stacks[id].parent) {
      const reader::PythonFrame& frame = tables_.python_frames[tables_.python_stacks[id].frame];
      frame_(tables_.string(frame.file), frame.line, tables_.string(frame.function));
    }
    pickle_.endList();
    it->second = pickle_.memoize();
  }

  void event(const char* action, const SnapshotEvent& event, uint64_t start_unix_ns,
             const char* category = nullptr) {
    pickle_.beginDict();
    pickle_.name("action"), pickle_.name(action);
    pickle_.name("addr"), pickle_.unsignedInteger(event.address);
    pickle_.name("size"), pickle_.unsignedInteger(event.size);
    pickle_.name("stream"), pickle_.unsignedInteger(event.stream);
    pickle_.name("time_us"), pickle_.unsignedInteger((start_unix_ns + event.time_ns) / 1000);
    pickle_.name("frames"), frames(event.traced, event.python_stack, event.native_stack);
    if (category) pickle_.name("category"), pickle_.name(category);
    pickle_.endDict();
  }

 private:
  void frame_(std::string_view file, int line, std::string_view function) {
    pickle_.beginDict();
    pickle_.name("filename"), pickle_.string(file);
    pickle_.name("line"), pickle_.integer(line);
    pickle_.name("name"), pickle_.string(function);
    pickle_.endDict();
  }

  PickleWriter& pickle_;
  const reader::Tables& tables_;
  Symbolizer symbolizer_;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> memo_of_stack_;
};

}  // namespace

void exportPytorchSnapshot(std::ostream& out, reader::TraceReader& trace,
                           const TraceSummary& summary, const Point& point) {
  if (point.kind == Point::Kind::kOom && summary.first_failed_event == UINT64_MAX)
    throw reader::TraceError(trace.path() + ": the trace has no failed allocation (no OOM)");
  // Categories are told after allocations (Note [Training records]): a first pass gathers them.
  std::unordered_map<uint64_t, format::Category> told = toldCategories(trace, summary);
  auto categoryName = [&](uint64_t index, bool traced) -> const char* {
    if (!summary.training) return nullptr;
    auto found = told.find(index);
    format::Category category = found == told.end() ? format::Category::kUnknown : found->second;
    return format::categoryName(categoryOf(category, traced, true));
  };
  HistoryVisitor history(summary, point);
  reader::LiveReplay replay(history);
  trace.read(replay);
  const reader::Tables& tables = trace.tables();
  const uint64_t start = summary.process.start_unix_ns;

  int32_t devices = 1;
  for (const SnapshotEvent& event : history.events) devices = std::max(devices, event.device + 1);
  std::vector<std::pair<uint64_t, Allocation>> live;
  replay.live().forEach([&](uint64_t address, Allocation entry) {
    entry.device = snapshotDevice(entry.device);
    if (selected(summary.device_filter, entry.device)) live.emplace_back(address, entry);
  });
  auto liveCategory = [&](uint64_t address, bool traced) -> const char* {
    auto found = history.index_of.find(address);
    return categoryName(found == history.index_of.end() ? UINT64_MAX : found->second, traced);
  };
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [address, entry] : live) devices = std::max(devices, entry.device + 1);

  PickleWriter pickle(out);
  SnapshotWriter writer(pickle, tables);
  pickle.beginDict();
  pickle.name("segments");
  pickle.beginList();
  for (const auto& [address, entry] : live) {
    pickle.beginDict();
    pickle.name("device"), pickle.integer(entry.device);
    pickle.name("address"), pickle.unsignedInteger(address);
    for (const char* key : {"total_size", "allocated_size", "active_size", "requested_size"})
      pickle.name(key), pickle.unsignedInteger(entry.size);
    pickle.name("stream"), pickle.unsignedInteger(entry.stream);
    pickle.name("segment_type"), pickle.name("large");
    pickle.name("segment_pool_id");
    pickle.beginTuple(), pickle.integer(0), pickle.integer(0), pickle.endTuple();
    pickle.name("is_expandable"), pickle.boolean(false);
    pickle.name("frames"), writer.frames(entry.traced, entry.python_stack, entry.native_stack);
    pickle.name("blocks");
    pickle.beginList();
    pickle.beginDict();
    pickle.name("address"), pickle.unsignedInteger(address);
    pickle.name("size"), pickle.unsignedInteger(entry.size);
    pickle.name("requested_size"), pickle.unsignedInteger(entry.size);
    pickle.name("state"), pickle.name("active_allocated");
    pickle.name("frames"), writer.frames(entry.traced, entry.python_stack, entry.native_stack);
    if (const char* category = liveCategory(address, entry.traced))
      pickle.name("category"), pickle.name(category);
    pickle.endDict();
    pickle.endList();
    pickle.endDict();
  }
  pickle.endList();

  pickle.name("device_traces");
  pickle.beginList();
  // One pass over the history, device by device: the reader bounds device indices
  // (format::kMaxDevices), and sorting keeps the work proportional to the events.
  std::stable_sort(
      history.events.begin(), history.events.end(),
      [](const SnapshotEvent& a, const SnapshotEvent& b) { return a.device < b.device; });
  auto next = history.events.cbegin();
  bool unknown_named = false;
  for (int32_t device = 0; device < devices; ++device) {
    // Live bytes on this device as the history goes, for the device_free of "oom" events.
    uint64_t live_bytes = 0;
    const reader::Device* record = tables.device(device);
    uint64_t device_total = record ? record->total_bytes : 0;
    pickle.beginList();
    for (; next != history.events.cend() && next->device == device; ++next) {
      const SnapshotEvent& event = *next;
      switch (event.action) {
        case Action::kAlloc: {
          const char* category = categoryName(event.index, event.traced);
          // memory_viz's annotate_snapshot adds "unknown" to a snapshot whose categories lack
          // it, through a misspelt field (`snapshot.categores.push`), and so throws: the first
          // segment of a categorized snapshot names "unknown" (segments are not coloured by it).
          writer.event("segment_alloc", event, start,
                       category && !unknown_named ? "unknown" : nullptr);
          unknown_named = unknown_named || category;
          writer.event("alloc", event, start, category);
          live_bytes += event.size;
          break;
        }
        case Action::kFree:
          writer.event("free_requested", event, start);
          writer.event("free_completed", event, start);
          writer.event("segment_free", event, start);
          live_bytes -= std::min(live_bytes, event.size);
          break;
        case Action::kOom:
          pickle.beginDict();
          pickle.name("action"), pickle.name("oom");
          pickle.name("addr"), pickle.integer(0);
          pickle.name("size"), pickle.unsignedInteger(event.size);
          pickle.name("stream"), pickle.unsignedInteger(event.stream);
          pickle.name("time_us"), pickle.unsignedInteger((start + event.time_ns) / 1000);
          pickle.name("device_free");
          pickle.unsignedInteger(device_total > live_bytes ? device_total - live_bytes : 0);
          pickle.name("frames"),
              writer.frames(event.traced, event.python_stack, event.native_stack);
          pickle.endDict();
          break;
      }
    }
    pickle.endList();
  }
  pickle.endList();
  pickle.endDict();
  pickle.finish();
}

}  // namespace memtrace::report
