// The analyses behind memtrace-report: pure functions over a trace's event stream.
//   summarize()   first pass: the exact peak (checked after every allocation), totals, counts
//   liveSetAt()   second pass: what was live at a point (the peak, the end, an OOM, a time)
// Both hold only the live set in memory, never the file.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tracer/reader/reader.h"

namespace memtrace::report {

// Which bytes count: one device's, or all devices' together.
inline constexpr int kAllDevices = -1;

// Whether `device`'s bytes count under the filter (kAllDevices or a device index).
inline bool selected(int filter, int device) {
  return filter == kAllDevices || filter == device;
}

struct DeviceSummary {
  int device = -1;
  std::string name;          // from the trace's device record, "" if none
  uint64_t total_bytes = 0;  // the device's memory, 0 if unknown
  uint64_t peak_bytes = 0;
  uint64_t peak_event = 0;
  uint64_t peak_time_ns = 0;
  uint64_t allocated_bytes = 0;
  uint64_t end_bytes = 0;
  // PyTorch's reserved memory (kSegment records, Note [PyTorch's own allocator]): the most at
  // once (max_memory_reserved), at the device's peak of live bytes, and at the end.
  uint64_t torch_reserved_peak_bytes = 0;
  uint64_t torch_reserved_at_peak_bytes = 0;
  uint64_t torch_reserved_end_bytes = 0;
  // PyTorch's allocated bytes (whole blocks: what max_memory_allocated counts), replayed from
  // the requests and the segments (Note [Allocated bytes, replayed] in block_replay.h): the
  // most at once, at the device's peak of live bytes, at the end; known only where the replay
  // placed every block of the device.
  bool torch_allocated_known = false;
  uint64_t torch_allocated_peak_bytes = 0;
  uint64_t torch_allocated_at_peak_bytes = 0;
  uint64_t torch_allocated_end_bytes = 0;
};

struct MarkerSummary {
  uint64_t time_ns;
  format::MarkerKind kind;
  std::string name;
};

// Bytes by format::Category, indexed by its number.
using CategoryBytes = std::array<uint64_t, static_cast<size_t>(format::Category::kCount)>;

// One training step (between two kStepEnd records; the first from the trace's start).
struct StepSummary {
  uint64_t step = 0;      // its number, as the trace says (the last unfinished one: previous + 1)
  bool finished = false;  // its kStepEnd was read (false: the trace ended inside it)
  uint64_t begin_ns = 0;
  uint64_t end_ns = 0;
  uint64_t peak_bytes = 0;           // the most live bytes within the step
  uint64_t peak_event = UINT64_MAX;  // the allocation that reached it (UINT64_MAX: none)
  uint64_t peak_time_ns = 0;
  format::TrainingPhase peak_phase = format::TrainingPhase::kNone;
  std::string peak_module;          // the nn.Module of the allocation that reached it
  CategoryBytes peak_categories{};  // what was live at the peak (resolveTraining)
};

// A device memory reading (tracer/format/records.h, Note [Device memory readings]), with what
// the replay had live on its device there.
struct DeviceMemoryReading {
  uint64_t time_ns = 0;
  uint64_t events_before = 0;  // the events read before it
  int device = -1;
  uint64_t used_bytes = 0;  // total - free
  uint64_t total_bytes = 0;
  uint64_t live_bytes = 0;  // in allocations on the device, at the reading
};

// Reads of device values made at one place (Note [The simulated device] in records.h): the
// stacks as written, summed.
struct DeviceReadSite {
  uint32_t python_stack = 0;
  uint32_t native_stack = 0;
  bool traced = false;
  uint32_t module = 0;  // of the first read (string id)
  uint64_t count = 0;
  uint64_t bytes = 0;
};

// Sizes a simulated library answered without knowing them, asked at one place (Note [Sizes in
// the trace] in records.h): the stacks and the question as written, summed.
struct SimulatedSizeSite {
  uint32_t python_stack = 0;
  uint32_t native_stack = 0;
  bool traced = false;
  uint32_t module = 0;    // of the first answer (string id)
  uint32_t question = 0;  // string id: JSON {"library", "call", "shapes"}
  uint64_t count = 0;
  uint64_t bytes = 0;    // the largest answered
  uint64_t at_most = 0;  // the largest upper figure (UINT64_MAX: one had no bound)
  format::Certainty certainty = format::Certainty::kExact;  // the least sure
};

// What allocations sized by such answers held at a point, on the selected devices.
struct UnknownSizes {
  uint64_t bytes = 0;        // their sizes
  uint64_t extra_bytes = 0;  // how much larger the bounded ones could have been, summed
  uint64_t unbounded = 0;    // those without a bound
};

// Values the simulated run assumed at one place (kAssumedValue, Note [Values where they decide
// the path]): the stacks as written and what was assumed, counted.
struct AssumedValueSite {
  uint32_t python_stack = 0;
  uint32_t native_stack = 0;
  bool traced = false;
  uint32_t module = 0;   // of the first (string id)
  uint32_t assumed = 0;  // string id
  uint64_t count = 0;
};

// The first failed allocation (an out-of-memory), as the trace wrote it.
struct FailedRequest {
  uint64_t event = 0;
  uint64_t time_ns = 0;
  uint64_t size = 0;
  uint32_t python_stack = 0;
  uint32_t native_stack = 0;
  uint32_t module = 0;  // string id of the nn.Module running (0: none)
  int device = -1;
  bool traced = false;
};

// What a flight recorder's file kept (Note [The flight recorder's file], records.h).
struct FlightSummary {
  bool flight = false;           // the file says it is one
  bool dropped = false;          // it dropped events: the kept ones start at window_start_ns
  uint64_t window_events = 0;    // the events it keeps at least (N)
  uint64_t window_start_ns = 0;  // where the kept events begin
  bool peak_section = false;     // the peak's events were dropped; its live set stands in
  bool oom_section = false;      // the first failed allocation's too
  uint64_t kept_events = 0;      // events read after the window's start
};

// Note [The module table]
// What each nn.Module holds at the peak, by training category (PyTorch's MemTracker's view):
// the peak's live set, the same one the categories line sums, grouped by the module each
// allocation was made in. Paths are cut to the deepest number of named components that keeps
// the table readable (at most `max_rows` rows), and repeated blocks are folded: an index
// component becomes `*` (`model.transformer.h.3.attn` at depth 3 is `model.transformer.h.*`),
// with the count of blocks folded in. Allocations made in no module (a model's parameters moved
// to the device, the optimizer's state, the loss outside the model) are one row, "" (printed
// "<no module>"). An owner the Python package names that is not a module (`<optimizer.step>`,
// `<DDP buckets>`: Note [Owners that are not modules] in python/mem_tracer/training.py) is a
// row of its own, never cut or folded. Every row's categories sum to the categories line:
// nothing is dropped.
struct ModuleCategoryRow {
  std::string module;  // the folded path; "": no module
  uint64_t count = 0;  // the modules folded into the row (the blocks `*` stands for), at least 1
  uint64_t bytes = 0;
  CategoryBytes categories{};
  // With no module: what the row holds, as the locator names it ("<no module>" for traced
  // allocations; Note [What was live before tracing] for untraced ones); "" for a module's row.
  std::string without_module;
};
struct ModuleCategoryTable {
  size_t depth = 0;                     // the named path components kept (0: no allocation)
  std::vector<ModuleCategoryRow> rows;  // largest first
};
inline constexpr size_t kModuleTableRows = 12;

struct TraceSummary {
  reader::ProcessInfo process;
  // The process ran on memtrace's simulated GPU (kSimulatedDevice): every view says so.
  std::optional<reader::SimulatedDeviceInfo> simulated;
  uint64_t file_bytes = 0;
  uint64_t cut_offset = 0;     // a partial last chunk began here (0: none)
  bool ended_cleanly = false;  // a process-exit or trace-closed mark was written
  int device_filter = kAllDevices;

