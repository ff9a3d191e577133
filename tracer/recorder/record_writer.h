// Encodes records (records.h) into a TraceFile and keeps the tables of one trace file:
// strings, Python frames, the Python and native stack tries, and the delta bases of the
// event encoding. Everything here runs under the recorder's lock and allocates nothing
// but mmap'd table memory. Every write returns false when the file could not take it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "tracer/common/flat_map.h"
#include "tracer/format/codec.h"
#include "tracer/format/records.h"
#include "tracer/recorder/arena.h"
#include "tracer/recorder/growable_array.h"
#include "tracer/recorder/python_stack.h"
#include "tracer/recorder/thread_state.h"
#include "tracer/recorder/trace_file.h"

namespace memtrace {

// The fields of the kProcessInfo record as the writer takes them: borrowed C strings, nothing
// allocated. (reader::ProcessInfo is the same record as the reader hands it out.)
struct ProcessInfoFields {
  pid_t pid;
  pid_t parent_pid;
  uint64_t start_unix_ns;
  uint64_t start_monotonic_ns;
  const char* command_line;  // arguments separated by NUL
  size_t command_line_size;
  const char* executable;
  const char* host_name;
  format::StackMode stack_mode;
  uint32_t python_depth;
  uint32_t native_depth;
  bool free_stacks;
};

// The kDistributed record's fields (Note [A job's ranks]): -1 where the launcher did not say.
struct DistributedFields {
  int64_t rank;
  int64_t world_size;
  int64_t local_rank;
  int64_t local_world_size;
  int64_t group_rank;
  int64_t restart_count;
  const char* job_id;  // "" when unknown
};

// The kSimulatedDevice record's fields (Note [The simulated device]): borrowed C strings.
struct SimulatedDeviceFields {
  const char* profile_name;
  const char* profile_file;
  uint64_t memory_bytes;  // each device's
  bool memory_set_by_user;
  int device_count;
};

// The context of the events that follow (a kContext record is written when it changes).
struct EventContext {
  pid_t thread_id;
  int device;
  uint64_t stream;
  format::Api api;
  format::Level level;
  // Without a branch per field: it runs at every event that changed something (Note [One
  // opening per event] in recorder.cpp).
  bool operator==(const EventContext& other) const {
    return ((thread_id ^ other.thread_id) | (device ^ other.device) | (stream ^ other.stream) |
            (static_cast<unsigned>(api) ^ static_cast<unsigned>(other.api)) |
            (static_cast<unsigned>(level) ^ static_cast<unsigned>(other.level))) == 0;
  }
};

// The run's totals a flight recorder's kSection carries (records.h).
struct SectionTotals {
  uint64_t events;
  uint64_t allocations;
  uint64_t frees;
  uint64_t failed_allocations;
  uint64_t allocated_bytes;
  uint64_t untraced_allocations;
  struct Device {
    int device;
    uint64_t allocated_bytes;
    uint64_t peak_bytes;
    uint64_t peak_time_ns;  // CLOCK_MONOTONIC, as every time the writer takes
  };
  int device_count;
  Device devices[format::kMaxDevices];
};

class RecordWriter {
 public:
  explicit RecordWriter(TraceFile& file) : file_(file) {}

  // Forgets the previous file's tables; the records that follow start a new file whose
  // time base is `start_monotonic_ns` and whose times count `time_unit_ns` (1 or 1000:
  // Note [Times in microseconds] in records.h).
  void beginFile(uint64_t start_monotonic_ns, uint32_t time_unit_ns = 1000);
  // Identifies the current file's tables (caches elsewhere compare against it).
  uint32_t generation() const { return generation_; }
  // The current file's time base (CLOCK_MONOTONIC ns).
  uint64_t startTime() const { return start_monotonic_ns_; }

