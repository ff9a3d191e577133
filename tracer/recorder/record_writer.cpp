#include "tracer/recorder/record_writer.h"

#include <cstring>

#include "tracer/format/codec.h"
#include "tracer/recorder/native_stack.h"

namespace memtrace {
namespace {

using codec::putBytes;
using codec::putVarint;
using codec::putZigzag;
using format::EventBits;
using format::RecordType;

#ifndef MEMTRACE_VERSION
#error "MEMTRACE_VERSION is defined by tracer/recorder/CMakeLists.txt (from the VERSION file)"
#endif
// The ProcessInfo's tracer version: the VERSION file's, as the tools' --version prints it.
constexpr char kVersionString[] = "memtrace " MEMTRACE_VERSION;

// FNV-1a: strings are interned once per distinct frame, so a simple hash is enough.
uint64_t hashBytes(const char* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i)
    hash = (hash ^ static_cast<uint8_t>(data[i])) * 0x100000001b3ULL;
  return hash;
}

size_t cappedLength(const char* text) {
  size_t length = text ? std::strlen(text) : 0;
  return length > format::kMaxStringBytes ? format::kMaxStringBytes : length;
}

// A frame that could not be resolved (no memory for the cache): still a frame, so the
// stack keeps its depth.
python::FrameInfo g_unknown_frame = {"<unknown>", "<unknown>", 9, 9, 0, 0, 0};

}  // namespace

void RecordWriter::beginFile(uint64_t start_monotonic_ns, uint32_t time_unit_ns) {
  ++generation_;
  start_monotonic_ns_ = start_monotonic_ns;
  time_unit_ns_ = time_unit_ns == 1 ? 1 : 1000;  // the two timeDelta knows
  last_step_ = 0;
  last_step_end_ns_ = start_monotonic_ns;
  string_by_id_.clear();
  frame_by_id_.clear();
  python_node_by_id_.clear();
  // Index 0 is "none" in every table.
  string_by_id_.push(StringRef{"", 0});
  frame_by_id_.push(FrameEntry{0, 0, 0});
  python_node_by_id_.push(NodeEntry{0, 0});
  strings_.clear();
  strings_arena_.reset();
  string_count_ = 0;
  frames_.clear();
  frame_count_ = 0;
  python_nodes_.clear();
  python_node_count_ = 0;
  std::memset(static_cast<void*>(python_node_memo_), 0, sizeof(python_node_memo_));
  native_nodes_.clear();
  native_node_count_ = 0;
  devices_written_ = 0;
  simulated_written_ = false;
  resetBases(start_monotonic_ns);
}

void RecordWriter::resetBases(uint64_t time_ns) {
  last_time_ns_ = unitStart(time_ns);
  last_address_ = 0;
  last_python_stack_[0] = last_python_stack_[1] = 0;
  last_native_stack_[0] = last_native_stack_[1] = 0;
  // Zeroed in place: the tables are 160 KiB (version 12's rings), too large for a temporary on
  // the stack of a thread that allocates (the recorder runs on the program's threads).
  std::memset(static_cast<void*>(&event_tables_), 0, sizeof(event_tables_));
  context_written_ = false;
  ++scope_generation_;
  ++prelude_epoch_;
}

void RecordWriter::logTable(const uint8_t* start, const uint8_t* end) {
  if (!table_log_) return;
  uint32_t size = static_cast<uint32_t>(end - start);
  uint8_t length[4];
  codec::putU32(length, size);
  // A log that cannot grow loses the record: the flight recorder then stops compacting
  // (flight.cpp checks the log's size against what it expects).
  if (table_log_->append(length, 4) && !table_log_->append(start, size))
    table_log_->resize(table_log_->size() - 4);
}

bool RecordWriter::writeLoggedRecords(const GrowableArray<uint8_t>& log, size_t bytes) {
  for (size_t at = 0; at + 4 <= bytes;) {
    uint32_t size = codec::getU32(log.data() + at);
    const uint8_t* record = log.data() + at + 4;
    uint8_t* p = file_.reserve(size);
    if (!p) return false;
    std::memcpy(p + 1, record + 1, size - 1);
    file_.commit(p, p + size, record[0]);
    at += 4 + size;
  }
  return true;
}