  // For the bytes selected by device_filter:
  uint64_t peak_bytes = 0;  // the high-water mark of live bytes
  uint64_t peak_event = 0;  // the allocation that reached it first (its index)
  uint64_t peak_time_ns = 0;
  uint64_t end_bytes = 0;        // live at the end of the trace
  uint64_t allocated_bytes = 0;  // all allocations summed

  uint64_t events = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t failed_allocations = 0;
  uint64_t untraced_allocations = 0;  // written while tracing was stopped (or before it began)
  uint64_t unmatched_frees = 0;       // frees of addresses not live (should be 0)
  uint64_t replaced_allocations = 0;  // allocations over a live address (should be 0)
  uint64_t first_failed_event = UINT64_MAX;
  std::optional<FailedRequest> first_failure;  // its request (first_failed_event's)
  uint64_t duration_ns = 0;
  bool segment_level = false;  // some events are segments of PyTorch's caching allocator
  bool tensor_level = false;
  // PyTorch's caching allocator was recorded from inside (kSegment records, Note [PyTorch's own
  // allocator]): its reserved memory on the selected devices, the most at once, at the peak of
  // live bytes (reserved - live there is what its caching and fragmentation hold), at the end.
  bool torch_segments = false;
  uint64_t torch_reserved_peak_bytes = 0;
  uint64_t torch_reserved_at_peak_bytes = 0;
  uint64_t torch_reserved_end_bytes = 0;
  // Its allocated bytes on the selected devices, as DeviceSummary's; known where every
  // selected device's are.
  bool torch_allocated_known = false;
  uint64_t torch_allocated_peak_bytes = 0;
  uint64_t torch_allocated_at_peak_bytes = 0;
  uint64_t torch_allocated_end_bytes = 0;
  // The program's allocator settings that change its rules ("PYTORCH_CUDA_ALLOC_CONF=..."), ""
  // for the default ones: then allocated is not known.
  std::string torch_allocator_settings;

