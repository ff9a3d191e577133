// The reading end of the trace format (records.h): streams a trace file's records to a
// visitor, keeping only the tables (strings, frames, stacks, loaded objects, devices), which
// grow with the number of distinct stacks, never with the number of events.
//
// Errors throw TraceError, whose message names the file, the byte offset and what was
// expected. A file cut short (the writer was killed) is not an error: reading stops at the
// last whole chunk and cutOffset() says where the rest began. A file whose writer mapped it
// (Note [Records reach the page cache as they are written], tracer/recorder/trace_file.h) may
// end in an open chunk: it is read up to its first zero type byte, and openChunkOffset() says
// where it began. follow() reads on from where the last read stopped, for a file that is still
// being written (memtrace live).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tracer/format/codec.h"
#include "tracer/format/records.h"

namespace memtrace::reader {

class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The kProcessInfo record, as read (the recorder writes it from ProcessInfoFields).
struct ProcessInfo {
  int64_t pid = 0;
  int64_t parent_pid = 0;
  uint64_t start_unix_ns = 0;
  uint64_t start_monotonic_ns = 0;
  std::vector<std::string> command_line;
  std::string executable;
  std::string host_name;
  std::string tracer_version;
  format::StackMode stack_mode = format::StackMode::kNone;
  uint32_t python_depth = 0;
  uint32_t native_depth = 0;
  bool free_stacks = false;
  // The unit of the file's time deltas (Note [Times in microseconds] in records.h): 1 before
  // version 8. Every time the reader gives is nanoseconds whatever it is.
  uint64_t time_unit_ns = 1;
};

// The kDistributed record: which rank of a torch.distributed job the process was (Note [A
// job's ranks]); -1 where its launcher did not say.
struct DistributedInfo {
  int64_t rank = -1;
  int64_t world_size = -1;
  int64_t local_rank = -1;
  int64_t local_world_size = -1;
  int64_t group_rank = -1;  // the node's rank
  int64_t restart_count = -1;
  std::string job_id;
};

// The kSimulatedDevice record: the process ran on memtrace's simulated GPU (Note [The
// simulated device]).
struct SimulatedDeviceInfo {
  std::string profile_name;  // "h200"
  std::string profile_file;
  uint64_t memory_bytes = 0;  // each device's
  bool memory_set_by_user = false;
  int device_count = 1;
};

struct PythonFrame {
  uint32_t file;      // string id
  uint32_t function;  // string id
  int32_t line;
};

struct StackNode {
  uint32_t parent;  // 0: root
  uint32_t frame;   // Python: frame id
};

struct NativeNode {
  uint32_t parent;
  uint64_t ip;
};

// An ELF object the traced process had loaded (RecordType::kLoadedObject).
struct LoadedObject {
  uint32_t path;  // string id
  uint64_t bias;
  std::string build_id;                                 // raw bytes
  std::vector<std::pair<uint64_t, uint64_t>> segments;  // (start, size)
};

struct Device {
  int device;
  uint32_t name;  // string id
  uint64_t total_bytes;
};

struct Context {
  int64_t thread_id = 0;
  int device = -1;
  uint64_t stream = 0;
  format::Api api = format::Api::kPluggable;
  format::Level level = format::Level::kTensor;
};

enum class EventKind : uint8_t { kAlloc, kFree, kFailedAlloc };

struct Event {
  EventKind kind;
  uint64_t index;    // the event's ordinal in the file, from 0 (markers not counted)
  uint64_t time_ns;  // since the trace's start
  uint64_t address;  // 0 for a failed allocation
  uint64_t size;     // allocations and failed allocations; 0 for frees
  uint32_t python_stack;
  uint32_t native_stack;
  bool traced;      // written while tracing was on (stacks were being captured)
  uint32_t module;  // string id of the nn.Module running on the event's thread (0: none)
  const Context* context;
};

struct Marker {
  uint64_t time_ns;
  format::MarkerKind kind;
  uint32_t name;  // string id, 0: none
};

// Virtual memory management (records.h, Note [Virtual memory management]).
struct MemoryMap {  // kMemoryMap
  uint64_t time_ns;
  uint64_t address;  // the virtual address mapped
  uint64_t size;
  uint64_t offset;  // into the physical allocation
  uint64_t handle;  // the physical allocation: the address of its memory event
};

struct AddressRange {  // kMemoryUnmap, kAddressReserve, kAddressFree
  uint64_t time_ns;
  uint64_t address;
  uint64_t size;
};

// A segment of PyTorch's caching allocator changed (kSegment, Note [PyTorch's own allocator]).
struct Segment {
  uint64_t time_ns;
  format::SegmentAction action;
  int device;  // 0 to kMaxDevices - 1
  uint64_t address;
  uint64_t size;
  uint64_t graph_pool;  // a CUDA graph's private pool (0: none)
  uint64_t user_pool;   // a torch.cuda.MemPool (0: none)
  // Whether reserved memory grows (an allocation or a mapping) or shrinks.
  bool grows() const {
    return action == format::SegmentAction::kAlloc || action == format::SegmentAction::kMap;
  }
};

// A read of device values on the simulated device (kDeviceRead): no memory event, so no event
// index; its thread and device are the context's.
struct DeviceRead {
  uint64_t time_ns;
  uint64_t bytes;
  uint32_t python_stack;
  uint32_t native_stack;
  bool traced;      // made while tracing was on
  uint32_t module;  // string id of the nn.Module running on its thread (0: none)
  const Context* context;
};

// A size the simulated GPU answered without knowing it (kSimulatedSize, Note [Sizes in the
// trace]): no memory event; its thread and device are the context's.
struct SimulatedSize {
  uint64_t time_ns;
  uint64_t address;  // the buffer handed to the library (0: told at the question)
  uint64_t bytes;
  uint64_t at_most;  // UINT64_MAX: no bound
  format::Certainty certainty;
  uint32_t question;  // string id: JSON {"library", "call", "shapes"}
  uint32_t python_stack;
  uint32_t native_stack;
  bool traced;
  uint32_t module;
  const Context* context;
};

// A value the simulated run did not know, where it decided the path, and what the run took it
// to be (kAssumedValue): no memory event; its thread and device are the context's.
struct AssumedValue {
  uint64_t time_ns;
  uint32_t assumed;  // string id of what was assumed
  uint32_t python_stack;
  uint32_t native_stack;
  bool traced;      // made while tracing was on
  uint32_t module;  // string id of the nn.Module running on its thread (0: none)
  const Context* context;
};

// A reading of a device's memory (kDeviceMemory, Note [Device memory readings]).
struct DeviceMemory {
  uint64_t time_ns;
  int device;
  uint64_t free_bytes;
  uint64_t total_bytes;
  uint64_t usedBytes() const {
    return total_bytes - free_bytes;
  }  // the reader checks free <= total
};

// The run's totals a flight recorder's kSection carries (Note [The flight recorder's file]).
struct DeviceTotals {
  int device = -1;
  uint64_t allocated_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t peak_time_ns = 0;
};
struct RunTotals {
  uint64_t events = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t failed_allocations = 0;
  uint64_t allocated_bytes = 0;
  uint64_t untraced_allocations = 0;
  std::vector<DeviceTotals> devices;
};

// A kSection record: decoding starts afresh after it.
struct Section {
  uint64_t time_ns = 0;
  format::SectionKind kind = format::SectionKind::kFrame;
  bool tracing = false;
  format::TrainingPhase phase = format::TrainingPhase::kNone;
  uint64_t window_events = 0;  // N: the events the file keeps at least
  RunTotals totals;
};

// A kStepPeak record: a training step as the flight recorder counted it.
struct StepPeak {
  uint64_t step = 0;
  uint64_t begin_ns = 0;
  uint64_t end_ns = 0;
  uint64_t peak_time_ns = 0;
  uint64_t peak_bytes = 0;
  format::TrainingPhase phase = format::TrainingPhase::kNone;
  uint32_t module = 0;  // string id
};
// A stretch of generated code and the user's source it stands for (kGeneratedCode, Note
// [Generated code] in records.h): lines [first_line, first_line + line_count) of `file`.
struct GeneratedCode {
  uint32_t file;  // string id: the generated file, as Python frames name it
  int32_t first_line;
  int32_t line_count;
  uint32_t source_stack;  // Python stack id (never 0)
};

// The tables a trace defines; ids index them from 1 (index 0 is a placeholder).
struct Tables {
  ProcessInfo process;
  std::optional<DistributedInfo> distributed;    // a rank's trace only
  std::optional<SimulatedDeviceInfo> simulated;  // a run on the simulated GPU only
  std::vector<std::string> strings{""};
  std::vector<PythonFrame> python_frames{PythonFrame{0, 0, 0}};
  std::vector<StackNode> python_stacks{StackNode{0, 0}};
  std::vector<NativeNode> native_stacks{NativeNode{0, 0}};
  std::vector<LoadedObject> loaded_objects{LoadedObject{}};
  std::vector<Device> devices;
  std::vector<GeneratedCode> generated_code;  // in file order