  // The table records (those that define ids, and the one-time ones: records.h) are also
  // appended to `log`, each as its length (4 bytes) and its bytes, for the flight recorder to
  // write them again into a compacted file; nullptr stops that.
  void logTablesTo(GrowableArray<uint8_t>* log) { table_log_ = log; }
  // Writes the first `bytes` of such a log as records (not logged again).
  bool writeLoggedRecords(const GrowableArray<uint8_t>& log, size_t bytes);
  // A kSection at `time_ns` (records.h): every decoding base starts afresh after it, here as
  // in the reader.
  bool writeSection(uint64_t time_ns, format::SectionKind kind, bool tracing,
                    format::TrainingPhase phase, uint64_t window_events,
                    const SectionTotals& totals);
  bool writeStepPeak(uint64_t step, uint64_t begin_ns, uint64_t end_ns, uint64_t peak_time_ns,
                     uint64_t peak_bytes, format::TrainingPhase phase, uint32_t module);
  // A module scope record naming `module` (a string id of this file) for the context's
  // thread: a flight section's allocation (the thread's own scope is written again after the
  // section).
  bool writeModuleScopeId(uint32_t module);
  // Every decoding base starts afresh (a kSection, a new file, the start of a compacted file).
  void resetBases(uint64_t time_ns);

  // The tables by id, for what the library writes itself (reports.cpp): false for an id
  // this file has not defined.
  bool stringOf(uint32_t id, const char** data, size_t* size) const;
  struct FrameEntry {
    uint32_t file;  // string ids
    uint32_t function;
    int32_t line;
  };
  bool frameOf(uint32_t id, FrameEntry* frame) const;
  // A Python stack node: its parent node and its frame.
  bool pythonNodeOf(uint32_t id, uint32_t* parent, uint32_t* frame) const;
  // The string id of the nn.Module the file last said `thread` runs (0: none).
  static uint32_t moduleOf(const ThreadState& thread) { return thread.written_module_id; }

  bool writeProcessInfo(const ProcessInfoFields& info);
  bool writeDistributed(const DistributedFields& rank);
  bool writeDevice(int device, const char* name, uint64_t total_bytes);
  // The simulated device (Note [The simulated device]); once a file (simulatedWritten()).
  bool writeSimulatedDevice(const SimulatedDeviceFields& device);
  bool simulatedWritten() const { return simulated_written_; }
  bool writeMarker(uint64_t time_ns, format::MarkerKind kind, const char* name);
  // The training records (Note [Training records]).
  bool writeCategory(uintptr_t address, format::Category category);
  bool writeTrainingPhase(uint64_t time_ns, format::TrainingPhase phase);
  bool writeStepEnd(uint64_t time_ns, uint64_t step);
  // The module whose parameter or buffer the allocation at `address` holds (Note [Weights and
  // their modules]); its path's string id in `module_id`.
  bool writeOwnerModule(uintptr_t address, const char* module, uint32_t* module_id);
  // Virtual memory management (records.h, Note [Virtual memory management]): a mapping, and
  // the records of one address range (kMemoryUnmap, kAddressReserve, kAddressFree).
  bool writeMemoryMap(uint64_t time_ns, uintptr_t address, uint64_t size, uint64_t offset,
                      uint64_t handle);
  bool writeAddressRange(uint64_t time_ns, format::RecordType type, uintptr_t address,
                         uint64_t size);
  // A segment of PyTorch's caching allocator changed (Note [PyTorch's own allocator]).
  bool writeSegment(uint64_t time_ns, format::SegmentAction action, int device, uintptr_t address,
                    uint64_t size, uint64_t graph_pool, uint64_t user_pool);
  // A device memory reading (Note [Device memory readings]).
  bool writeDeviceMemory(uint64_t time_ns, int device, uint64_t free_bytes, uint64_t total_bytes);
  bool setContext(const EventContext& context);
  // Inlined into the record path as they always were: the event tables (Note [Event tables])
  // made them large enough that the compiler would call them instead (a call and its register
  // saves cost more than the tables do).
  [[gnu::always_inline]] bool writeAlloc(uint64_t time_ns, uintptr_t address, uint64_t size,
                                         uint32_t python_stack, uint32_t native_stack) {
    return writeEvent(0, time_ns, address, size, python_stack, native_stack, 0);
  }
  // `number`: the allocation's allocationNumber() when it was written (Note [Events in fewer
  // bytes] in records.h), or kNoNumber: the free then names it only if it is one of the last 7.
  static constexpr uint64_t kNoNumber = ~uint64_t{0};
  [[gnu::always_inline]] bool writeFree(uint64_t time_ns, uintptr_t address, uint32_t python_stack,
                                        uint32_t native_stack, uint64_t number = kNoNumber) {
    return writeEvent(format::EventBits::kFree, time_ns, address, 0, python_stack, native_stack,
                      number);
  }
  // The number the next allocation written will have, for writeFree.
  uint32_t allocationNumber() const { return event_tables_.allocations; }
  bool writeFailedAlloc(uint64_t time_ns, uint64_t size, uint32_t python_stack,
                        uint32_t native_stack);
  // A read of device values on the simulated device (Note [The simulated device]).
  bool writeDeviceRead(uint64_t time_ns, uint64_t bytes, uint32_t python_stack,
                       uint32_t native_stack);
  // A size the simulated GPU answered without knowing it (Note [Sizes in the trace]):
  // `at_most` UINT64_MAX for no bound; `question` the JSON the simulated core described it by.
  bool writeSimulatedSize(uint64_t time_ns, uintptr_t address, uint64_t bytes, uint64_t at_most,
                          format::Certainty certainty, const char* question, uint32_t python_stack,
                          uint32_t native_stack);
  // A value the simulated run assumed where it decided the path, and what (Note [Values where
  // they decide the path]).
  bool writeAssumedValue(uint64_t time_ns, const char* assumed, uint32_t python_stack,
                         uint32_t native_stack);
  // A stretch of generated code and the source stack it stands for (Note [Generated code] in
  // records.h): `depth` frames (at least one), outermost first, interned as a stack's are.
  bool writeGeneratedCode(const char* file, size_t file_size, int32_t first_line,
                          int32_t line_count, python::FrameInfo* frames, size_t depth);
  // Writes the loaded objects (kLoadedObject records) this file has not got yet.
  bool writeNewLoadedObjects();
  // Writes a module scope record if `thread`'s running nn.Module is not the one the file
  // last said for it. Call after setContext() for that thread.
  bool writeModuleScope(ThreadState& thread);