  std::vector<DeviceSummary> devices;  // every device seen, by index

  // The device's memory as the driver counted it, in file order.
  std::vector<DeviceMemoryReading> device_memory;
  // Virtual memory management (Note [Virtual memory management]): physical memory events
  // (api cuMemCreate), and the most bytes mapped (cuMemMap) and reserved (cuMemAddressReserve)
  // at once, over all devices.
  bool physical_memory = false;
  uint64_t mapped_peak_bytes = 0;
  uint64_t reserved_peak_bytes = 0;
  std::vector<MarkerSummary> markers;  // annotations and phases, in order

  // Reads of device values on the simulated device (kDeviceRead) on the selected devices, by
  // stacks, in the order first seen; and their totals.
  std::vector<DeviceReadSite> device_reads;
  uint64_t device_read_count = 0;
  uint64_t device_read_bytes = 0;
  // Values the simulated run assumed where they decided the path (kAssumedValue) on the
  // selected devices, by stacks and what was assumed, in the order first seen; and how many.
  std::vector<AssumedValueSite> assumed_values;
  uint64_t assumed_value_count = 0;

  // Sizes the simulated libraries answered without knowing them (kSimulatedSize, Note [Sizes
  // in the trace]) on the selected devices, by stacks and question, in the order first seen.
  std::vector<SimulatedSizeSite> simulated_sizes;
  uint64_t simulated_size_count = 0;
  // What allocations sized by them held at the peak (an answer linked after the peak to an
  // allocation live there counts: cuFFT is handed its work area after PyTorch allocated it).
  UnknownSizes unknown_sizes_at_peak;
  // Answers of 0 bytes, which no allocation holds (a cuDNN plan told it needs no workspace):
  // while one was in use the program could have held up to its upper figure more. The largest
  // of their upper figures, and whether one had no bound.
  uint64_t unheld_size_at_most = 0;
  bool unheld_size_unbounded = false;

  // Training (Note [Training records]): the trace has kCategory, kTrainingPhase or kStepEnd.
  bool training = false;
  uint64_t categories_told = 0;     // kCategory records
  uint64_t categories_ignored = 0;  // of them, at an address no live allocation starts at
  // kOwnerModule records (Note [Weights and their modules]): a live set's modules are then
  // resolved to the end of the file, as its categories are.
  uint64_t owner_modules_told = 0;
  std::vector<StepSummary> steps;    // in order; empty without kStepEnd records
  CategoryBytes peak_categories{};   // at the peak (resolveTraining)
  ModuleCategoryTable peak_modules;  // the same bytes by module (resolveTraining)

