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

uint8_t* putType(uint8_t* out, RecordType type) {
  *out++ = static_cast<uint8_t>(type);
  return out;
}

size_t cappedLength(const char* text) {
  size_t length = text ? std::strlen(text) : 0;
  return length > format::kMaxStringBytes ? format::kMaxStringBytes : length;
}

// A frame that could not be resolved (no memory for the cache): still a frame, so the
// stack keeps its depth.
python::FrameInfo g_unknown_frame = {"<unknown>", "<unknown>", 9, 9, 0, 0, 0};

}  // namespace

void RecordWriter::beginFile(uint64_t start_monotonic_ns) {
  ++generation_;
  strings_.clear();
  strings_arena_.reset();
  string_count_ = 0;
  frames_.clear();
  frame_count_ = 0;
  python_nodes_.clear();
  python_node_count_ = 0;
  native_nodes_.clear();
  native_node_count_ = 0;
  devices_written_ = 0;
  simulated_written_ = false;
  last_time_ns_ = start_monotonic_ns;
  last_address_ = 0;
  last_python_stack_[0] = last_python_stack_[1] = 0;
  last_native_stack_[0] = last_native_stack_[1] = 0;
  context_written_ = false;
}

uint64_t RecordWriter::timeDelta(uint64_t time_ns) {
  // Times are taken under the recorder's lock, so they only grow; the check keeps a
  // clock oddity from turning into a huge unsigned delta.
  uint64_t delta = time_ns > last_time_ns_ ? time_ns - last_time_ns_ : 0;
  if (time_ns > last_time_ns_) last_time_ns_ = time_ns;
  return delta;
}

bool RecordWriter::writeProcessInfo(const ProcessInfoFields& info) {
  size_t command_line_size = info.command_line_size > format::kMaxStringBytes
                                 ? format::kMaxStringBytes
                                 : info.command_line_size;
  size_t executable_size = cappedLength(info.executable);
  size_t host_size = cappedLength(info.host_name);
  uint8_t* p = file_.reserve(command_line_size + executable_size + host_size + 128);
  if (!p) return false;
  p = putType(p, RecordType::kProcessInfo);
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
  file_.commit(p);
  return true;
}

bool RecordWriter::writeDistributed(const DistributedFields& rank) {
  size_t job_size = cappedLength(rank.job_id);
  uint8_t* p = file_.reserve(job_size + 80);
  if (!p) return false;
  p = putType(p, RecordType::kDistributed);
  for (int64_t value : {rank.rank, rank.world_size, rank.local_rank, rank.local_world_size,
                        rank.group_rank, rank.restart_count})
    p = putZigzag(p, value);
  p = putBytes(p, rank.job_id, job_size);
  file_.commit(p);
  return true;
}

bool RecordWriter::writeSimulatedDevice(const SimulatedDeviceFields& device) {
  size_t name_size = cappedLength(device.profile_name);
  size_t file_size = cappedLength(device.profile_file);
  uint8_t* p = file_.reserve(name_size + file_size + 48);
  if (!p) return false;
  p = putType(p, RecordType::kSimulatedDevice);
  p = putBytes(p, device.profile_name, name_size);
  p = putBytes(p, device.profile_file, file_size);
  p = putVarint(p, device.memory_bytes);
  *p++ = device.memory_set_by_user ? 1 : 0;
  p = putVarint(p, static_cast<uint64_t>(device.device_count));
  file_.commit(p);
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
  p = putType(p, RecordType::kString);
  p = putBytes(p, data, size);
  file_.commit(p);
  uint32_t id = ++string_count_;
  // On a hash collision (different content, same hash) the new string is written but not
  // cached: correct, only less compact.
  if (!entry) {
    const char* copy = strings_arena_.copyString(data, size);
    if (copy) strings_.insert(hash, StringEntry{copy, static_cast<uint32_t>(size), id});
  }
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
    p = putType(p, RecordType::kPythonFrame);
    p = putVarint(p, key.file);
    p = putVarint(p, key.function);
    p = putVarint(p, static_cast<uint64_t>(key.line));
    file_.commit(p);
    id = ++frame_count_;
    frames_.insert(key, id);
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
// (0 on failure).
template <typename Frame, typename Intern>
uint32_t internThroughCache(const Frame* captured, size_t count, Frame* cached,
                            uint32_t* cached_nodes, size_t* cached_count, Intern&& intern) {
  size_t common = 0;
  size_t limit = count < *cached_count ? count : *cached_count;
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
    p = putType(p, RecordType::kPythonStack);
    p = putVarint(p, parent);
    p = putVarint(p, frame);
    file_.commit(p);
    return true;
  });
  if (!node) *ok = false;
  return node;
}