bool RecordWriter::writeSection(uint64_t time_ns, format::SectionKind kind, bool tracing,
                                format::TrainingPhase phase, uint64_t window_events,
                                const SectionTotals& totals) {
  uint8_t* p = file_.reserve(128 + 40 * static_cast<size_t>(totals.device_count));
  if (!p) return false;
  uint8_t* start = p++;
  // Nanoseconds, at the start of their unit (Note [Times in microseconds]).
  p = putVarint(p, unitStart(time_ns) - start_monotonic_ns_);
  *p++ = static_cast<uint8_t>(kind);
  *p++ = tracing ? 1 : 0;
  *p++ = static_cast<uint8_t>(phase);
  p = putVarint(p, window_events);
  for (uint64_t value : {totals.events, totals.allocations, totals.frees, totals.failed_allocations,
                         totals.allocated_bytes, totals.untraced_allocations})
    p = putVarint(p, value);
  p = putVarint(p, static_cast<uint64_t>(totals.device_count));
  for (int i = 0; i < totals.device_count; ++i) {
    const SectionTotals::Device& device = totals.devices[i];
    p = putZigzag(p, device.device);
    p = putVarint(p, device.allocated_bytes);
    p = putVarint(p, device.peak_bytes);
    p = putVarint(p, unitStart(device.peak_time_ns) - start_monotonic_ns_);
  }
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kSection));
  resetBases(time_ns > last_time_ns_ ? time_ns : last_time_ns_);
  return true;
}

bool RecordWriter::writeStepPeak(uint64_t step, uint64_t begin_ns, uint64_t end_ns,
                                 uint64_t peak_time_ns, uint64_t peak_bytes,
                                 format::TrainingPhase phase, uint32_t module) {
  uint8_t* p = file_.reserve(80);
  if (!p) return false;
  uint8_t* start = p++;
  // Nanoseconds, each time at the start of its unit as the events' (Note [Times in
  // microseconds]).
  begin_ns = unitStart(begin_ns);
  end_ns = unitStart(end_ns);
  peak_time_ns = unitStart(peak_time_ns);
  auto after = [](uint64_t time, uint64_t base) { return time > base ? time - base : 0; };
  p = putZigzag(p, static_cast<int64_t>(step - last_step_));
  p = putVarint(p, after(begin_ns, last_step_end_ns_));
  p = putVarint(p, after(end_ns, begin_ns));
  p = putVarint(p, after(peak_time_ns, begin_ns));
  p = putVarint(p, peak_bytes);
  *p++ = static_cast<uint8_t>(phase);
  p = putVarint(p, module);
  last_step_ = step;
  last_step_end_ns_ = end_ns > begin_ns ? end_ns : begin_ns;
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kStepPeak));
  logTable(start, p);
  return true;
}

bool RecordWriter::writeModuleScopeId(uint32_t module) {
  uint8_t* p = file_.reserve(16);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, module);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kModuleScope));
  return true;
}

bool RecordWriter::stringOf(uint32_t id, const char** data, size_t* size) const {
  if (id == 0 || id >= string_by_id_.size()) return false;
  *data = string_by_id_[id].data;
  *size = string_by_id_[id].size;
  return true;
}

bool RecordWriter::frameOf(uint32_t id, FrameEntry* frame) const {
  if (id == 0 || id >= frame_by_id_.size()) return false;
  *frame = frame_by_id_[id];
  return true;
}

bool RecordWriter::pythonNodeOf(uint32_t id, uint32_t* parent, uint32_t* frame) const {
  if (id == 0 || id >= python_node_by_id_.size()) return false;
  *parent = python_node_by_id_[id].parent;
  *frame = python_node_by_id_[id].frame;
  return true;
}