  // The trie node of the stack in thread.python_frames[0, python_count) (innermost
  // first), writing the strings, frames and nodes it needs. 0 for an empty stack or a
  // failure (*ok is then false).
  uint32_t internPythonStack(ThreadState& thread, bool* ok);
  // Likewise for thread.native_ips. *unknown_object is set when an instruction pointer
  // lies outside every loaded object known: the caller refreshes the object table.
  uint32_t internNativeStack(ThreadState& thread, bool* ok, bool* unknown_object);

  bool deviceWritten(int device) const {
    return device < 0 || device >= format::kMaxDevices || (devices_written_ >> device & 1);
  }

  // Whether the file already says what an event of `thread` in `context` needs before it, so
  // that none of setContext, writeModuleScope and the device's record would write anything.
  bool saysAlready(const ThreadState& thread, const EventContext& context) const {
    return context_written_ && context == context_ && deviceWritten(context.device) &&
           thread.written_module_generation == scope_generation_ &&
           thread.written_module_version == thread.module_version;
  }

  // The per-thread fast path (Note [One opening per event] in recorder.cpp): the file still says
  // all an event of `thread` in the context (`stream`, preludeKey(device, api, level)) needs
  // before it, as it did after the thread's last event (rememberPrelude). Whatever could make it
  // stop saying so (a context record of any thread, a new file, a section) moves the epoch on;
  // the thread's own nn.Module changing clears the thread's epoch (memtrace_module_enter and
  // _exit, on the thread itself), so that the comparison needs no word of it.
  static uint64_t preludeKey(int device, format::Api api, format::Level level) {
    return uint64_t(uint32_t(device)) << 16 | uint64_t(api) << 8 | uint64_t(level);
  }
  bool preludeUnchanged(const ThreadState& thread, uint64_t stream, uint64_t key) const {
    return thread.prelude_epoch == prelude_epoch_ && thread.prelude_stream == stream &&
           thread.prelude_key == key;
  }
  // After the prelude of `thread`'s event in `context` was written: remembers it for
  // preludeUnchanged, if the file now says all of it (not yet, for one: a device whose
  // description the shim has not given yet has no record).
  void rememberPrelude(ThreadState& thread, const EventContext& context) const {
    if (!saysAlready(thread, context)) return;
    thread.prelude_epoch = prelude_epoch_;
    thread.prelude_stream = context.stream;
    thread.prelude_key = preludeKey(context.device, context.api, context.level);
  }