uint32_t RecordWriter::internPythonStack(ThreadState& thread, bool* ok) {
  if (thread.python_count == 0) return 0;
  syncThreadCache(thread);
  uint32_t leaf = internThroughCache(
      thread.python_frames, thread.python_count, thread.cached_python, thread.cached_python_nodes,
      &thread.cached_python_count,
      [&](uint32_t parent, const python::RawFrame& raw, const python::RawFrame*) -> uint32_t {
        python::FrameInfo* info = python::resolveFrame(raw, thread.python_holds_gil);
        uint32_t frame = internFrame(info ? info : &g_unknown_frame, ok);
        return *ok ? internPythonNode(parent, frame, ok) : 0;
      });
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
          p = putType(p, RecordType::kNativeStack);
          p = putVarint(p, parent);
          p = putZigzag(p, static_cast<int64_t>(ip - (parent_ip ? *parent_ip : 0)));
          file_.commit(p);
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
    p = putType(p, RecordType::kLoadedObject);
    p = putVarint(p, path);
    p = putVarint(p, object.bias);
    p = putBytes(p, object.build_id, object.build_id_size);
    p = putVarint(p, object.segment_count);
    for (uint32_t i = 0; i < object.segment_count; ++i) {
      p = putVarint(p, object.segments[i].start);
      p = putVarint(p, object.segments[i].size);
    }
    file_.commit(p);
  });
  return ok;
}

bool RecordWriter::writeModuleScope(ThreadState& thread) {
  if (thread.written_module_generation == generation_ &&
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
  p = putType(p, RecordType::kModuleScope);
  p = putVarint(p, path);
  file_.commit(p);
  thread.written_module_generation = generation_;
  thread.written_module_version = thread.module_version;
  return true;
}

bool RecordWriter::deviceWritten(int device) const {
  return device < 0 || device >= format::kMaxDevices || (devices_written_ >> device & 1);
}

bool RecordWriter::writeDevice(int device, const char* name, uint64_t total_bytes) {
  bool ok = true;
  uint32_t name_id = internString(name, cappedLength(name), &ok);
  uint8_t* p = ok ? file_.reserve(32) : nullptr;
  if (!p) return false;
  p = putType(p, RecordType::kDevice);
  p = putZigzag(p, device);
  p = putVarint(p, name_id);
  p = putVarint(p, total_bytes);
  file_.commit(p);
  if (device >= 0 && device < format::kMaxDevices) devices_written_ |= uint64_t{1} << device;
  return true;
}

bool RecordWriter::writeMarker(uint64_t time_ns, format::MarkerKind kind, const char* name) {
  bool ok = true;
  uint32_t name_id = name ? internString(name, cappedLength(name), &ok) : 0;
  uint8_t* p = ok ? file_.reserve(32) : nullptr;
  if (!p) return false;
  p = putType(p, RecordType::kMarker);
  p = putVarint(p, timeDelta(time_ns));
  *p++ = static_cast<uint8_t>(kind);
  p = putVarint(p, name_id);
  file_.commit(p);
  return true;
}

bool RecordWriter::writeCategory(uintptr_t address, format::Category category) {
  uint8_t* p = file_.reserve(16);
  if (!p) return false;
  p = putType(p, RecordType::kCategory);
  p = putVarint(p, address);
  *p++ = static_cast<uint8_t>(category);
  file_.commit(p);
  return true;
}

bool RecordWriter::writeTrainingPhase(uint64_t time_ns, format::TrainingPhase phase) {
  uint8_t* p = file_.reserve(16);
  if (!p) return false;
  p = putType(p, RecordType::kTrainingPhase);
  p = putVarint(p, timeDelta(time_ns));
  *p++ = static_cast<uint8_t>(phase);
  file_.commit(p);
  return true;
}

bool RecordWriter::writeMemoryMap(uint64_t time_ns, uintptr_t address, uint64_t size,
                                  uint64_t offset, uint64_t handle) {
  uint8_t* p = file_.reserve(64);
  if (!p) return false;
  p = putType(p, RecordType::kMemoryMap);
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, address);
  p = putVarint(p, size);
  p = putVarint(p, offset);
  p = putVarint(p, handle);
  file_.commit(p);
  return true;
}

bool RecordWriter::writeAddressRange(uint64_t time_ns, RecordType type, uintptr_t address,
                                     uint64_t size) {
  uint8_t* p = file_.reserve(40);
  if (!p) return false;
  p = putType(p, type);
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, address);
  p = putVarint(p, size);
  file_.commit(p);
  return true;
}