bool RecordWriter::writeProcessInfo(const ProcessInfoFields& info) {
  size_t command_line_size = info.command_line_size > format::kMaxStringBytes
                                 ? format::kMaxStringBytes
                                 : info.command_line_size;
  size_t executable_size = cappedLength(info.executable);
  size_t host_size = cappedLength(info.host_name);
  uint8_t* p = file_.reserve(command_line_size + executable_size + host_size + 128);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, static_cast<uint64_t>(info.pid));
  p = putVarint(p, static_cast<uint64_t>(info.parent_pid));
  p = putVarint(p, info.start_unix_ns);
  p = putVarint(p, info.start_monotonic_ns);
  p = putBytes(p, info.command_line, command_line_size);
  p = putBytes(p, info.executable, executable_size);
  p = putBytes(p, info.host_name, host_size);
  p = putBytes(p, kVersionString, sizeof(kVersionString) - 1);
  *p++ = static_cast<uint8_t>(info.stack_mode);
  p = putVarint(p, info.python_depth);
  p = putVarint(p, info.native_depth);
  *p++ = info.free_stacks ? 1 : 0;
  p = putVarint(p, time_unit_ns_);  // version 8 (Note [Times in microseconds])
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kProcessInfo));
  logTable(start, p);
  return true;
}

bool RecordWriter::writeDistributed(const DistributedFields& rank) {
  size_t job_size = cappedLength(rank.job_id);
  uint8_t* p = file_.reserve(job_size + 80);
  if (!p) return false;
  uint8_t* start = p++;
  for (int64_t value : {rank.rank, rank.world_size, rank.local_rank, rank.local_world_size,
                        rank.group_rank, rank.restart_count})
    p = putZigzag(p, value);
  p = putBytes(p, rank.job_id, job_size);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kDistributed));
  logTable(start, p);
  return true;
}

bool RecordWriter::writeSimulatedDevice(const SimulatedDeviceFields& device) {
  size_t name_size = cappedLength(device.profile_name);
  size_t file_size = cappedLength(device.profile_file);
  uint8_t* p = file_.reserve(name_size + file_size + 48);
  if (!p) return false;
  uint8_t* start = p++;
  p = putBytes(p, device.profile_name, name_size);
  p = putBytes(p, device.profile_file, file_size);
  p = putVarint(p, device.memory_bytes);
  *p++ = device.memory_set_by_user ? 1 : 0;
  p = putVarint(p, static_cast<uint64_t>(device.device_count));
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kSimulatedDevice));
  // Once a file, like the tables: a flight recorder's compaction writes it again.
  logTable(start, p);
  simulated_written_ = true;
  return true;
}

uint32_t RecordWriter::internString(const char* data, size_t size, bool* ok) {
  if (size > format::kMaxStringBytes) size = format::kMaxStringBytes;
  uint64_t hash = hashBytes(data, size);
  StringEntry* entry = strings_.find(hash);
  if (entry && entry->size == size && std::memcmp(entry->data, data, size) == 0) return entry->id;
  uint8_t* p = file_.reserve(size + 16);
  if (!p) {
    *ok = false;
    return 0;
  }
  uint8_t* start = p++;
  // The longest beginning it shares with one of the kStringWindow strings before it, the newest
  // on a tie (Note [Strings that begin as an earlier one] in records.h): written as kStringAfter
  // (the string just before) or kStringFrom when that saves a byte or more.
  size_t shared = 0;
  uint32_t back = 0;
  for (uint32_t b = 1; b <= format::kStringWindow && b <= string_count_; ++b) {
    const StringRef& earlier = string_by_id_[string_count_ + 1 - b];
    size_t most = earlier.size < size ? earlier.size : size;
    if (most > format::kMaxSharedPrefix) most = format::kMaxSharedPrefix;
    if (most <= shared) continue;
    size_t same = 0;
    while (same < most && earlier.data[same] == data[same]) ++same;
    if (same > shared) {
      shared = same;
      back = b;
    }
  }
  RecordType type = RecordType::kString;
  if (shared >= 2 + (back > 1 ? 1 : 0)) {
    type = back > 1 ? RecordType::kStringFrom : RecordType::kStringAfter;
    if (back > 1) p = putVarint(p, back);
    p = putVarint(p, shared);
    p = putBytes(p, data + shared, size - shared);
  } else {
    p = putBytes(p, data, size);
  }
  file_.commit(start, p, static_cast<uint8_t>(type));
  logTable(start, p);
  uint32_t id = ++string_count_;
  // On a hash collision (different content, same hash) the new string is written but not
  // cached: correct, only less compact.
  const char* copy = strings_arena_.copyString(data, size);
  if (copy && !entry) strings_.insert(hash, StringEntry{copy, static_cast<uint32_t>(size), id});
  string_by_id_.push(StringRef{copy ? copy : "", copy ? static_cast<uint32_t>(size) : 0});
  return id;
}