 private:
  uint32_t internString(const char* data, size_t size, bool* ok);
  uint32_t internFrame(python::FrameInfo* frame, bool* ok);
  // The Python stack trie's node of `frame` called from `parent`, written if it is new.
  uint32_t internPythonNode(uint32_t parent, uint32_t frame, bool* ok);
  // The node of the captured frame `raw` called from `parent`: resolved, its frame and node
  // written if they are new, through python_node_memo_ (Note [Python nodes remembered by
  // frame]). `holds_gil`: the capturing thread's, as resolveFrame takes it.
  uint32_t internPythonFrameNode(uint32_t parent, const python::RawFrame& raw, bool holds_gil,
                                 bool* ok);
  struct PythonNodeMemo;
  // internPythonFrameNode's way when the table does not know the pair: the lookups, then `slot`.
  [[gnu::noinline]] uint32_t internPythonFrameNodeAgain(PythonNodeMemo* slot, uint32_t parent,
                                                        const python::RawFrame& raw, bool holds_gil,
                                                        bool* ok);
  // `size`: an allocation's (a free's is the ring's).
  [[gnu::always_inline]] bool writeEvent(uint8_t kind_bit, uint64_t time_ns, uintptr_t address,
                                         uint64_t size, uint32_t python_stack,
                                         uint32_t native_stack, uint64_t number);
  // An allocation's address field (Note [Allocations named by the blocks before them]): true
  // when it named a freed block of its size (no size field follows).
  [[gnu::always_inline]] bool putAllocationAddress(uint8_t** p, uintptr_t address, uint64_t size);
  // The writer's indexes' slot of an address (Note [One multiply for a key] in flat_map.h).
  static uint32_t blockIndexSlot(uint64_t address) {
    return static_cast<uint32_t>((address * kFibonacciMultiplier) >> (64 - kBlockIndexBits));
  }
  // The time units from the last timed record to `time_ns`; the last time moves on by them.
  uint64_t timeDelta(uint64_t time_ns);
  // `time_ns` at the start of its time unit (Note [Times in microseconds]), as every time the
  // file holds; the start for a time before it.
  uint64_t unitStart(uint64_t time_ns) const {
    if (time_ns <= start_monotonic_ns_) return start_monotonic_ns_;
    return time_ns - (time_ns - start_monotonic_ns_) % time_unit_ns_;
  }
  // The record just committed at `start`, to the table log if there is one.
  void logTable(const uint8_t* start, const uint8_t* end);
  // Forgets the thread's cached stack if it belongs to another file's tables.
  void syncThreadCache(ThreadState& thread) const;

  struct StringEntry {
    const char* data;
    uint32_t size;
    uint32_t id;
  };
  struct FrameKey {
    uint32_t file;
    uint32_t function;
    int32_t line;
    bool operator==(const FrameKey&) const = default;
  };
  struct FrameKeyHash {
    uint64_t operator()(const FrameKey& k) const {
      return mixBits((uint64_t{k.file} << 32 | k.function) ^ (uint64_t(uint32_t(k.line)) << 17));
    }
  };
  struct NodeKey {
    uint32_t parent;
    uint32_t pad;
    uint64_t child;  // a frame id (Python) or an instruction pointer (native)
    bool operator==(const NodeKey&) const = default;
  };
  struct NodeKeyHash {
    uint64_t operator()(const NodeKey& k) const { return mixBits(k.child * 31 + k.parent); }
  };

  using NodeMap = FlatMap<NodeKey, uint32_t, NodeKeyHash>;
  // The node `key` of a stack trie, calling write() to write its record if it is new.
  template <typename Write>
  uint32_t internNode(NodeMap& nodes, uint32_t* count, NodeKey key, Write&& write);

  TraceFile& file_;
  uint32_t generation_ = 0;
  // Module scopes written are for this generation of bases (a new file or a kSection).
  uint32_t scope_generation_ = 0;
  uint64_t start_monotonic_ns_ = 0;
  uint32_t time_unit_ns_ = 1000;  // 1 or 1000: timeDelta divides by a constant
  GrowableArray<uint8_t>* table_log_ = nullptr;
  // The previous kStepPeak's (its fields are relative to them).
  uint64_t last_step_ = 0;
  uint64_t last_step_end_ns_ = 0;