bool RecordWriter::writeDeviceMemory(uint64_t time_ns, int device, uint64_t free_bytes,
                                     uint64_t total_bytes) {
  uint8_t* p = file_.reserve(40);
  if (!p) return false;
  p = putType(p, RecordType::kDeviceMemory);
  p = putVarint(p, timeDelta(time_ns));
  p = putZigzag(p, device);
  p = putVarint(p, free_bytes);
  p = putVarint(p, total_bytes);
  file_.commit(p);
  return true;
}

bool RecordWriter::writeStepEnd(uint64_t time_ns, uint64_t step) {
  uint8_t* p = file_.reserve(24);
  if (!p) return false;
  p = putType(p, RecordType::kStepEnd);
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, step);
  file_.commit(p);
  return true;
}

bool RecordWriter::setContext(const EventContext& context) {
  if (context_written_ && context == context_) return true;
  uint8_t* p = file_.reserve(40);
  if (!p) return false;
  p = putType(p, RecordType::kContext);
  p = putVarint(p, static_cast<uint64_t>(context.thread_id));
  // A device past the ones a trace may name (format::kMaxDevices) is written as unknown: the
  // reader refuses any other index.
  bool named = context.device >= -1 && context.device < format::kMaxDevices;
  p = putZigzag(p, named ? context.device : -1);
  p = putVarint(p, context.stream);
  *p++ = static_cast<uint8_t>(context.api);
  *p++ = static_cast<uint8_t>(context.level);
  file_.commit(p);
  context_ = context;
  context_written_ = true;
  return true;
}

bool RecordWriter::writeEvent(uint8_t kind_bit, uint64_t time_ns, uintptr_t address,
                              const uint64_t* size, uint32_t python_stack, uint32_t native_stack) {
  uint8_t* p = file_.reserve(64);
  if (!p) return false;
  uint8_t* type = p++;
  uint8_t bits = EventBits::kEvent | kind_bit;
  p = putVarint(p, timeDelta(time_ns));
  auto delta = static_cast<int64_t>(address - last_address_);
  if ((delta & 0xff) == 0) {
    bits |= EventBits::kAddressIn256;
    delta >>= 8;  // exact: the low byte is zero, and >> of a negative value is arithmetic
  }
  p = putZigzag(p, delta);
  last_address_ = address;
  if (size) p = putVarint(p, *size);
  int kind = kind_bit ? 1 : 0;
  if (python_stack == last_python_stack_[kind]) {
    bits |= EventBits::kSamePythonStack;
  } else {
    p = putVarint(p, python_stack);
    last_python_stack_[kind] = python_stack;
  }
  if (native_stack == last_native_stack_[kind]) {
    bits |= EventBits::kSameNativeStack;
  } else {
    p = putVarint(p, native_stack);
    last_native_stack_[kind] = native_stack;
  }
  *type = bits;
  file_.commit(p);
  return true;
}

bool RecordWriter::writeAlloc(uint64_t time_ns, uintptr_t address, uint64_t size,
                              uint32_t python_stack, uint32_t native_stack) {
  return writeEvent(0, time_ns, address, &size, python_stack, native_stack);
}

bool RecordWriter::writeFree(uint64_t time_ns, uintptr_t address, uint32_t python_stack,
                             uint32_t native_stack) {
  return writeEvent(EventBits::kFree, time_ns, address, nullptr, python_stack, native_stack);
}

bool RecordWriter::writeFailedAlloc(uint64_t time_ns, uint64_t size, uint32_t python_stack,
                                    uint32_t native_stack) {
  uint8_t* p = file_.reserve(48);
  if (!p) return false;
  p = putType(p, RecordType::kFailedAlloc);
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, size);
  p = putVarint(p, python_stack);
  p = putVarint(p, native_stack);
  file_.commit(p);
  return true;
}

bool RecordWriter::writeDeviceRead(uint64_t time_ns, uint64_t bytes, uint32_t python_stack,
                                   uint32_t native_stack) {
  uint8_t* p = file_.reserve(48);
  if (!p) return false;
  p = putType(p, RecordType::kDeviceRead);
  p = putVarint(p, timeDelta(time_ns));
  p = putVarint(p, bytes);
  p = putVarint(p, python_stack);
  p = putVarint(p, native_stack);
  file_.commit(p);
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
  p = putType(p, RecordType::kGeneratedCode);
  p = putVarint(p, file_id);
  p = putVarint(p, static_cast<uint64_t>(first_line));
  p = putVarint(p, static_cast<uint64_t>(line_count));
  p = putVarint(p, stack);
  file_.commit(p);
  return true;
}

}  // namespace memtrace
