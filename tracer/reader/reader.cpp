#include "tracer/reader/reader.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>

#include "tracer/format/codec.h"

namespace memtrace::reader {

namespace {

// Adds a record's entry to its table; returns the id the entry gets.
template <typename Entry>
uint32_t append(std::vector<Entry>& table, Entry entry) {
  table.push_back(std::move(entry));
  return static_cast<uint32_t>(table.size() - 1);
}

}  // namespace

const Device* Tables::device(int index) const {
  for (const Device& device : devices)
    if (device.device == index) return &device;
  return nullptr;
}

TraceReader::TraceReader(std::string path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "rb");
  if (!file_) throw TraceError(path_ + ": cannot open: " + strerror(errno));
  struct stat info;
  if (fstat(fileno(file_), &info) != 0 || !S_ISREG(info.st_mode)) {
    std::fclose(file_);
    file_ = nullptr;
    throw TraceError(path_ + ": not a regular file");
  }
  file_size_ = static_cast<uint64_t>(info.st_size);
  try {
    rewind();
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
}

TraceReader::~TraceReader() {
  if (file_) std::fclose(file_);
}

void TraceReader::fail(const std::string& what) const {
  if (compressed_chunk_offset_ && record_start_ && !chunk_.empty())
    throw TraceError(path_ + ": " + what + " at byte " +
                     std::to_string(record_start_ - chunk_.data()) +
                     " of the records of the compressed chunk at byte " +
                     std::to_string(compressed_chunk_offset_));
  throw TraceError(path_ + ": " + what + " at byte " + std::to_string(recordOffset()));
}

uint64_t TraceReader::recordOffset() const {
  if (!record_start_ || chunk_.empty()) return next_chunk_offset_;
  return chunk_offset_ + static_cast<uint64_t>(record_start_ - chunk_.data());
}

void TraceReader::rewind() {
  if (file_size_ == 0) throw TraceError(path_ + ": the file is empty");
  std::rewind(file_);
  uint8_t header[format::kFileHeaderSize];
  size_t got = std::fread(header, 1, sizeof(header), file_);
  size_t magic_bytes = got < sizeof(format::kMagic) ? got : sizeof(format::kMagic);
  if (memcmp(header, format::kMagic, magic_bytes) != 0)
    throw TraceError(path_ + ": not a memtrace trace (it does not start with MEMTRACE)");
  if (got < sizeof(header))
    throw TraceError(path_ + ": the file header is cut short (" + std::to_string(got) +
                     " of 16 bytes)");
  uint32_t version = codec::getU32(header + 8);
  if (version < format::kOldestVersion || version > format::kVersion)
    throw TraceError(path_ + ": trace format version " + std::to_string(version) +
                     ", but this memtrace reads versions " +
                     std::to_string(format::kOldestVersion) + " to " +
                     std::to_string(format::kVersion));
  version_ = version;
  flags_ = codec::getU32(header + 12);
  if (flags_ & ~(version >= format::kOpenChunkVersion ? format::kKnownFileFlags : 0u))
    throw TraceError(path_ + ": unknown flags in the file header (corrupted?)");

  tables_ = Tables{};
  context_ = Context{};
  tracing_ = false;
  last_time_ = 0;
  time_unit_ns_ = 1;
  last_address_ = 0;
  // Zeroed in place: the tables are 160 KiB (version 12's rings), too large for a temporary on
  // the stack of a thread that allocates (the recorder runs on the program's threads).
  std::memset(static_cast<void*>(&event_tables_), 0, sizeof(event_tables_));
  last_python_stack_[0] = last_python_stack_[1] = 0;
  last_native_stack_[0] = last_native_stack_[1] = 0;
  event_count_ = 0;
  seen_process_info_ = false;
  module_by_thread_.clear();
  current_module_ = 0;
  section_ = Section{};
  last_step_ = 0;
  last_step_end_ns_ = 0;
  cut_offset_ = 0;
  open_chunk_offset_ = 0;
  compressed_chunk_offset_ = 0;
  at_end_ = false;
  next_chunk_offset_ = format::kFileHeaderSize;
  chunk_.clear();
  cursor_ = end_ = nullptr;
  record_start_ = nullptr;
}

bool TraceReader::refreshSize() {
  struct stat info;
  if (fstat(fileno(file_), &info) != 0) return false;
  file_size_ = static_cast<uint64_t>(info.st_size);
  return true;
}

bool TraceReader::nextChunk() {
  record_start_ = nullptr;
  // Nothing follows an open chunk (Note [Records reach the page cache as they are written]).
  if (at_end_ || open_chunk_offset_) return false;
  return loadChunk(next_chunk_offset_);
}

bool TraceReader::loadChunk(uint64_t offset) {
  record_start_ = nullptr;
  if (offset == file_size_) {
    if (!seen_process_info_) throw TraceError(path_ + ": the trace holds no records");
    return false;
  }
  int fd = fileno(file_);
  auto readAt = [&](uint8_t* out, size_t size, uint64_t at) {
    size_t got = 0;
    while (got < size) {
      ssize_t n = pread(fd, out + got, size - got, static_cast<off_t>(at + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    return got;
  };
  uint8_t header[format::kChunkHeaderSize];
  size_t got = readAt(header, sizeof(header), offset);
  auto cut = [&]() {
    // A partial chunk at the end: the writer was stopped in the middle of a write.
    cut_offset_ = offset;
    if (!seen_process_info_)
      throw TraceError(path_ + ": the file ends before its first whole chunk (byte " +
                       std::to_string(offset) + " of " + std::to_string(file_size_) + ")");
    return false;
  };
  if (got < sizeof(header)) return cut();
  uint32_t size = codec::getU32(header);
  if (size == 0 && version_ >= format::kOpenChunkVersion) {
    // An open chunk: the rest of the file, up to a chunk's bound, read up to its first zero
    // type byte (readRecord) or the end of its last whole record (cutOff). An older file has
    // none: its empty chunk is refused below, as it always was.
    if (!seen_process_info_ && offset != format::kFileHeaderSize)
      throw TraceError(path_ + ": an open chunk before the process information at byte " +
                       std::to_string(offset));
    uint64_t available = file_size_ - offset - sizeof(header);
    size_t region = static_cast<size_t>(
        available < format::kMaxChunkPayload ? available : format::kMaxChunkPayload);
    chunk_.resize(region);
    chunk_.resize(readAt(chunk_.data(), region, offset + sizeof(header)));
    open_chunk_offset_ = offset;
    compressed_chunk_offset_ = 0;
    chunk_offset_ = offset + sizeof(header);
    next_chunk_offset_ = chunk_offset_ + chunk_.size();
    cursor_ = chunk_.data();
    end_ = cursor_ + chunk_.size();
    if (!seen_process_info_ && (chunk_.empty() || chunk_[0] == 0))
      throw TraceError(path_ + ": the trace holds no records");
    return true;
  }
  if (codec::crc32c(header, 8) != codec::getU32(header + 8))
    throw TraceError(path_ + ": corrupted chunk header (checksum mismatch) at byte " +
                     std::to_string(offset));
  bool compressed =
      version_ >= format::kCompressedChunkVersion && (size & format::kCompressedChunk);
  if (compressed) size &= ~format::kCompressedChunk;
  if (size == 0 || size > format::kMaxChunkPayload)
    throw TraceError(path_ + ": a chunk of " + std::to_string(size) + " bytes at byte " +
                     std::to_string(offset) + " (corrupted?)");
  if (offset + sizeof(header) + size > file_size_) return cut();
  chunk_.resize(size);
  if (readAt(chunk_.data(), size, offset + sizeof(header)) != size) return cut();
  if (codec::crc32c(chunk_.data(), size) != codec::getU32(header + 4))
    throw TraceError(path_ + ": corrupted chunk (checksum mismatch) at byte " +
                     std::to_string(offset));
  // A chunk read open before has been closed since (follow()).
  if (offset == open_chunk_offset_) open_chunk_offset_ = 0;
  cut_offset_ = 0;
  chunk_offset_ = offset + sizeof(header);
  next_chunk_offset_ = chunk_offset_ + size;
  compressed_chunk_offset_ = compressed ? offset : 0;
  if (compressed) inflateChunk(offset);
  cursor_ = chunk_.data();
  end_ = cursor_ + chunk_.size();
  return true;
}

std::string inflateRecords(const uint8_t* stored, size_t size, std::vector<uint8_t>& records) {
  if (size < 4) return "too short to hold its records' size";
  uint32_t expected = codec::getU32(stored);
  if (expected == 0 || expected > format::kMaxChunkPayload)
    return "says its records take " + std::to_string(expected) + " bytes";
  records.resize(expected);
  uLongf made = expected;
  int status = uncompress(records.data(), &made, stored + 4, size - 4);
  if (status != Z_OK || made != expected)
    return "does not inflate to the " + std::to_string(expected) + " bytes it says (zlib: " +
           (status == Z_OK ? std::string("fewer bytes") : std::string(zError(status))) + ")";
  return {};
}

void TraceReader::inflateChunk(uint64_t offset) {
  std::string wrong = inflateRecords(chunk_.data(), chunk_.size(), inflated_);
  if (!wrong.empty())
    throw TraceError(path_ + ": a compressed chunk at byte " + std::to_string(offset) + " " +
                     wrong + " (corrupted?)");
  chunk_.swap(inflated_);
}

void TraceReader::cutOff() const {
  if (open_chunk_offset_) throw OpenChunkEnd{};
  fail("a record cut off by the end of its chunk");
}

uint64_t TraceReader::varint() {
  uint64_t value;
  if (!codec::getVarint(&cursor_, end_, &value)) cutOff();
  return value;
}

int64_t TraceReader::zigzag() {
  return codec::unzigzag(varint());
}

uint8_t TraceReader::byte() {
  if (cursor_ == end_) cutOff();
  return *cursor_++;
}

std::string TraceReader::bytes() {
  uint64_t size = varint();
  if (size > static_cast<uint64_t>(end_ - cursor_)) {
    if (open_chunk_offset_) cutOff();
    fail("a string longer than its chunk");
  }
  std::string result(reinterpret_cast<const char*>(cursor_), size);
  cursor_ += size;
  return result;
}

void TraceReader::checkId(uint32_t id, size_t count, const char* table) const {
  if (id >= count)
    fail(std::string("a reference to ") + table + " " + std::to_string(id) +
         ", which is not defined before it");
}

int TraceReader::deviceIndex(int64_t index, const char* record) const {
  if (index < -1 || index >= format::kMaxDevices)
    fail(std::string(record) + " on device " + std::to_string(index) +
         ", past the devices a trace can name (-1 to " + std::to_string(format::kMaxDevices - 1) +
         ")");
  return static_cast<int>(index);
}

// ---- the records, one function each ----------------------------------------------------
// In the order of RecordType (records.h); readEvent is in reader.h.

const ProcessInfo& TraceReader::readProcessInfo() {
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
  info.time_unit_ns = 1;
  if (version_ >= format::kTimeUnitVersion) {
    info.time_unit_ns = varint();
    if (info.time_unit_ns < 1 || info.time_unit_ns > format::kMaxTimeUnitNs)
      fail("a time unit of " + std::to_string(info.time_unit_ns) + " ns (1 to " +
           std::to_string(format::kMaxTimeUnitNs) + " expected)");
  }
  time_unit_ns_ = info.time_unit_ns;
  seen_process_info_ = true;
  last_time_ = 0;
  return info;
}

uint32_t TraceReader::readString() {
  return append(tables_.strings, bytes());
}

uint32_t TraceReader::readStringAfter(bool from) {
  // The string before it, id size() - 1 (index 0 is "none", the empty string), or version 12's
  // string `back` ids before it (Note [Strings that begin as an earlier one] in records.h).
  uint64_t back = 1;
  if (from) {
    back = varint();
    if (back == 0 || back >= tables_.strings.size())
      fail("a string beginning as the string " + std::to_string(back) + " before it, of " +
           std::to_string(tables_.strings.size() - 1));
  }
  uint64_t shared = varint();
  const std::string& previous = tables_.strings[tables_.strings.size() - back];
  if (shared == 0 || shared > format::kMaxSharedPrefix || shared > previous.size())
    fail("a string sharing " + std::to_string(shared) + " bytes with the string " +
         (from ? std::to_string(back) + " " : std::string()) + "before it, of " +
         std::to_string(previous.size()));
  std::string value = previous.substr(0, shared);
  value += bytes();
  return append(tables_.strings, std::move(value));
}

uint32_t TraceReader::readPythonFrame() {
  PythonFrame frame;
  frame.file = static_cast<uint32_t>(varint());
  frame.function = static_cast<uint32_t>(varint());
  frame.line = static_cast<int32_t>(varint());
  checkId(frame.file, tables_.strings.size(), "string");
  checkId(frame.function, tables_.strings.size(), "string");
  return append(tables_.python_frames, frame);
}

uint32_t TraceReader::readPythonStack() {
  StackNode node;
  node.parent = static_cast<uint32_t>(varint());
  node.frame = static_cast<uint32_t>(varint());
  checkId(node.parent, tables_.python_stacks.size(), "Python stack");
  checkId(node.frame, tables_.python_frames.size(), "Python frame");
  if (node.frame == 0) fail("a Python stack node without a frame");
  return append(tables_.python_stacks, node);
}

uint32_t TraceReader::readNativeStack() {
  NativeNode node;
  node.parent = static_cast<uint32_t>(varint());
  checkId(node.parent, tables_.native_stacks.size(), "native stack");
  uint64_t parent_ip = node.parent ? tables_.native_stacks[node.parent].ip : 0;
  node.ip = parent_ip + static_cast<uint64_t>(zigzag());
  return append(tables_.native_stacks, node);
}

uint32_t TraceReader::readLoadedObject() {
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
  return append(tables_.loaded_objects, std::move(object));
}

const Device& TraceReader::readDevice() {
  Device device;
  device.device = deviceIndex(zigzag(), "a device record");
  device.name = static_cast<uint32_t>(varint());
  checkId(device.name, tables_.strings.size(), "string");
  device.total_bytes = varint();
  tables_.devices.push_back(device);
  return tables_.devices.back();
}

const Context& TraceReader::readContext() {
  context_.thread_id = static_cast<int64_t>(varint());
  context_.device = deviceIndex(zigzag(), "a context");
  context_.stream = varint();
  uint8_t api = byte();
  uint8_t level = byte();
  if (api >= static_cast<uint8_t>(format::Api::kCount)) fail("an unknown API in a context");
  if (format::firstVersion(static_cast<format::Api>(api)) > version_)
    fail("API " + std::to_string(api) + " (trace format version " +
         std::to_string(format::firstVersion(static_cast<format::Api>(api))) + ") in a version " +
         std::to_string(version_) + " file");
  if (level >= static_cast<uint8_t>(format::Level::kCount)) fail("an unknown level in a context");
  context_.api = static_cast<format::Api>(api);
  context_.level = static_cast<format::Level>(level);
  current_module_ = 0;
  for (const auto& [thread, module] : module_by_thread_)
    if (thread == context_.thread_id) current_module_ = module;
  return context_;
}

Marker TraceReader::readMarker() {
  Marker marker;
  last_time_ += timeDelta();
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
  return marker;
}

Event TraceReader::readFailedAlloc() {
  Event event;
  event.kind = EventKind::kFailedAlloc;
  event.index = event_count_++;
  last_time_ += timeDelta();
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
  return event;
}

uint32_t TraceReader::readModuleScope() {
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
  return module;
}

std::pair<uint64_t, format::Category> TraceReader::readCategory() {
  uint64_t address = varint();
  uint8_t category = byte();
  if (category >= static_cast<uint8_t>(format::Category::kCount))
    fail("an unknown category " + std::to_string(category));
  return {address, static_cast<format::Category>(category)};
}

std::pair<uint64_t, uint32_t> TraceReader::readOwnerModule() {
  uint64_t address = varint();
  uint32_t module = static_cast<uint32_t>(varint());
  checkId(module, tables_.strings.size(), "string");
  if (module == 0) fail("an owner module record without a module");
  return {address, module};
}

uint64_t TraceReader::recentAllocation(const char* record) {
  uint64_t k = varint();
  if (k == 0 || k > event_tables_.ringAllocations())
    fail(std::string(record) + " naming allocation " + std::to_string(k) + " before this one, of " +
         std::to_string(event_tables_.ringAllocations()) + " known");
  return event_tables_.recentAllocation(static_cast<uint32_t>(k));
}

std::pair<uint64_t, format::Category> TraceReader::readRecentCategory() {
  uint64_t field = varint();
  uint64_t k = field >> 3;
  uint8_t category = static_cast<uint8_t>(field & 7);
  if (category >= static_cast<uint8_t>(format::Category::kCount))
    fail("an unknown category " + std::to_string(category));
  if (k == 0 || k > event_tables_.ringAllocations())
    fail("a category naming allocation " + std::to_string(k) + " before this one, of " +
         std::to_string(event_tables_.ringAllocations()) + " known");
  return {event_tables_.recentAllocation(static_cast<uint32_t>(k)),
          static_cast<format::Category>(category)};
}

std::pair<uint64_t, uint32_t> TraceReader::readRecentOwnerModule() {
  uint64_t address = recentAllocation("an owner module record");
  uint32_t module = static_cast<uint32_t>(varint());
  checkId(module, tables_.strings.size(), "string");
  if (module == 0) fail("an owner module record without a module");
  return {address, module};
}

std::pair<uint64_t, format::TrainingPhase> TraceReader::readTrainingPhase() {
  last_time_ += timeDelta();
  uint8_t phase = byte();
  if (phase >= static_cast<uint8_t>(format::TrainingPhase::kCount))
    fail("an unknown training phase " + std::to_string(phase));
  return {last_time_, static_cast<format::TrainingPhase>(phase)};
}

std::pair<uint64_t, uint64_t> TraceReader::readStepEnd() {
  last_time_ += timeDelta();
  uint64_t step = varint();
  if (step == 0) fail("a step end numbered 0 (steps count from 1)");
  return {last_time_, step};
}

const DistributedInfo& TraceReader::readDistributed() {
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
  return *tables_.distributed;
}

MemoryMap TraceReader::readMemoryMap() {
  MemoryMap map;
  last_time_ += timeDelta();
  map.time_ns = last_time_;
  map.address = varint();
  map.size = varint();
  map.offset = varint();
  map.handle = varint();
  return map;
}

AddressRange TraceReader::readAddressRange() {
  AddressRange range;
  last_time_ += timeDelta();
  range.time_ns = last_time_;
  range.address = varint();
  range.size = varint();
  return range;
}

Segment TraceReader::readSegment(bool near) {
  Segment segment;
  last_time_ += timeDelta();
  segment.time_ns = last_time_;
  uint8_t action = byte();
  if (action >= static_cast<uint8_t>(format::SegmentAction::kCount))
    fail("an unknown segment action " + std::to_string(action));
  segment.action = static_cast<format::SegmentAction>(action);
  segment.device = deviceIndex(zigzag(), "a segment");
  if (segment.device < 0) fail("a segment without a device");
  if (near) {
    // Version 10's kSegmentNear: a delta from the events' address base, which moves to it
    // (unsigned, as an event's, so that a crafted delta wraps instead of overflowing).
    uint64_t field = varint();
    uint64_t delta = static_cast<uint64_t>(codec::unzigzag(field >> 1));
    if (field & 1) delta *= 256;
    last_address_ += delta;
    segment.address = last_address_;
  } else {
    segment.address = varint();
  }
  segment.size = varint();
  segment.graph_pool = varint();
  segment.user_pool = varint();
  return segment;
}

SimulatedSize TraceReader::readSimulatedSize() {
  SimulatedSize size;
  last_time_ += timeDelta();
  size.time_ns = last_time_;
  size.address = varint();
  size.bytes = varint();
  uint64_t at_most = varint();
  size.at_most = at_most == 0 ? UINT64_MAX : at_most - 1;
  uint8_t certainty = byte();
  if (certainty >= static_cast<uint8_t>(format::Certainty::kCount))
    fail("an unknown certainty " + std::to_string(certainty) + " of a simulated size");
  size.certainty = static_cast<format::Certainty>(certainty);
  size.question = static_cast<uint32_t>(varint());
  size.python_stack = static_cast<uint32_t>(varint());
  size.native_stack = static_cast<uint32_t>(varint());
  checkId(size.question, tables_.strings.size(), "string");
  checkId(size.python_stack, tables_.python_stacks.size(), "Python stack");
  checkId(size.native_stack, tables_.native_stacks.size(), "native stack");
  size.traced = tracing_;
  size.module = current_module_;
  size.context = &context_;
  return size;
}

DeviceMemory TraceReader::readDeviceMemory() {
  DeviceMemory reading;
  last_time_ += timeDelta();
  reading.time_ns = last_time_;
  reading.device = deviceIndex(zigzag(), "a device memory reading");
  if (reading.device < 0) fail("a device memory reading without a device");
  reading.free_bytes = varint();
  reading.total_bytes = varint();
  if (reading.free_bytes > reading.total_bytes)
    fail("a device memory reading with more free bytes than total");
  return reading;
}

const SimulatedDeviceInfo& TraceReader::readSimulatedDevice() {
  if (tables_.simulated) fail("a second simulated device record");
  SimulatedDeviceInfo info;
  info.profile_name = bytes();
  info.profile_file = bytes();
  info.memory_bytes = varint();
  uint8_t set_by_user = byte();
  if (set_by_user > 1) fail("a simulated device record whose memory flag is neither 0 nor 1");
  info.memory_set_by_user = set_by_user == 1;
  uint64_t count = varint();
  if (count < 1 || count > static_cast<uint64_t>(format::kMaxDevices))
    fail("a simulated device record with " + std::to_string(count) + " devices (1 to " +
         std::to_string(format::kMaxDevices) + " expected)");
  info.device_count = static_cast<int>(count);
  tables_.simulated = std::move(info);
  return *tables_.simulated;
}

DeviceRead TraceReader::readDeviceRead() {
  DeviceRead read;
  last_time_ += timeDelta();
  read.time_ns = last_time_;
  read.bytes = varint();
  read.python_stack = static_cast<uint32_t>(varint());
  read.native_stack = static_cast<uint32_t>(varint());
  checkId(read.python_stack, tables_.python_stacks.size(), "Python stack");
  checkId(read.native_stack, tables_.native_stacks.size(), "native stack");
  read.traced = tracing_;
  read.module = current_module_;
  read.context = &context_;
  return read;
}

AssumedValue TraceReader::readAssumedValue() {
  AssumedValue value;
  last_time_ += timeDelta();
  value.time_ns = last_time_;
  value.assumed = static_cast<uint32_t>(varint());
  value.python_stack = static_cast<uint32_t>(varint());
  value.native_stack = static_cast<uint32_t>(varint());
  checkId(value.assumed, tables_.strings.size(), "string");
  checkId(value.python_stack, tables_.python_stacks.size(), "Python stack");
  checkId(value.native_stack, tables_.native_stacks.size(), "native stack");
  value.traced = tracing_;
  value.module = current_module_;
  value.context = &context_;
  return value;
}

const Section& TraceReader::readSection() {
  Section& section = section_;
  section.time_ns = varint();
  uint8_t kind = byte();
  if (kind >= static_cast<uint8_t>(format::SectionKind::kCount))
    fail("an unknown section kind " + std::to_string(kind));
  section.kind = static_cast<format::SectionKind>(kind);
  section.tracing = byte() != 0;
  uint8_t phase = byte();
  if (phase >= static_cast<uint8_t>(format::TrainingPhase::kCount))
    fail("an unknown training phase " + std::to_string(phase));
  section.phase = static_cast<format::TrainingPhase>(phase);
  section.window_events = varint();
  RunTotals& totals = section.totals;
  totals.events = varint();
  totals.allocations = varint();
  totals.frees = varint();
  totals.failed_allocations = varint();
  totals.allocated_bytes = varint();
  totals.untraced_allocations = varint();
  uint64_t devices = varint();
  if (devices > static_cast<uint64_t>(format::kMaxDevices))
    fail("a section naming more than " + std::to_string(format::kMaxDevices) + " devices");
  totals.devices.clear();
  for (uint64_t i = 0; i < devices; ++i) {
    DeviceTotals device;
    device.device = deviceIndex(zigzag(), "a section");
    device.allocated_bytes = varint();
    device.peak_bytes = varint();
    device.peak_time_ns = varint();
    totals.devices.push_back(device);
  }
  // Every decoding base starts afresh (records.h, RecordType::kSection).
  last_time_ = section.time_ns;
  last_address_ = 0;
  // Zeroed in place: the tables are 160 KiB (version 12's rings), too large for a temporary on
  // the stack of a thread that allocates (the recorder runs on the program's threads).
  std::memset(static_cast<void*>(&event_tables_), 0, sizeof(event_tables_));
  last_python_stack_[0] = last_python_stack_[1] = 0;
  last_native_stack_[0] = last_native_stack_[1] = 0;
  context_ = Context{};
  module_by_thread_.clear();
  current_module_ = 0;
  tracing_ = section.kind == format::SectionKind::kFrame && section.tracing;
  return section;
}

StepPeak TraceReader::readStepPeak() {
  // Each field relative to the previous kStepPeak (records.h).
  StepPeak step;
  step.step = last_step_ + static_cast<uint64_t>(zigzag());
  if (step.step == 0) fail("a step peak numbered 0 (steps count from 1)");
  step.begin_ns = last_step_end_ns_ + varint();
  step.end_ns = step.begin_ns + varint();
  step.peak_time_ns = step.begin_ns + varint();
  step.peak_bytes = varint();
  uint8_t phase = byte();
  if (phase >= static_cast<uint8_t>(format::TrainingPhase::kCount))
    fail("an unknown training phase " + std::to_string(phase));
  step.phase = static_cast<format::TrainingPhase>(phase);
  step.module = static_cast<uint32_t>(varint());
  checkId(step.module, tables_.strings.size(), "string");
  last_step_ = step.step;
  last_step_end_ns_ = step.end_ns;
  return step;
}
const GeneratedCode& TraceReader::readGeneratedCode() {
  GeneratedCode code;
  code.file = static_cast<uint32_t>(varint());
  uint64_t first_line = varint();
  uint64_t line_count = varint();
  code.source_stack = static_cast<uint32_t>(varint());
  checkId(code.file, tables_.strings.size(), "string");
  checkId(code.source_stack, tables_.python_stacks.size(), "Python stack");
  if (code.file == 0 || code.source_stack == 0)
    fail("a generated code record without a file or a source stack");
  // Lines as Python numbers them (from 1), the stretch within what a frame's line can be.
  if (first_line < 1 || line_count < 1 || first_line > INT32_MAX || line_count > INT32_MAX ||
      first_line + line_count - 1 > INT32_MAX)
    fail("a generated code record with lines " + std::to_string(first_line) + " + " +
         std::to_string(line_count) + " (from 1, within 2^31 - 1, expected)");
  code.first_line = static_cast<int32_t>(first_line);
  code.line_count = static_cast<int32_t>(line_count);
  tables_.generated_code.push_back(code);
  return tables_.generated_code.back();
}

}  // namespace memtrace::reader