uint32_t RecordWriter::internFrame(python::FrameInfo* frame, bool* ok) {
  if (frame->generation == generation_) return frame->file_frame_id;
  FrameKey key{internString(frame->file, frame->file_size, ok),
               internString(frame->function, frame->function_size, ok), frame->line};
  if (!*ok) return 0;
  uint32_t id;
  if (uint32_t* known = frames_.find(key)) {
    id = *known;
  } else {
    uint8_t* p = file_.reserve(32);
    if (!p) {
      *ok = false;
      return 0;
    }
    uint8_t* start = p++;
    p = putVarint(p, key.file);
    p = putVarint(p, key.function);
    p = putVarint(p, static_cast<uint64_t>(key.line));
    file_.commit(start, p, static_cast<uint8_t>(RecordType::kPythonFrame));
    logTable(start, p);
    id = ++frame_count_;
    frames_.insert(key, id);
    frame_by_id_.push(FrameEntry{key.file, key.function, key.line});
  }
  frame->file_frame_id = id;
  frame->generation = generation_;
  return id;
}

namespace {

// Interns the stack `captured` (innermost first) into a trie, through the thread's cache of
// its last stack (`cached`, outermost first; cached_nodes[i] is the node of cached[0, i]):
// the outer frames both share keep their nodes, and only the others are looked up, with
// intern(parent node, frame, the frame's parent or nullptr), which returns the frame's node
// (0 on failure). `known`: outer frames the caller knows both share (not compared again).
template <typename Frame, typename Intern>
uint32_t internThroughCache(const Frame* captured, size_t count, Frame* cached,
                            uint32_t* cached_nodes, size_t* cached_count, Intern&& intern,
                            size_t known = 0) {
  size_t limit = count < *cached_count ? count : *cached_count;
  size_t common = known < limit ? known : limit;
  while (common < limit && cached[common] == captured[count - 1 - common]) ++common;
  uint32_t parent = common ? cached_nodes[common - 1] : 0;
  for (size_t i = common; i < count; ++i) {
    const Frame& frame = captured[count - 1 - i];
    uint32_t node = intern(parent, frame, i ? &cached[i - 1] : nullptr);
    if (!node) {
      *cached_count = 0;
      return 0;
    }
    cached[i] = frame;
    cached_nodes[i] = node;
    parent = node;
  }
  *cached_count = count;
  return parent;
}

}  // namespace

void RecordWriter::syncThreadCache(ThreadState& thread) const {
  if (thread.cache_generation == generation_) return;
  thread.cache_generation = generation_;
  thread.cached_python_count = 0;
  thread.cached_python_walk = 0;
  thread.cached_native_count = 0;
}

template <typename Write>
uint32_t RecordWriter::internNode(NodeMap& nodes, uint32_t* count, NodeKey key, Write&& write) {
  if (uint32_t* known = nodes.find(key)) return *known;
  if (!write()) return 0;
  uint32_t node = ++*count;
  nodes.insert(key, node);
  return node;
}

uint32_t RecordWriter::internPythonNode(uint32_t parent, uint32_t frame, bool* ok) {
  uint32_t node = internNode(python_nodes_, &python_node_count_, NodeKey{parent, 0, frame}, [&] {
    uint8_t* p = file_.reserve(24);
    if (!p) return false;
    uint8_t* start = p++;
    p = putVarint(p, parent);
    p = putVarint(p, frame);
    file_.commit(start, p, static_cast<uint8_t>(RecordType::kPythonStack));
    logTable(start, p);
    python_node_by_id_.push(NodeEntry{parent, frame});
    return true;
  });
  if (!node) *ok = false;
  return node;
}