  FlightSummary flight;
  // Where an open chunk begins (its writer was stopped, or still writes), 0: none.
  uint64_t open_chunk_offset = 0;

  // The report covers the first `window_events` events (Until::kLastStop); UINT64_MAX: all.
  uint64_t window_events = UINT64_MAX;
  uint64_t window_end_ns = 0;  // the time of the mark that ends the window
};

// How far into the trace a report looks.
enum class Until {
  kEnd,  // the whole trace
  // Up to the last "tracing stopped" mark, if tracing was stopped and not started again:
  // what a program traced between start_tracing() and stop_tracing(), without what it
  // allocated afterwards (still written, untraced, so that a later start stays right).
  kLastStop,
};

// Pass 1.
TraceSummary summarize(reader::TraceReader& trace, int device_filter = kAllDevices,
                       Until until = Until::kEnd);

// A point of the trace to look at the live set.
struct Point {
  enum class Kind { kPeak, kEnd, kOom, kTime } kind = Kind::kPeak;
  uint64_t time_ns = 0;  // for kTime: since the trace's start
};

// One allocation live at the point.
struct LiveAllocation {
  uint64_t address;
  uint64_t size;
  uint32_t python_stack;
  uint32_t native_stack;
  int device;
  bool traced;
  uint32_t module;  // string id of the nn.Module path (0: none); its owner's, when told
  // Resolved: told at any time of the allocation's life, or the default (categoryOf).
  format::Category category = format::Category::kUnknown;
  // The block PyTorch's caching allocator handed out for it (Note [Allocated bytes, replayed]):
  // what max_memory_allocated counts of it; 0 where not known (LiveSet::allocated_known).
  uint64_t allocated = 0;
  // The training phase it was made in (Note [The step's own calls] in
  // estimator/passes/attribute_peak.h).
  format::TrainingPhase phase = format::TrainingPhase::kNone;
};

// Note [What was live before tracing]
// An allocation made while tracing was stopped, or live before it began, has no stack, so no
// line names it. Where the package told what it holds (its category, Note [Training records];
// the module it is a parameter or buffer of, Note [Weights and their modules]) the report
// names it by that, and under one name in every table: where rows are lines, functions,
// files or stacks, and in the module grouping and the module table where no module owns it
// (an owned one is its module's there). A model's weights moved to the device before tracing
// are then `weights, allocated before tracing`, in the line table, the module table and
// report_data() alike, not `untraced` in one, `<no module>` in another. The names:
//   weights, allocated before tracing            a parameter, or anything a module owns (its
//                                                buffers, which have no category of their own)
//   inputs, allocated before tracing             an input of the root module's forward
//   gradients / optimizer state / activations, allocated before tracing
//   untraced                                     the rest: nothing says what it holds
// "Before tracing": the package tells these only while tracing runs, of allocations it can
// see then, so a told one was allocated before tracing started (or restarted). With an
// estimate, the weights' row stands beside the estimator's weights (parameters, buffers and
// constants) and the inputs' beside its inputs, both of which it counts as there before the
// forward (prediction.cpp).
// What the trace knows an untraced allocation holds: its category where one was told (a
// module's gradient or optimizer state too), else kParameter for the weights (an allocation a
// module owns: its buffers too), else kUnknown (nothing).
format::Category untracedHolding(const LiveAllocation& allocation);
// Its name (above); "untraced" when nothing is known.
const char* untracedName(format::Category holding);

// A range of device memory PyTorch's caching allocator held at the point (kSegment records,
// Note [PyTorch's own allocator]): a segment, or pages mapped into an expandable one.
struct LiveSegment {
  uint64_t address;
  uint64_t size;
  int device;
  uint64_t graph_pool;
  uint64_t user_pool;
};

struct LiveSet {
  Point point;
  uint64_t event = 0;    // the last event replayed
  uint64_t time_ns = 0;  // its time
  uint64_t bytes = 0;
  std::vector<LiveAllocation> allocations;
  // Every allocation's `allocated` is its block's size: PyTorch's own allocator's tensors, its
  // blocks all placed by the replay (TraceSummary::torch_allocated_known); the sum is PyTorch's
  // allocated bytes at the point.
  bool allocated_known = false;
  uint64_t allocated_bytes = 0;
  // PyTorch's reserved memory on the selected devices, by address (empty without kSegment).
  std::vector<LiveSegment> segments;
  // The address the last event replayed allocated (at the peak: the allocation that reached
  // it); nullopt when that event was no allocation.
  std::optional<uint64_t> last_allocation;
  // The allocation at `last_allocation` among `allocations` (nullptr: none).
  const LiveAllocation* lastAllocation() const;
};

// Pass 2. Throws reader::TraceError when the point does not exist (no OOM in the trace).
LiveSet liveSetAt(reader::TraceReader& trace, const TraceSummary& summary, Point point);

// Pass 3, for a trace with training records: the category bytes at the peak and at each
// step's peak, with the categories told after those points (a .grad found at the step's end)
// resolved. Fills summary.peak_categories and each step's peak_categories.
void resolveTraining(reader::TraceReader& trace, TraceSummary& summary);

// The category of every allocation of the trace (by its event index) as a view that shows
// allocations (not only what was live at one point) needs it, for a trace with training
// records: the one told at any time of its life, else the default (categoryOf). Only
// allocations told a category are in the map; categoryOf() gives the others'.
std::unordered_map<uint64_t, format::Category> toldCategories(reader::TraceReader& trace,
                                                              const TraceSummary& summary);
// What the package told of each allocation, at any time of its life, by its event index: its
// category (as toldCategories) and the module owning it (Note [Weights and their modules]).
// Empty maps for a trace that told neither.
struct ToldOfAllocations {
  std::unordered_map<uint64_t, format::Category> categories;
  std::unordered_map<uint64_t, uint32_t> owners;  // module string ids
};
ToldOfAllocations toldOfAllocations(reader::TraceReader& trace, const TraceSummary& summary);
// What an allocation stands under: the category told, else temporary in a training trace
// when it was made while tracing, else unknown (Note [Training records]).
format::Category categoryOf(format::Category told, bool traced, bool training);

// The bytes of `allocations` by category.
CategoryBytes categoryBytes(const std::vector<LiveAllocation>& allocations);

// `path` as a row of a module table cut to `depth` named parts names it: cut after them, each
// index `*` (Note [The module table]); an owner that is not a module as it is.
std::string foldedModulePath(std::string_view path, size_t depth);

// The bytes of `allocations` by module and category (Note [The module table]).
ModuleCategoryTable moduleCategories(const std::vector<LiveAllocation>& allocations,
                                     const reader::Tables& tables,
                                     size_t max_rows = kModuleTableRows);

// The memory outside any allocation call at a point (Note [Device memory readings]): for each
// selected device with readings, the reading nearest the point, and its used bytes less the
// bytes live in allocations at the reading. Approximate unless a reading is at the point:
// it takes what lies outside any allocation call as unchanged between the two.
struct OutsideReading {
  DeviceMemoryReading reading;
  int64_t from_point_ns = 0;            // the reading's time less the point's
  uint64_t outside_bytes = 0;           // used - live, or 0 when live > used
  uint64_t live_beyond_used_bytes = 0;  // live - used when live > used (managed memory)
};
struct OutsideAllocations {
  uint64_t bytes = 0;  // the devices' outside_bytes, summed
  std::vector<OutsideReading> devices;
};
OutsideAllocations outsideAllocations(const TraceSummary& summary, const LiveSet& live_set);

// Throws reader::TraceError, in one line, when the point asked for lies where a flight
// recorder's file dropped its events (a time before the kept ones, other than the peak's and
// the first failure's), or when `what` (a view of the whole run: "the full timeline") cannot
// be drawn from it. Does nothing for other traces.
void refuseOutsideFlightWindow(const std::string& path, const TraceSummary& summary,
                               const Point& point);
void refuseWithoutFullTrace(const std::string& path, const TraceSummary& summary,
                            const std::string& what);

// Whether a replay to `point` stops before `event`: the event lies past the point, or past
// the summary's window. (A failed allocation changes no live set: the OOM point includes
// it.)
bool pastPoint(const TraceSummary& summary, const Point& point, const reader::Event& event);

}  // namespace memtrace::report
