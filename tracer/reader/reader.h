// The reading end of the trace format (records.h): streams a trace file's records to a
// visitor, keeping only the tables (strings, frames, stacks, loaded objects, devices), which
// grow with the number of distinct stacks, never with the number of events.
//
// Errors throw TraceError, whose message names the file, the byte offset and what was
// expected. A file cut short (the writer was killed) is not an error: reading stops at the
// last whole chunk and cutOffset() says where the rest began.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

// The tables a trace defines; ids index them from 1 (index 0 is a placeholder).
struct Tables {
  ProcessInfo process;
  std::optional<DistributedInfo> distributed;  // a rank's trace only
  std::vector<std::string> strings{""};
  std::vector<PythonFrame> python_frames{PythonFrame{0, 0, 0}};
  std::vector<StackNode> python_stacks{StackNode{0, 0}};
  std::vector<NativeNode> native_stacks{NativeNode{0, 0}};
  std::vector<LoadedObject> loaded_objects{LoadedObject{}};
  std::vector<Device> devices;

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
  void onTrainingPhase(uint64_t /*time_ns*/, format::TrainingPhase) {}
  void onStepEnd(uint64_t /*time_ns*/, uint64_t /*step*/) {}
  void onEvent(const Event&) {}
  // Return true to stop reading (after the record just seen).
  bool done() const { return false; }
};

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

  const Tables& tables() const { return tables_; }
  // Where a partial last chunk begins, or 0 when the file ends on a whole chunk.
  uint64_t cutOffset() const { return cut_offset_; }
  // How many events and bytes the last read() saw.
  uint64_t eventCount() const { return event_count_; }

 private:
  // Loads the next chunk's payload into chunk_; false at the end of the file.
  bool nextChunk();
  void rewind();
  [[noreturn]] void fail(const std::string& what) const;
  uint64_t varint();
  int64_t zigzag();
  uint8_t byte();
  std::string bytes();
  void checkId(uint32_t id, size_t count, const char* table) const;
  // The one bound on device indices (format::kMaxDevices) every command relies on.
  int deviceIndex(int64_t index, const char* record) const;
  uint64_t recordOffset() const;

  template <typename Visitor>
  void readRecord(Visitor& visitor);

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
  Tables tables_;

  // Decoding state that carries over chunks.
  Context context_;
  bool tracing_ = false;
  uint64_t last_time_ = 0;
  uint64_t last_address_ = 0;
  uint32_t last_python_stack_[2] = {0, 0};
  uint32_t last_native_stack_[2] = {0, 0};
  uint64_t event_count_ = 0;
  bool seen_process_info_ = false;
  // The nn.Module of each thread (few threads: a vector beats a map), and of the context's.
  std::vector<std::pair<int64_t, uint32_t>> module_by_thread_;
  uint32_t current_module_ = 0;
};

// ---- implementation of the template members ------------------------------------------

template <typename Visitor>
void TraceReader::read(Visitor& visitor) {
  rewind();
  while (nextChunk()) {
    while (cursor_ < end_) {
      record_start_ = cursor_;
      readRecord(visitor);
      if (visitor.done()) return;
    }
  }
}