// Note [Python nodes remembered by frame]
// When a thread's stack changes, each frame that changed cost three lookups: its meaning
// (resolveFrame: the process's frame cache, a 24-byte key hashed by mixBits), its id in the file
// (internFrame: strings and frames on first use) and its node under its parent
// (internPythonNode, another hash table): 382 instructions an allocation on GPT-2's forward with
// Python stacks, where 40 % of allocations change 3.9 inner frames (docs/performance.md). All
// three are functions of (parent node, RawFrame) for the life of a file: the frame cache never
// forgets a RawFrame nor changes its FrameInfo (a code object that died gives its successors
// another identity: Note [Code objects that die]), a FrameInfo's id is fixed for its file, and
// a node by (parent, frame id). So the writer remembers the answer in a direct-mapped table by
// (parent, RawFrame): a hit is one multiply, a load and four compares; a miss (a new pair, or a
// pair whose slot another took) takes the three lookups and then the slot. Only a resolved frame
// is remembered: one that could not be (out of memory; the public API's frame met again without
// the GIL) is `<unknown>` now and may be resolved later. Emptied with the file's tables
// (beginFile), as the nodes it names are; 2,048 slots of 24 bytes. internPythonStack, inclusive,
// on GPT-2's forward (batch 1, simulated H200, callgrind_annotate over bench/cost_parts.py's
// dumps): 137 k instructions a forward before, 60 k after (the hit inlined into it).
[[gnu::always_inline]] inline uint32_t RecordWriter::internPythonFrameNode(
    uint32_t parent, const python::RawFrame& raw, bool holds_gil, bool* ok) {
  static_assert((kPythonNodeMemoSlots & (kPythonNodeMemoSlots - 1)) == 0);
  constexpr int kSlotBits = __builtin_ctzll(kPythonNodeMemoSlots);
  uint64_t key = reinterpret_cast<uintptr_t>(raw.code) ^
                 (uint64_t{parent} << 32 | static_cast<uint32_t>(raw.position)) ^
                 (uint64_t{raw.identity} << 16);
  PythonNodeMemo& memo = python_node_memo_[(key * kFibonacciMultiplier) >> (64 - kSlotBits)];
  if (memo.node != 0 && memo.parent == parent && memo.code == raw.code &&
      memo.position == raw.position && memo.identity == raw.identity)
    return memo.node;
  return internPythonFrameNodeAgain(&memo, parent, raw, holds_gil, ok);
}

uint32_t RecordWriter::internPythonFrameNodeAgain(PythonNodeMemo* slot, uint32_t parent,
                                                  const python::RawFrame& raw, bool holds_gil,
                                                  bool* ok) {
  python::FrameInfo* info = python::resolveFrame(raw, holds_gil);
  uint32_t frame = internFrame(info ? info : &g_unknown_frame, ok);
  uint32_t node = *ok ? internPythonNode(parent, frame, ok) : 0;
  if (node != 0 && info) *slot = PythonNodeMemo{raw.code, raw.position, raw.identity, parent, node};
  return node;
}

uint32_t RecordWriter::internPythonStack(ThreadState& thread, bool* ok) {
  if (thread.python_count == 0) return 0;
  syncThreadCache(thread);
  // Outer frames the walk reused from the one cached_python was made of are not compared again
  // (Note [Python stacks flat in depth], python_stack.cpp).
  uint64_t walk = thread.python_walk.frames_serial;
  size_t known =
      walk != 0 && walk == thread.cached_python_walk + 1 ? thread.python_walk.same_outer : 0;
  // internThroughCache reads no frame of the `known` outermost while its cache holds them; the
  // reused tail is read in place then (Note [The reused tail read in place], python_stack.h).
  size_t unread = known < thread.cached_python_count ? known : thread.cached_python_count;
  if (unread < thread.python_walk.tail_pending)
    python::fillReusedTail(thread.python_frames, &thread.python_walk);
  uint32_t leaf = internThroughCache(
      thread.python_frames, thread.python_count, thread.cached_python, thread.cached_python_nodes,
      &thread.cached_python_count,
      [&](uint32_t parent, const python::RawFrame& raw, const python::RawFrame*) -> uint32_t {
        return internPythonFrameNode(parent, raw, thread.python_holds_gil, ok);
      },
      known);
  thread.cached_python_walk = leaf ? walk : 0;
  if (!leaf) *ok = false;
  return leaf;
}