  std::string_view string(uint32_t id) const {
    return id < strings.size() ? std::string_view(strings[id]) : std::string_view();
  }
  const Device* device(int index) const;
};

// Receives records in file order. Derive from it and hide the members you need; read()
// calls them statically, so an unused one costs nothing.
struct RecordVisitor {
  void onProcessInfo(const ProcessInfo&) {}
  void onDistributed(const DistributedInfo&) {}
  void onString(uint32_t /*id*/, std::string_view) {}
  void onPythonFrame(uint32_t /*id*/, const PythonFrame&) {}
  void onPythonStack(uint32_t /*id*/, const StackNode&) {}
  void onNativeStack(uint32_t /*id*/, const NativeNode&) {}
  void onLoadedObject(uint32_t /*id*/, const LoadedObject&) {}
  void onDevice(const Device&) {}
  void onContext(const Context&) {}
  void onModuleScope(int64_t /*thread_id*/, uint32_t /*module*/) {}
  void onMarker(const Marker&) {}
  // The training records (tracer/format/records.h, Note [Training records]).
  void onCategory(uint64_t /*address*/, format::Category) {}
  void onOwnerModule(uint64_t /*address*/, uint32_t /*module*/) {}
  void onTrainingPhase(uint64_t /*time_ns*/, format::TrainingPhase) {}
  void onStepEnd(uint64_t /*time_ns*/, uint64_t /*step*/) {}
  // Virtual memory management and device memory readings (records.h).
  void onMemoryMap(const MemoryMap&) {}
  void onMemoryUnmap(const AddressRange&) {}
  void onAddressReserve(const AddressRange&) {}
  void onAddressFree(const AddressRange&) {}
  void onDeviceMemory(const DeviceMemory&) {}
  // Version 3's records (Note [The simulated device]).
  void onSimulatedDevice(const SimulatedDeviceInfo&) {}
  void onDeviceRead(const DeviceRead&) {}
  // The flight recorder's records (Note [The flight recorder's file]).
  void onSection(const Section&) {}
  void onStepPeak(const StepPeak&) {}
  void onGeneratedCode(const GeneratedCode&) {}
  // Version 5's (Note [PyTorch's own allocator]).
  void onSegment(const Segment&) {}
  // Version 6's (Note [Sizes in the trace]).
  void onSimulatedSize(const SimulatedSize&) {}
  // Version 6's (Note [Values where they decide the path]).
  void onAssumedValue(const AssumedValue&) {}
  void onEvent(const Event&) {}
  // Return true to stop reading (after the record just seen).
  bool done() const { return false; }
};

// The records a compressed chunk's stored bytes hold (its records' size, then one zlib stream:
// Note [Compressed chunks]) into `records`; empty, or what is wrong with them. The reader and
// `compact` both inflate through it.
std::string inflateRecords(const uint8_t* stored, size_t size, std::vector<uint8_t>& records);

class TraceReader {
 public:
  // Opens `path` and checks its file header.
  explicit TraceReader(std::string path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const std::string& path() const { return path_; }
  uint64_t fileSize() const { return file_size_; }

  // Reads the whole file (again: each call starts over and rebuilds the tables), handing
  // each record to `visitor`.
  template <typename Visitor>
  void read(Visitor& visitor);
  // Reads the records written since the last read() or follow() stopped (the file has grown,
  // or its open chunk was closed), handing each to `visitor`; the tables and the decoding
  // state carry on. Returns whether any record was read.
  template <typename Visitor>
  bool follow(Visitor& visitor);

  const Tables& tables() const { return tables_; }
  // Where a partial last chunk begins, or 0 when the file ends on a whole chunk.
  uint64_t cutOffset() const { return cut_offset_; }
  // Where the open chunk the file ends in begins (its writer was stopped, or still writes),
  // or 0 when it ends on a whole chunk.
  uint64_t openChunkOffset() const { return open_chunk_offset_; }
  // After read(), when the file ends in an open chunk: where its last whole record ends.
  uint64_t openChunkEnd() const {
    return open_chunk_offset_ ? chunk_offset_ + static_cast<uint64_t>(cursor_ - chunk_.data()) : 0;
  }
  // The file header's flags (format::FileFlags).
  uint32_t flags() const { return flags_; }
  // The file header's format version.
  uint32_t version() const { return version_; }
  // How many events and bytes the last read() saw.
  uint64_t eventCount() const { return event_count_; }

 private:
  // Loads the next chunk's payload into chunk_; false at the end of the file.
  bool nextChunk();
  // Loads the chunk whose header is at `offset` (nextChunk and follow).
  bool loadChunk(uint64_t offset);
  // Replaces chunk_'s stored bytes by the records they hold (Note [Compressed chunks]).
  void inflateChunk(uint64_t offset);
  void rewind();
  // Reads records from cursor_ on, chunk after chunk, to the end of what the file holds.
  template <typename Visitor>
  void readRecords(Visitor& visitor);
  [[noreturn]] void fail(const std::string& what) const;
  // A record ends past its chunk: corrupt, except in an open chunk, where it is the end of
  // what the writer finished (throws OpenChunkEnd).
  [[noreturn]] void cutOff() const;
  struct OpenChunkEnd {};
  uint64_t varint();
  // A time delta field, in nanoseconds (Note [Times in microseconds]).
  uint64_t timeDelta() { return varint() * time_unit_ns_; }
  int64_t zigzag();
  uint8_t byte();
  std::string bytes();
  void checkId(uint32_t id, size_t count, const char* table) const;
  // The one bound on device indices (format::kMaxDevices) every command relies on.
  int deviceIndex(int64_t index, const char* record) const;
  uint64_t recordOffset() const;
  // Reads the file's size again (follow()); false when the file is gone.
  bool refreshSize();

  // Reads the record at cursor_ and hands it to `visitor`: the one place records are told
  // apart (a new record type is a case there and a read function below).
  template <typename Visitor>
  void readRecord(Visitor& visitor);
  // One function per record type, reading its fields after the type byte as RecordWriter writes
  // them (tracer/recorder/record_writer.cpp), checking them, and adding what the record defines
  // to the tables: the record (or the id it was given) is returned for the visitor.
  const ProcessInfo& readProcessInfo();
  uint32_t readString();
  uint32_t readPythonFrame();
  uint32_t readPythonStack();
  uint32_t readNativeStack();
  uint32_t readLoadedObject();
  const Device& readDevice();
  const Context& readContext();
  Marker readMarker();
  Event readEvent(uint8_t type);  // an allocation or a free: the type byte holds bits of it
  Event readFailedAlloc();
  uint32_t readModuleScope();  // the module now running on the context's thread
  std::pair<uint64_t, format::Category> readCategory();            // address, category
  std::pair<uint64_t, uint32_t> readOwnerModule();                 // address, module string id
  std::pair<uint64_t, format::TrainingPhase> readTrainingPhase();  // time, phase
  std::pair<uint64_t, uint64_t> readStepEnd();                     // time, step
  // Version 2's records.
  const DistributedInfo& readDistributed();  // a rank of a torch.distributed job
  MemoryMap readMemoryMap();
  AddressRange readAddressRange();  // an unmap, a reservation or its release
  DeviceMemory readDeviceMemory();
  // Version 3's records.
  const SimulatedDeviceInfo& readSimulatedDevice();
  DeviceRead readDeviceRead();
  AssumedValue readAssumedValue();
  // Version 4's (Note [The flight recorder's file]).
  const Section& readSection();
  StepPeak readStepPeak();
  const GeneratedCode& readGeneratedCode();
  // Version 5's; `near`: version 10's kSegmentNear.
  Segment readSegment(bool near = false);
  // Version 6's.
  SimulatedSize readSimulatedSize();
  // Version 10's (Note [Records beside the events, shorter]): the same as kCategory's,
  // kOwnerModule's and kString's.
  std::pair<uint64_t, format::Category> readRecentCategory();
  std::pair<uint64_t, uint32_t> readRecentOwnerModule();
  uint32_t readStringAfter(bool from = false);    // from: version 12's kStringFrom
  uint64_t recentAllocation(const char* record);  // the address of a field k of the ring
  // Version 11's and 12's events (Note [Events in fewer bytes] in records.h), in place of
  // readEvent.
  Event readCompactEvent(uint8_t type);
  // An allocation's size, the same in every version from 7 (Note [Event tables] in records.h): the
  // sizes table's slot `entry` names it, or (0) its field follows and takes its slot; the
  // allocation at `address` joins the ring of recent allocations.
  uint64_t allocationSize(uint32_t entry, uint64_t address);
  // Version 12's allocation after its time (Note [Allocations named by the blocks before them] in
  // records.h): its address (into last_address_) and its size, returned; the rings take it.
  uint64_t readBlockAllocation(uint32_t entry);
  // An address field of version 11's (an allocation's v > 0, or 0 and the delta): the address.
  uint64_t compactAddress(uint64_t value);

  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  std::vector<uint8_t> chunk_;
  const uint8_t* cursor_ = nullptr;
  const uint8_t* end_ = nullptr;
  uint64_t chunk_offset_ = 0;  // file offset of the current chunk's payload
  uint64_t next_chunk_offset_ = 0;
  const uint8_t* record_start_ = nullptr;
  uint64_t cut_offset_ = 0;
  uint64_t open_chunk_offset_ = 0;  // the open chunk being read (0: none)
  // The header of the compressed chunk being read (0: the chunk is not): record offsets then
  // count its inflated records, not the file's bytes.
  uint64_t compressed_chunk_offset_ = 0;
  std::vector<uint8_t> inflated_;  // inflateChunk's output, swapped with chunk_
  bool at_end_ = false;            // an open chunk's end was reached: nothing follows it
  uint64_t records_read_ = 0;
  uint32_t flags_ = 0;
  Tables tables_;
  uint32_t version_ = 0;  // the file header's

  // Decoding state that carries over chunks.
  Context context_;
  bool tracing_ = false;
  uint64_t last_time_ = 0;
  uint64_t time_unit_ns_ = 1;  // kProcessInfo's (version 8), 1 before it
  uint64_t last_address_ = 0;
  format::EventTables event_tables_;  // version 7 (Note [Event tables])
  uint32_t last_python_stack_[2] = {0, 0};
  uint32_t last_native_stack_[2] = {0, 0};
  uint64_t event_count_ = 0;
  bool seen_process_info_ = false;
  // The nn.Module of each thread (few threads: a vector beats a map), and of the context's.
  std::vector<std::pair<int64_t, uint32_t>> module_by_thread_;
  uint32_t current_module_ = 0;
  Section section_;         // the last kSection read
  uint64_t last_step_ = 0;  // the last kStepPeak's (the next one's fields are relative to them)
  uint64_t last_step_end_ns_ = 0;
};

// ---- implementation of the template members ------------------------------------------

template <typename Visitor>
void TraceReader::read(Visitor& visitor) {
  rewind();
  readRecords(visitor);
}

template <typename Visitor>
void TraceReader::readRecords(Visitor& visitor) {
  try {
    do {
      while (cursor_ < end_) {
        record_start_ = cursor_;
        readRecord(visitor);
        ++records_read_;
        if (visitor.done()) return;
      }
    } while (nextChunk());
  } catch (const OpenChunkEnd&) {
    // The open chunk ends here: the writer had not finished the record that starts here, or
    // wrote none yet. follow() starts again at it.
    cursor_ = end_ = record_start_;
    at_end_ = true;
  }
}

template <typename Visitor>
bool TraceReader::follow(Visitor& visitor) {
  uint64_t records = records_read_;
  if (!refreshSize()) return false;
  if (open_chunk_offset_) {
    // The open chunk again (it may have grown, or been closed), from the first record the
    // last read did not take.
    uint64_t resume = chunk_offset_ + static_cast<uint64_t>(cursor_ - chunk_.data());
    at_end_ = false;
    if (!loadChunk(open_chunk_offset_)) return false;
    cursor_ = chunk_.data() + (resume - chunk_offset_);
    if (cursor_ > end_) cursor_ = end_;
  }
  at_end_ = false;
  cut_offset_ = 0;
  readRecords(visitor);
  return records_read_ != records;
}

// Inline, unlike the other records' functions (reader.cpp): it runs once per event.
inline Event TraceReader::readEvent(uint8_t type) {
  using format::EventBits;
  uint32_t entry = type & EventBits::kTableEntry;
  if (entry && version_ < format::kEventTablesVersion) fail("an event with reserved bits set");
  int kind = (type & EventBits::kFree) ? 1 : 0;
  Event event;
  event.kind = kind ? EventKind::kFree : EventKind::kAlloc;
  event.index = event_count_++;
  last_time_ += timeDelta();
  event.time_ns = last_time_;
  if (kind && entry) {
    // One of the last allocations (Note [Event tables] in records.h).
    if (type & EventBits::kAddressIn256) fail("a free naming a recent allocation with bit 5 set");
    last_address_ = event_tables_.recentAllocation(entry);
  } else {
    // Unsigned: a delta times 256 wraps like the addresses do, where a signed one could
    // overflow (undefined) on a crafted file.
    uint64_t delta = static_cast<uint64_t>(zigzag());
    if (type & EventBits::kAddressIn256) delta *= 256;
    last_address_ += delta;
  }
  event.address = last_address_;
  event.size = kind ? 0 : allocationSize(entry, event.address);
  if (!(type & EventBits::kSamePythonStack)) {
    last_python_stack_[kind] = static_cast<uint32_t>(varint());
    checkId(last_python_stack_[kind], tables_.python_stacks.size(), "Python stack");
  }
  if (!(type & EventBits::kSameNativeStack)) {
    last_native_stack_[kind] = static_cast<uint32_t>(varint());
    checkId(last_native_stack_[kind], tables_.native_stacks.size(), "native stack");
  }
  event.python_stack = last_python_stack_[kind];
  event.native_stack = last_native_stack_[kind];
  event.traced = tracing_;
  event.module = current_module_;
  event.context = &context_;
  return event;
}

inline uint64_t TraceReader::allocationSize(uint32_t entry, uint64_t address) {
  uint64_t size;
  if (entry) {
    size = event_tables_.sizes[entry - 1];
  } else {
    size = varint();
    event_tables_.sizes[format::EventTables::sizeSlot(size)] = size;
  }
  event_tables_.addAllocation(address);
  return size;
}

inline uint64_t TraceReader::compactAddress(uint64_t value) {
  // Unsigned, as in readEvent: a delta times 256 wraps like the addresses do.
  if (value) return last_address_ + static_cast<uint64_t>(codec::unzigzag(value - 1)) * 256;
  return last_address_ + static_cast<uint64_t>(zigzag());
}

inline Event TraceReader::readCompactEvent(uint8_t type) {
  using format::CompactEventBits;
  using format::EventBits;
  using format::EventTables;
  uint32_t entry = type & EventBits::kTableEntry;
  int kind = (type & EventBits::kFree) ? 1 : 0;
  bool blocks = version_ >= format::kBlockNamesVersion;
  Event event;
  event.kind = kind ? EventKind::kFree : EventKind::kAlloc;
  event.index = event_count_++;
  uint64_t units = (type & CompactEventBits::kTime) >> CompactEventBits::kTimeShift;
  if (units == CompactEventBits::kTimeInline) units += varint();
  last_time_ += units * time_unit_ns_;
  event.time_ns = last_time_;
  if (kind) {
    // The k-th most recent allocation (k > 0), or 0 and the address field.
    uint32_t k = entry;
    if (!entry) {
      uint64_t value = varint();
      if (value & 1) {
        uint64_t place = (value >> 1) + EventTables::kRecentAllocations + 1;
        if (place > event_tables_.ringAllocations())
          fail("a free naming allocation " + std::to_string(place) + " before this one, of " +
               std::to_string(event_tables_.ringAllocations()) + " known");
        k = static_cast<uint32_t>(place);
      } else {
        last_address_ = compactAddress(value >> 1);
      }
    }
    if (k) last_address_ = event_tables_.recentAllocation(k);
    event.address = last_address_;
    event.size = 0;
    if (blocks)
      event_tables_.addFree(last_address_,
                            k ? event_tables_.recentSize(k) : EventTables::kUnknownSize);
  } else if (blocks) {
    event.size = readBlockAllocation(entry);
    event.address = last_address_;
  } else {
    last_address_ = compactAddress(varint());
    event.address = last_address_;
    event.size = allocationSize(entry, event.address);
  }
  if (!(type & CompactEventBits::kSameStacks)) {
    uint64_t stacks = varint();
    if (blocks) {
      // A zigzag delta from the previous Python stack of its kind (version 12).
      uint64_t python = last_python_stack_[kind] + uint64_t(codec::unzigzag(stacks >> 1));
      if (python >> 32) fail("a Python stack id past 2^32");
      last_python_stack_[kind] = static_cast<uint32_t>(python);
    } else {
      last_python_stack_[kind] = static_cast<uint32_t>(stacks >> 1);
      if (stacks >> 33) fail("a Python stack id past 2^32");
    }
    checkId(last_python_stack_[kind], tables_.python_stacks.size(), "Python stack");
    if (stacks & 1) {
      last_native_stack_[kind] = static_cast<uint32_t>(varint());
      checkId(last_native_stack_[kind], tables_.native_stacks.size(), "native stack");
    }
  }
  event.python_stack = last_python_stack_[kind];
  event.native_stack = last_native_stack_[kind];
  event.traced = tracing_;
  event.module = current_module_;
  event.context = &context_;
  return event;
}

inline uint64_t TraceReader::readBlockAllocation(uint32_t entry) {
  using format::BlockForm;
  using format::EventTables;
  uint64_t value = varint();
  uint64_t k = (value >> BlockForm::kShift) + 1;
  uint64_t size = 0;
  bool sized = false;
  switch (value & BlockForm::kMask) {
    case BlockForm::kDelta:
      last_address_ =
          value ? last_address_ +
                      static_cast<uint64_t>(codec::unzigzag((value >> BlockForm::kShift) - 1)) * 256
                : last_address_ + static_cast<uint64_t>(zigzag());
      break;
    case BlockForm::kFreedBlock:
    case BlockForm::kFreedAddress: {
      if (k > event_tables_.ringFrees())
        fail("an allocation naming free " + std::to_string(k) + " before it, of " +
             std::to_string(event_tables_.ringFrees()) + " known");
      uint32_t at = (event_tables_.frees - static_cast<uint32_t>(k)) & (EventTables::kRing - 1);
      last_address_ = event_tables_.freed[at];
      if ((value & BlockForm::kMask) == BlockForm::kFreedBlock) {
        size = event_tables_.freed_sizes[at];
        if (size == EventTables::kUnknownSize)
          fail("an allocation naming the size of free " + std::to_string(k) +
               " before it, whose size is not known (it named no allocation of the ring)");
        if (entry) fail("an allocation naming a freed block's size and a size slot");
        sized = true;
      }
      break;
    }
    default:  // BlockForm::kAllocationEnd
      if (k > event_tables_.ringAllocations())
        fail("an allocation at the end of allocation " + std::to_string(k) + " before it, of " +
             std::to_string(event_tables_.ringAllocations()) + " known");
      last_address_ = event_tables_.ends[(event_tables_.allocations - static_cast<uint32_t>(k)) &
                                         (EventTables::kRing - 1)];
  }
  if (!sized) {
    if (entry) {
      size = event_tables_.sizes[entry - 1];
    } else {
      // In 512-byte units when odd; 0: the size's own varint follows.
      uint64_t field = varint();
      if (field == 0) {
        size = varint();
      } else if (field & 1) {
        if (field >> 56) fail("an allocation size past 2^64 bytes");
        size = (field >> 1) * BlockForm::kRounding;
      } else {
        size = field >> 1;
      }
      event_tables_.sizes[format::EventTables::sizeSlot(size)] = size;
    }
  }
  event_tables_.addSizedAllocation(last_address_, size);
  return size;
}

template <typename Visitor>
void TraceReader::readRecord(Visitor& visitor) {
  using format::RecordType;
  uint8_t type = byte();
  if (!seen_process_info_ && type != static_cast<uint8_t>(RecordType::kProcessInfo))
    fail("the first record is not the process information");
  if (type & format::EventBits::kEvent) {
    // Two functions, chosen here once an event, so that version 10's decoding stays as it was.
    if (version_ >= format::kCompactEventsVersion) return visitor.onEvent(readCompactEvent(type));
    return visitor.onEvent(readEvent(type));
  }
  if (type <= static_cast<uint8_t>(format::kLastRecordType) &&
      format::firstVersion(static_cast<RecordType>(type)) > version_)
    fail("a record of type " + std::to_string(type) + " (trace format version " +
         std::to_string(format::firstVersion(static_cast<RecordType>(type))) + ") in a version " +
         std::to_string(version_) + " file");
  switch (static_cast<RecordType>(type)) {
    case RecordType::kProcessInfo:
      return visitor.onProcessInfo(readProcessInfo());
    case RecordType::kDistributed:
      return visitor.onDistributed(readDistributed());
    case RecordType::kString: {
      uint32_t id = readString();
      return visitor.onString(id, tables_.strings[id]);
    }
    case RecordType::kPythonFrame: {
      uint32_t id = readPythonFrame();
      return visitor.onPythonFrame(id, tables_.python_frames[id]);
    }
    case RecordType::kPythonStack: {
      uint32_t id = readPythonStack();
      return visitor.onPythonStack(id, tables_.python_stacks[id]);
    }
    case RecordType::kNativeStack: {
      uint32_t id = readNativeStack();
      return visitor.onNativeStack(id, tables_.native_stacks[id]);
    }
    case RecordType::kLoadedObject: {
      uint32_t id = readLoadedObject();
      return visitor.onLoadedObject(id, tables_.loaded_objects[id]);
    }
    case RecordType::kDevice:
      return visitor.onDevice(readDevice());
    case RecordType::kContext:
      return visitor.onContext(readContext());
    case RecordType::kMarker:
      return visitor.onMarker(readMarker());
    case RecordType::kFailedAlloc:
      return visitor.onEvent(readFailedAlloc());
    case RecordType::kModuleScope: {
      uint32_t module = readModuleScope();
      return visitor.onModuleScope(context_.thread_id, module);
    }
    case RecordType::kCategory: {
      auto [address, category] = readCategory();
      return visitor.onCategory(address, category);
    }
    case RecordType::kTrainingPhase: {
      auto [time_ns, phase] = readTrainingPhase();
      return visitor.onTrainingPhase(time_ns, phase);
    }
    case RecordType::kStepEnd: {
      auto [time_ns, step] = readStepEnd();
      return visitor.onStepEnd(time_ns, step);
    }
    case RecordType::kMemoryMap:
      return visitor.onMemoryMap(readMemoryMap());
    case RecordType::kMemoryUnmap:
      return visitor.onMemoryUnmap(readAddressRange());
    case RecordType::kAddressReserve:
      return visitor.onAddressReserve(readAddressRange());
    case RecordType::kAddressFree:
      return visitor.onAddressFree(readAddressRange());
    case RecordType::kDeviceMemory:
      return visitor.onDeviceMemory(readDeviceMemory());
    case RecordType::kSimulatedDevice:
      return visitor.onSimulatedDevice(readSimulatedDevice());
    case RecordType::kDeviceRead:
      return visitor.onDeviceRead(readDeviceRead());
    case RecordType::kSection:
      return visitor.onSection(readSection());
    case RecordType::kStepPeak:
      return visitor.onStepPeak(readStepPeak());
    case RecordType::kGeneratedCode:
      return visitor.onGeneratedCode(readGeneratedCode());
    case RecordType::kSegment:
      return visitor.onSegment(readSegment());
    case RecordType::kOwnerModule: {
      auto [address, module] = readOwnerModule();
      return visitor.onOwnerModule(address, module);
    }
    case RecordType::kSimulatedSize:
      return visitor.onSimulatedSize(readSimulatedSize());
    case RecordType::kAssumedValue:
      return visitor.onAssumedValue(readAssumedValue());
    case RecordType::kRecentCategory: {
      auto [address, category] = readRecentCategory();
      return visitor.onCategory(address, category);
    }
    case RecordType::kRecentOwnerModule: {
      auto [address, module] = readRecentOwnerModule();
      return visitor.onOwnerModule(address, module);
    }
    case RecordType::kSegmentNear:
      return visitor.onSegment(readSegment(/*near=*/true));
    case RecordType::kStringAfter: {
      uint32_t id = readStringAfter();
      return visitor.onString(id, tables_.strings[id]);
    }
    case RecordType::kStringFrom: {
      uint32_t id = readStringAfter(/*from=*/true);
      return visitor.onString(id, tables_.strings[id]);
    }
  }
  // Nothing is written as type 0: in an open chunk it is where the writer's records end.
  if (type == 0 && open_chunk_offset_) throw OpenChunkEnd{};
  fail("an unknown record type " + std::to_string(type));
}

}  // namespace memtrace::reader