template <typename Visitor>
void TraceReader::readRecord(Visitor& visitor) {
  using format::EventBits;
  using format::RecordType;
  uint8_t type = byte();
  if (!seen_process_info_ && type != static_cast<uint8_t>(RecordType::kProcessInfo))
    fail("the first record is not the process information");
  if (type & EventBits::kEvent) {
    if (type & EventBits::kReserved) fail("an event with reserved bits set");
    int kind = (type & EventBits::kFree) ? 1 : 0;
    Event event;
    event.kind = kind ? EventKind::kFree : EventKind::kAlloc;
    event.index = event_count_++;
    last_time_ += varint();
    event.time_ns = last_time_;
    // Unsigned: a delta times 256 wraps like the addresses do, where a signed one could
    // overflow (undefined) on a crafted file.
    uint64_t delta = static_cast<uint64_t>(zigzag());
    if (type & EventBits::kAddressIn256) delta *= 256;
    last_address_ += delta;
    event.address = last_address_;
    event.size = kind ? 0 : varint();
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
    visitor.onEvent(event);
    return;
  }
  switch (static_cast<RecordType>(type)) {
    case RecordType::kProcessInfo: {
      if (seen_process_info_) fail("a second process information record");
      ProcessInfo& info = tables_.process;
      info.pid = static_cast<int64_t>(varint());
      info.parent_pid = static_cast<int64_t>(varint());
      info.start_unix_ns = varint();
      info.start_monotonic_ns = varint();
      std::string command_line = bytes();
      info.command_line.clear();
      for (size_t begin = 0; begin <= command_line.size();) {
        size_t end = command_line.find('\0', begin);
        if (end == std::string::npos) end = command_line.size();
        info.command_line.push_back(command_line.substr(begin, end - begin));
        begin = end + 1;
      }
      info.executable = bytes();
      info.host_name = bytes();
      info.tracer_version = bytes();
      uint8_t mode = byte();
      if (mode > static_cast<uint8_t>(format::StackMode::kAll)) fail("an unknown stack mode");
      info.stack_mode = static_cast<format::StackMode>(mode);
      info.python_depth = static_cast<uint32_t>(varint());
      info.native_depth = static_cast<uint32_t>(varint());
      info.free_stacks = byte() != 0;
      seen_process_info_ = true;
      last_time_ = 0;
      visitor.onProcessInfo(info);
      return;
    }
    case RecordType::kDistributed: {
      if (tables_.distributed) fail("a second rank description");
      DistributedInfo info;
      for (int64_t* field : {&info.rank, &info.world_size, &info.local_rank, &info.local_world_size,
                             &info.group_rank, &info.restart_count}) {
        *field = zigzag();
        if (*field < -1) fail("a rank description with a negative field");
      }
      info.job_id = bytes();
      if (info.world_size >= 0 && info.rank >= info.world_size)
        fail("a rank description whose rank is past its world size");
      tables_.distributed = std::move(info);
      visitor.onDistributed(*tables_.distributed);
      return;
    }
    case RecordType::kString: {
      tables_.strings.push_back(bytes());
      visitor.onString(static_cast<uint32_t>(tables_.strings.size() - 1), tables_.strings.back());
      return;
    }
    case RecordType::kPythonFrame: {
      PythonFrame frame;
      frame.file = static_cast<uint32_t>(varint());
      frame.function = static_cast<uint32_t>(varint());
      frame.line = static_cast<int32_t>(varint());
      checkId(frame.file, tables_.strings.size(), "string");
      checkId(frame.function, tables_.strings.size(), "string");
      tables_.python_frames.push_back(frame);
      visitor.onPythonFrame(static_cast<uint32_t>(tables_.python_frames.size() - 1), frame);
      return;
    }
    case RecordType::kPythonStack: {
      StackNode node;
      node.parent = static_cast<uint32_t>(varint());
      node.frame = static_cast<uint32_t>(varint());
      checkId(node.parent, tables_.python_stacks.size(), "Python stack");
      checkId(node.frame, tables_.python_frames.size(), "Python frame");
      if (node.frame == 0) fail("a Python stack node without a frame");
      tables_.python_stacks.push_back(node);
      visitor.onPythonStack(static_cast<uint32_t>(tables_.python_stacks.size() - 1), node);
      return;
    }
    case RecordType::kNativeStack: {
      NativeNode node;
      node.parent = static_cast<uint32_t>(varint());
      checkId(node.parent, tables_.native_stacks.size(), "native stack");
      uint64_t parent_ip = node.parent ? tables_.native_stacks[node.parent].ip : 0;
      node.ip = parent_ip + static_cast<uint64_t>(zigzag());
      tables_.native_stacks.push_back(node);
      visitor.onNativeStack(static_cast<uint32_t>(tables_.native_stacks.size() - 1), node);
      return;
    }
    case RecordType::kLoadedObject: {
      LoadedObject object;
      object.path = static_cast<uint32_t>(varint());
      checkId(object.path, tables_.strings.size(), "string");
      object.bias = varint();
      object.build_id = bytes();
      uint64_t count = varint();
      if (count > 64) fail("a loaded object with more than 64 segments");
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t start = varint();
        object.segments.emplace_back(start, varint());
      }
      tables_.loaded_objects.push_back(std::move(object));
      visitor.onLoadedObject(static_cast<uint32_t>(tables_.loaded_objects.size() - 1),
                             tables_.loaded_objects.back());
      return;
    }
    case RecordType::kDevice: {
      Device device;
      device.device = deviceIndex(zigzag(), "a device record");
      device.name = static_cast<uint32_t>(varint());
      checkId(device.name, tables_.strings.size(), "string");
      device.total_bytes = varint();
      tables_.devices.push_back(device);
      visitor.onDevice(device);
      return;
    }
    case RecordType::kContext: {
      context_.thread_id = static_cast<int64_t>(varint());
      context_.device = deviceIndex(zigzag(), "a context");
      context_.stream = varint();
      uint8_t api = byte();
      uint8_t level = byte();
      if (api >= static_cast<uint8_t>(format::Api::kCount)) fail("an unknown API in a context");
      if (level >= static_cast<uint8_t>(format::Level::kCount))
        fail("an unknown level in a context");
      context_.api = static_cast<format::Api>(api);
      context_.level = static_cast<format::Level>(level);
      current_module_ = 0;
      for (const auto& [thread, module] : module_by_thread_)
        if (thread == context_.thread_id) current_module_ = module;
      visitor.onContext(context_);
      return;
    }
    case RecordType::kModuleScope: {
      uint32_t module = static_cast<uint32_t>(varint());
      checkId(module, tables_.strings.size(), "string");
      bool known = false;
      for (auto& [thread, current] : module_by_thread_)
        if (thread == context_.thread_id) {
          current = module;
          known = true;
        }
      if (!known) module_by_thread_.emplace_back(context_.thread_id, module);
      current_module_ = module;
      visitor.onModuleScope(context_.thread_id, module);
      return;
    }
    case RecordType::kMarker: {
      Marker marker;
      last_time_ += varint();
      marker.time_ns = last_time_;
      uint8_t kind = byte();
      if (kind >= static_cast<uint8_t>(format::MarkerKind::kCount)) fail("an unknown marker kind");
      marker.kind = static_cast<format::MarkerKind>(kind);
      marker.name = static_cast<uint32_t>(varint());
      checkId(marker.name, tables_.strings.size(), "string");
      if (marker.kind == format::MarkerKind::kTracingStarted) tracing_ = true;
      if (marker.kind == format::MarkerKind::kTracingStopped ||
          marker.kind == format::MarkerKind::kTraceClosed)
        tracing_ = false;
      visitor.onMarker(marker);
      return;
    }
    case RecordType::kFailedAlloc: {
      Event event;
      event.kind = EventKind::kFailedAlloc;
      event.index = event_count_++;
      last_time_ += varint();
      event.time_ns = last_time_;
      event.address = 0;
      event.size = varint();
      event.python_stack = static_cast<uint32_t>(varint());
      event.native_stack = static_cast<uint32_t>(varint());
      checkId(event.python_stack, tables_.python_stacks.size(), "Python stack");
      checkId(event.native_stack, tables_.native_stacks.size(), "native stack");
      event.traced = tracing_;
      event.module = current_module_;
      event.context = &context_;
      visitor.onEvent(event);
      return;
    }
    case RecordType::kCategory: {
      uint64_t address = varint();
      uint8_t category = byte();
      if (category >= static_cast<uint8_t>(format::Category::kCount))
        fail("an unknown category " + std::to_string(category));
      visitor.onCategory(address, static_cast<format::Category>(category));
      return;
    }
    case RecordType::kTrainingPhase: {
      last_time_ += varint();
      uint8_t phase = byte();
      if (phase >= static_cast<uint8_t>(format::TrainingPhase::kCount))
        fail("an unknown training phase " + std::to_string(phase));
      visitor.onTrainingPhase(last_time_, static_cast<format::TrainingPhase>(phase));
      return;
    }
    case RecordType::kStepEnd: {
      last_time_ += varint();
      uint64_t step = varint();
      if (step == 0) fail("a step end numbered 0 (steps count from 1)");
      visitor.onStepEnd(last_time_, step);
      return;
    }
  }
  fail("an unknown record type " + std::to_string(type));
}

}  // namespace memtrace::reader