uint32_t RecordWriter::internNativeStack(ThreadState& thread, bool* ok, bool* unknown_object) {
  if (thread.native_count == 0) return 0;
  syncThreadCache(thread);
  uint32_t leaf = internThroughCache(
      thread.native_ips, thread.native_count, thread.cached_native, thread.cached_native_nodes,
      &thread.cached_native_count,
      [&](uint32_t parent, uintptr_t ip, const uintptr_t* parent_ip) -> uint32_t {
        return internNode(native_nodes_, &native_node_count_, NodeKey{parent, 0, ip}, [&] {
          uint8_t* p = file_.reserve(24);
          if (!p) return false;
          uint8_t* start = p++;
          p = putVarint(p, parent);
          p = putZigzag(p, static_cast<int64_t>(ip - (parent_ip ? *parent_ip : 0)));
          file_.commit(start, p, static_cast<uint8_t>(RecordType::kNativeStack));
          logTable(start, p);
          // A new node is the only time an address is seen first: check the object table then.
          if (!native::objectTableCovers(ip)) *unknown_object = true;
          return true;
        });
      });
  if (!leaf) *ok = false;
  return leaf;
}

bool RecordWriter::writeNewLoadedObjects() {
  bool ok = true;
  native::forEachUnwrittenObject(generation_, [&](const native::LoadedObject& object) {
    if (!ok) return;
    uint32_t path = internString(object.path, std::strlen(object.path), &ok);
    uint8_t* p =
        ok ? file_.reserve(64 + object.build_id_size + 20 * object.segment_count) : nullptr;
    if (!p) {
      ok = false;
      return;
    }
    uint8_t* start = p++;
    p = putVarint(p, path);
    p = putVarint(p, object.bias);
    p = putBytes(p, object.build_id, object.build_id_size);
    p = putVarint(p, object.segment_count);
    for (uint32_t i = 0; i < object.segment_count; ++i) {
      p = putVarint(p, object.segments[i].start);
      p = putVarint(p, object.segments[i].size);
    }
    file_.commit(start, p, static_cast<uint8_t>(RecordType::kLoadedObject));
    logTable(start, p);
  });
  return ok;
}

bool RecordWriter::writeModuleScope(ThreadState& thread) {
  if (thread.written_module_generation == scope_generation_ &&
      thread.written_module_version == thread.module_version)
    return true;
  bool ok = true;
  uint32_t path = 0;
  if (thread.module_depth > 0) {
    size_t top =
        (thread.module_depth < kMaxModuleDepth ? thread.module_depth : kMaxModuleDepth) - 1;
    path = internString(thread.module_paths[top], thread.module_lengths[top], &ok);
  }
  uint8_t* p = ok ? file_.reserve(16) : nullptr;
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, path);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kModuleScope));
  thread.written_module_generation = scope_generation_;
  thread.written_module_version = thread.module_version;
  thread.written_module_id = path;
  return true;
}

bool RecordWriter::writeDevice(int device, const char* name, uint64_t total_bytes) {
  bool ok = true;
  uint32_t name_id = internString(name, cappedLength(name), &ok);
  uint8_t* p = ok ? file_.reserve(32) : nullptr;
  if (!p) return false;
  uint8_t* start = p++;
  p = putZigzag(p, device);
  p = putVarint(p, name_id);
  p = putVarint(p, total_bytes);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kDevice));
  logTable(start, p);
  if (device >= 0 && device < format::kMaxDevices) devices_written_ |= uint64_t{1} << device;
  return true;
}