  // The tables by id (index 0 unused).
  struct StringRef {
    const char* data;
    uint32_t size;
  };
  GrowableArray<StringRef> string_by_id_;
  GrowableArray<FrameEntry> frame_by_id_;
  struct NodeEntry {
    uint32_t parent;
    uint32_t frame;
  };
  GrowableArray<NodeEntry> python_node_by_id_;

  Arena strings_arena_;
  FlatMap<uint64_t, StringEntry> strings_;  // by content hash
  uint32_t string_count_ = 0;
  FlatMap<FrameKey, uint32_t, FrameKeyHash> frames_;
  uint32_t frame_count_ = 0;
  NodeMap python_nodes_;
  uint32_t python_node_count_ = 0;
  // Note [Python nodes remembered by frame] (record_writer.cpp): a frame's node under a parent,
  // by (parent, RawFrame); node 0: an empty slot. Emptied with the file's tables.
  struct PythonNodeMemo {
    const void* code;
    int32_t position;
    uint32_t identity;
    uint32_t parent;
    uint32_t node;
  };
  static constexpr size_t kPythonNodeMemoSlots = 2048;
  PythonNodeMemo python_node_memo_[kPythonNodeMemoSlots] = {};
  NodeMap native_nodes_;
  uint32_t native_node_count_ = 0;
  uint64_t devices_written_ = 0;    // bit d: device d has its kDevice record
  bool simulated_written_ = false;  // the file has its kSimulatedDevice record
  static_assert(format::kMaxDevices <= 64, "devices_written_ has a bit per device");