bool RecordWriter::writeMarker(uint64_t time_ns, format::MarkerKind kind, const char* name) {
  bool ok = true;
  uint32_t name_id = name ? internString(name, cappedLength(name), &ok) : 0;
  uint8_t* p = ok ? file_.reserve(32) : nullptr;
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  *p++ = static_cast<uint8_t>(kind);
  p = putVarint(p, name_id);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kMarker));
  return true;
}

// An allocation among the last EventTables::kRing is named by its place there, others by their
// address (Note [Records beside the events, shorter] in records.h).
bool RecordWriter::writeCategory(uintptr_t address, format::Category category) {
  uint8_t* p = file_.reserve(16);
  if (!p) return false;
  uint8_t* start = p++;
  RecordType type = RecordType::kCategory;
  if (uint32_t k = event_tables_.findInRing(address)) {
    type = RecordType::kRecentCategory;
    p = putVarint(p, uint64_t{k} << 3 | static_cast<uint8_t>(category));
  } else {
    p = putVarint(p, address);
    *p++ = static_cast<uint8_t>(category);
  }
  file_.commit(start, p, static_cast<uint8_t>(type));
  return true;
}

bool RecordWriter::writeOwnerModule(uintptr_t address, const char* module, uint32_t* module_id) {
  bool ok = true;
  uint32_t id = internString(module, cappedLength(module), &ok);
  uint8_t* p = ok ? file_.reserve(24) : nullptr;
  if (!p) return false;
  uint8_t* start = p++;
  RecordType type = RecordType::kOwnerModule;
  if (uint32_t k = event_tables_.findInRing(address)) {
    type = RecordType::kRecentOwnerModule;
    p = putVarint(p, k);
  } else {
    p = putVarint(p, address);
  }
  p = putVarint(p, id);
  file_.commit(start, p, static_cast<uint8_t>(type));
  *module_id = id;
  return true;
}

bool RecordWriter::writeTrainingPhase(uint64_t time_ns, format::TrainingPhase phase) {
  uint8_t* p = file_.reserve(16);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  *p++ = static_cast<uint8_t>(phase);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kTrainingPhase));
  return true;
}

bool RecordWriter::writeMemoryMap(uint64_t time_ns, uintptr_t address, uint64_t size,
                                  uint64_t offset, uint64_t handle) {
  uint8_t* p = file_.reserve(64);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, address);
  p = putVarint(p, size);
  p = putVarint(p, offset);
  p = putVarint(p, handle);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kMemoryMap));
  return true;
}

bool RecordWriter::writeAddressRange(uint64_t time_ns, RecordType type, uintptr_t address,
                                     uint64_t size) {
  uint8_t* p = file_.reserve(40);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, address);
  p = putVarint(p, size);
  file_.commit(start, p, static_cast<uint8_t>(type));
  return true;
}

bool RecordWriter::writeSegment(uint64_t time_ns, format::SegmentAction action, int device,
                                uintptr_t address, uint64_t size, uint64_t graph_pool,
                                uint64_t user_pool) {
  uint8_t* p = file_.reserve(72);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  *p++ = static_cast<uint8_t>(action);
  p = putZigzag(p, device);
  // Near the events' address base, which moves to it (Note [Records beside the events, shorter]);
  // a delta too large for the field's flag bit (an address past 2^62 away) is written whole.
  RecordType type = RecordType::kSegmentNear;
  auto delta = static_cast<int64_t>(address - last_address_);
  if ((delta & 0xff) == 0) {
    p = putVarint(p, codec::zigzag(delta >> 8) << 1 | 1);  // >> of a negative value: arithmetic
  } else if (codec::zigzag(delta) >> 63 == 0) {
    p = putVarint(p, codec::zigzag(delta) << 1);
  } else {
    type = RecordType::kSegment;
    p = putVarint(p, address);
  }
  if (type == RecordType::kSegmentNear) last_address_ = address;
  p = putVarint(p, size);
  p = putVarint(p, graph_pool);
  p = putVarint(p, user_pool);
  file_.commit(start, p, static_cast<uint8_t>(type));
  return true;
}

bool RecordWriter::writeDeviceMemory(uint64_t time_ns, int device, uint64_t free_bytes,
                                     uint64_t total_bytes) {
  uint8_t* p = file_.reserve(40);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  p = putZigzag(p, device);
  p = putVarint(p, free_bytes);
  p = putVarint(p, total_bytes);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kDeviceMemory));
  return true;
}

bool RecordWriter::writeStepEnd(uint64_t time_ns, uint64_t step) {
  uint8_t* p = file_.reserve(24);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, step);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kStepEnd));
  return true;
}

bool RecordWriter::setContext(const EventContext& context) {
  if (context_written_ && context == context_) return true;
  uint8_t* p = file_.reserve(40);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, static_cast<uint64_t>(context.thread_id));
  // A device past the ones a trace may name (format::kMaxDevices) is written as unknown: the
  // reader refuses any other index.
  bool named = context.device >= -1 && context.device < format::kMaxDevices;
  p = putZigzag(p, named ? context.device : -1);
  p = putVarint(p, context.stream);
  *p++ = static_cast<uint8_t>(context.api);
  *p++ = static_cast<uint8_t>(context.level);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kContext));
  context_ = context;
  context_written_ = true;
  ++prelude_epoch_;
  return true;
}

bool RecordWriter::writeFailedAlloc(uint64_t time_ns, uint64_t size, uint32_t python_stack,
                                    uint32_t native_stack) {
  uint8_t* p = file_.reserve(48);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, size);
  p = putVarint(p, python_stack);
  p = putVarint(p, native_stack);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kFailedAlloc));
  return true;
}

bool RecordWriter::writeDeviceRead(uint64_t time_ns, uint64_t bytes, uint32_t python_stack,
                                   uint32_t native_stack) {
  uint8_t* p = file_.reserve(48);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, bytes);
  p = putVarint(p, python_stack);
  p = putVarint(p, native_stack);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kDeviceRead));
  return true;
}

bool RecordWriter::writeSimulatedSize(uint64_t time_ns, uintptr_t address, uint64_t bytes,
                                      uint64_t at_most, format::Certainty certainty,
                                      const char* question, uint32_t python_stack,
                                      uint32_t native_stack) {
  bool ok = true;
  uint32_t question_id = internString(question, std::strlen(question), &ok);
  if (!ok) return false;
  uint8_t* p = file_.reserve(80);
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, address);
  p = putVarint(p, bytes);
  p = putVarint(p, at_most == UINT64_MAX ? 0 : at_most + 1);
  *p++ = static_cast<uint8_t>(certainty);
  p = putVarint(p, question_id);
  p = putVarint(p, python_stack);
  p = putVarint(p, native_stack);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kSimulatedSize));
  return true;
}

bool RecordWriter::writeAssumedValue(uint64_t time_ns, const char* assumed, uint32_t python_stack,
                                     uint32_t native_stack) {
  bool ok = true;
  uint32_t assumed_id = internString(assumed, cappedLength(assumed), &ok);
  uint8_t* p = ok ? file_.reserve(48) : nullptr;
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, assumed_id);
  p = putVarint(p, python_stack);
  p = putVarint(p, native_stack);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kAssumedValue));
  return true;
}

bool RecordWriter::writeGeneratedCode(const char* file, size_t file_size, int32_t first_line,
                                      int32_t line_count, python::FrameInfo* frames, size_t depth) {
  bool ok = true;
  uint32_t file_id = internString(file, file_size, &ok);
  uint32_t stack = 0;
  for (size_t i = 0; ok && i < depth; ++i) {
    uint32_t frame = internFrame(&frames[i], &ok);
    if (ok) stack = internPythonNode(stack, frame, &ok);
  }
  uint8_t* p = ok && stack ? file_.reserve(40) : nullptr;
  if (!p) return false;
  uint8_t* start = p++;
  p = putVarint(p, file_id);
  p = putVarint(p, static_cast<uint64_t>(first_line));
  p = putVarint(p, static_cast<uint64_t>(line_count));
  p = putVarint(p, stack);
  file_.commit(start, p, static_cast<uint8_t>(RecordType::kGeneratedCode));
  // A table: a flight recorder's compaction writes it again (Note [The flight recorder's file]).
  logTable(start, p);
  return true;
}

}  // namespace memtrace