  // Delta bases of the event encoding (Note [Event bit layout]). The last time is at the
  // start of its unit (unitStart).
  uint64_t last_time_ns_ = 0;
  uintptr_t last_address_ = 0;
  uint32_t last_python_stack_[2] = {0, 0};  // [alloc, free]
  uint32_t last_native_stack_[2] = {0, 0};
  format::EventTables event_tables_;
  // Note [Allocations named by the blocks before them]: the number of the last free, and of the
  // last allocation by its end, at each address's slot; hints, checked against the rings.
  static constexpr unsigned kBlockIndexBits = 12;
  uint32_t free_index_[1u << kBlockIndexBits] = {};
  uint32_t end_index_[1u << kBlockIndexBits] = {};
  EventContext context_{};
  bool context_written_ = false;
  // Moves on with every change of context_, context_written_ or the scope generation: what a
  // thread's fast path compares against (preludeUnchanged). Never 0.
  uint64_t prelude_epoch_ = 1;
};

// The event encoding (Note [Event bit layout] in records.h), inline: it runs once an event.
inline uint64_t RecordWriter::timeDelta(uint64_t time_ns) {
  // Times are taken under the recorder's lock, so they only grow; the check keeps a
  // clock oddity from turning into a huge unsigned delta.
  uint64_t delta = time_ns > last_time_ns_ ? time_ns - last_time_ns_ : 0;
  // Whole units only, the rest left to the next record's delta: the last time stays at the
  // start of a unit (Note [Times in microseconds]). Two divisors known here, so that the
  // default costs a multiplication, not a division.
  if (time_unit_ns_ == 1) {
    last_time_ns_ += delta;
    return delta;
  }
  uint64_t units = delta / 1000;
  last_time_ns_ += units * 1000;
  return units;
}

inline bool RecordWriter::putAllocationAddress(uint8_t** out, uintptr_t address, uint64_t size) {
  using format::BlockForm;
  using format::EventTables;
  uint8_t* p = *out;
  bool sized = false;
  uint64_t value;
  uint32_t slot = blockIndexSlot(address);
  uint32_t number = free_index_[slot];
  uint32_t k = event_tables_.frees - number;
  uint32_t at = number & (EventTables::kRing - 1);
  if (k - 1 < event_tables_.ringFrees() && event_tables_.freed[at] == address) {
    sized = event_tables_.freed_sizes[at] == size;
    value = uint64_t{k - 1} << BlockForm::kShift |
            (sized ? BlockForm::kFreedBlock : BlockForm::kFreedAddress);
  } else {
    number = end_index_[slot];
    k = event_tables_.allocations - number;
    if (k - 1 < event_tables_.ringAllocations() &&
        event_tables_.ends[number & (EventTables::kRing - 1)] == address) {
      value = uint64_t{k - 1} << BlockForm::kShift | BlockForm::kAllocationEnd;
    } else {
      auto delta = static_cast<int64_t>(address - last_address_);
      if ((delta & 0xff) != 0) {
        // rare (CUDA's addresses are 256-aligned): 0, then the whole zigzag delta
        *p++ = 0;
        *out = codec::putZigzag(p, delta);
        return false;
      }
      // exact: the low byte is zero, and >> of a negative value is arithmetic; at most 2^57
      value = (codec::zigzag(delta >> 8) + 1) << BlockForm::kShift;
    }
  }
  *out = codec::putVarint(p, value);
  return sized;
}

inline bool RecordWriter::writeEvent(uint8_t kind_bit, uint64_t time_ns, uintptr_t address,
                                     uint64_t size, uint32_t python_stack, uint32_t native_stack,
                                     uint64_t number) {
  using format::CompactEventBits;
  using format::EventBits;
  using format::EventTables;
  uint8_t* p = file_.reserveEvent();
  if (!p) return false;
  uint8_t* type = p++;
  uint8_t bits = EventBits::kEvent | kind_bit;
  // Version 11's layout (Note [Events in fewer bytes] in records.h): a delta of 0-2 units in the
  // type byte.
  uint64_t units = timeDelta(time_ns);
  if (units < CompactEventBits::kTimeInline) {
    bits |= static_cast<uint8_t>(units << CompactEventBits::kTimeShift);
  } else {
    bits |= CompactEventBits::kTime;
    p = codec::putVarint(p, units - CompactEventBits::kTimeInline);
  }
  if (kind_bit) {
    // A free names its allocation by its place in the ring: its number, else a search of the
    // last 7 (Note [Event tables]).
    uint32_t recent = number != kNoNumber
                          ? event_tables_.placeOf(static_cast<uint32_t>(number), address)
                          : event_tables_.findRecent(address);
    if (recent > EventTables::kRecentAllocations) {
      p = codec::putVarint(p, uint64_t{recent - EventTables::kRecentAllocations - 1} << 1 | 1);
    } else if (recent) {
      bits |= static_cast<uint8_t>(recent);
    } else {
      auto delta = static_cast<int64_t>(address - last_address_);
      if ((delta & 0xff) == 0) {
        p = codec::putVarint(p, (codec::zigzag(delta >> 8) + 1) << 1);
      } else {
        *p++ = 0;
        p = codec::putZigzag(p, delta);
      }
    }
    // The ring of frees (Note [Allocations named by the blocks before them]): the size freed is
    // known, to the reader as here, where the free named its place in the ring.
    free_index_[blockIndexSlot(address)] = event_tables_.frees;
    event_tables_.addFree(address,
                          recent ? event_tables_.recentSize(recent) : EventTables::kUnknownSize);
  } else {
    if (!putAllocationAddress(&p, address, size)) {
      uint32_t slot = EventTables::sizeSlot(size);
      if (event_tables_.sizes[slot] == size) {
        bits |= static_cast<uint8_t>(slot + 1);
      } else {
        // In 512-byte units where 512 divides it; 0 escapes a size no other form holds.
        if (size % format::BlockForm::kRounding == 0) {
          p = codec::putVarint(p, size / format::BlockForm::kRounding << 1 | 1);
        } else if (size >> 63 == 0) {
          p = codec::putVarint(p, size << 1);
        } else {
          *p++ = 0;
          p = codec::putVarint(p, size);
        }
        event_tables_.sizes[slot] = size;
      }
    }
    end_index_[blockIndexSlot(format::blockEnd(address, size))] = event_tables_.allocations;
    event_tables_.addSizedAllocation(address, size);
  }
  last_address_ = address;
  int kind = kind_bit ? 1 : 0;
  bool same_native = native_stack == last_native_stack_[kind];
  if (python_stack == last_python_stack_[kind] && same_native) {
    bits |= CompactEventBits::kSameStacks;
  } else {
    // The Python stack as a delta from the previous one of its kind (version 12).
    int64_t python_delta = int64_t{python_stack} - int64_t{last_python_stack_[kind]};
    p = codec::putVarint(p, codec::zigzag(python_delta) << 1 | (same_native ? 0 : 1));
    if (!same_native) p = codec::putVarint(p, native_stack);
    last_python_stack_[kind] = python_stack;
    last_native_stack_[kind] = native_stack;
  }
  file_.commit(type, p, bits);
  return true;
}

}  // namespace memtrace
