// Writes trace files record by record, straight from docs/trace-format.md, so that the
// reader and the analyses are tested against the documented format rather than against
// the recorder's own encoder (which tests/unit/recorder_test.cpp covers separately).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "tracer/format/codec.h"
#include "tracer/format/records.h"

namespace memtrace::testing {

class TraceBuilder {
 public:
  explicit TraceBuilder(uint32_t version = format::kVersion)
      : file_(format::kMagic, format::kMagic + sizeof(format::kMagic)), version_(version) {
    putU32(version);
    putU32(0);
  }

  // Times are nanoseconds: a version-8 file says its time unit is 1 ns unless told another
  // (Note [Times in microseconds]); the builder then writes each time delta in units, and
  // the times it is given must be multiples of the unit.
  TraceBuilder& processInfo(int pid = 42, format::StackMode mode = format::StackMode::kPython,
                            uint64_t time_unit_ns = 1) {
    type(format::RecordType::kProcessInfo);
    varint(pid);
    varint(1);
    varint(1700000000000000000ULL);
    varint(1000);  // monotonic start: the time base (deltas are relative to it)
    bytes(std::string("python\0model.py", 15));
    bytes("/usr/bin/python3");
    bytes("host");
    bytes("memtrace test");
    chunk_.push_back(static_cast<uint8_t>(mode));
    varint(128);
    varint(32);
    chunk_.push_back(0);
    if (version_ >= format::kTimeUnitVersion) varint(time_unit_ns);
    time_unit_ns_ = time_unit_ns ? time_unit_ns : 1;  // 0: a damaged file's, no times follow
    return *this;
  }
  TraceBuilder& distributed(int64_t rank, int64_t world_size, int64_t local_rank,
                            int64_t local_world_size, int64_t group_rank, int64_t restart_count,
                            const std::string& job_id) {
    type(format::RecordType::kDistributed);
    for (int64_t value :
         {rank, world_size, local_rank, local_world_size, group_rank, restart_count})
      varint(codec::zigzag(value));
    bytes(job_id);
    return *this;
  }
  uint32_t string(const std::string& text) {
    type(format::RecordType::kString);
    bytes(text);
    return ++strings_;
  }
  uint32_t frame(uint32_t file, uint32_t function, int line) {
    type(format::RecordType::kPythonFrame);
    varint(file);
    varint(function);
    varint(static_cast<uint64_t>(line));
    return ++frames_;
  }
  uint32_t pythonStack(uint32_t parent, uint32_t frame) {
    type(format::RecordType::kPythonStack);
    varint(parent);
    varint(frame);
    return ++python_stacks_;
  }
  uint32_t nativeStack(uint32_t parent, int64_t ip_delta) {
    type(format::RecordType::kNativeStack);
    varint(parent);
    varint(codec::zigzag(ip_delta));
    return ++native_stacks_;
  }
  TraceBuilder& device(int index, uint32_t name, uint64_t total) {
    type(format::RecordType::kDevice);
    varint(codec::zigzag(index));
    varint(name);
    varint(total);
    return *this;
  }
  TraceBuilder& context(int64_t thread, int device, uint64_t stream = 0,
                        format::Api api = format::Api::kPluggable,
                        format::Level level = format::Level::kTensor) {
    type(format::RecordType::kContext);
    varint(static_cast<uint64_t>(thread));
    varint(codec::zigzag(device));
    varint(stream);
    chunk_.push_back(static_cast<uint8_t>(api));
    chunk_.push_back(static_cast<uint8_t>(level));
    return *this;
  }
  TraceBuilder& moduleScope(uint32_t path) {
    type(format::RecordType::kModuleScope);
    varint(path);
    return *this;
  }
  TraceBuilder& marker(uint64_t time, format::MarkerKind kind, uint32_t name = 0) {
    type(format::RecordType::kMarker);
    varint(timeDelta(time));
    chunk_.push_back(static_cast<uint8_t>(kind));
    varint(name);
    return *this;
  }
  // An allocation at absolute `time` (ns since the start) and `address`, with full stack
  // fields (bits 4 and 3 clear) unless `same_stacks`.
  TraceBuilder& alloc(uint64_t time, uint64_t address, uint64_t size, uint32_t python = 0,
                      uint32_t native = 0) {
    return event(false, time, address, &size, python, native);
  }
  TraceBuilder& free(uint64_t time, uint64_t address, uint32_t python = 0, uint32_t native = 0) {
    return event(true, time, address, nullptr, python, native);
  }
  // Version 7's events that name an entry of the event tables (Note [Event tables] in
  // records.h), written as that Note says, the tables kept by the test: an allocation of
  // the size in slot `entry` - 1 (no size field), a free of the `entry`-th most recent
  // allocation, which the test says is at `address` (no address field).
  TraceBuilder& allocOfSizeEntry(uint64_t time, uint64_t address, uint8_t entry) {
    uint8_t bits = format::EventBits::kEvent | entry;
    int64_t delta = static_cast<int64_t>(address - last_address_);
    last_address_ = address;
    size_t type_at = chunk_.size();
    chunk_.push_back(0);
    varint(timeDelta(time));
    varint(codec::zigzag(delta));
    varint(0);
    varint(0);
    chunk_[type_at] = bits;
    return *this;
  }
  TraceBuilder& freeOfRecentAllocation(uint64_t time, uint64_t address, uint8_t entry,
                                       uint8_t extra_bits = 0) {
    last_address_ = address;
    type(static_cast<format::RecordType>(format::EventBits::kEvent | format::EventBits::kFree |
                                         entry | extra_bits));
    varint(timeDelta(time));
    varint(0);
    varint(0);
    return *this;
  }
  // Version 11's layout (Note [Events in fewer bytes] in records.h), written as that Note says
  // with no table entry and both stacks written unless `same_stacks`: `ring_place` > 7 names a
  // free's allocation by its place in the ring (the test says it is at `address`); 0 writes the
  // address.
  TraceBuilder& compactEvent(bool is_free, uint64_t time, uint64_t address, const uint64_t* size,
                             uint32_t ring_place, uint32_t python, uint32_t native,
                             bool same_stacks) {
    using format::CompactEventBits;
    uint8_t bits = format::EventBits::kEvent | (is_free ? format::EventBits::kFree : 0);
    size_t type_at = chunk_.size();
    chunk_.push_back(0);
    uint64_t units = timeDelta(time);
    if (units < CompactEventBits::kTimeInline) {
      bits |= static_cast<uint8_t>(units << CompactEventBits::kTimeShift);
    } else {
      bits |= CompactEventBits::kTime;
      varint(units - CompactEventBits::kTimeInline);
    }
    int64_t delta = static_cast<int64_t>(address - last_address_);
    last_address_ = address;
    // Version 12 scales an allocation's delta by 4 more (Note [Allocations named by the blocks
    // before them]): its two low bits are 0, the delta form.
    bool blocks = version_ >= format::kBlockNamesVersion;
    unsigned shift = is_free ? 1 : blocks ? format::BlockForm::kShift : 0;
    if (ring_place) {
      varint(uint64_t{ring_place - format::EventTables::kRecentAllocations - 1} << 1 | 1);
    } else if (delta % 256 == 0) {
      varint((codec::zigzag(delta / 256) + 1) << shift);
    } else {
      varint(0);
      varint(codec::zigzag(delta));
    }
    if (size) {
      // Version 12: 512-byte units where odd, else bytes (times 2).
      if (!blocks)
        varint(*size);
      else if (*size % 512 == 0)
        varint(*size / 512 << 1 | 1);
      else
        varint(*size << 1);
    }
    int kind = is_free ? 1 : 0;
    if (same_stacks) {
      bits |= CompactEventBits::kSameStacks;
    } else {
      // Version 12: the Python stack as a zigzag delta from the previous one of its kind.
      uint64_t field =
          blocks ? codec::zigzag(int64_t{python} - int64_t{last_python_[kind]}) : uint64_t{python};
      varint(field << 1 | 1);
      varint(native);
      last_python_[kind] = python;
    }
    chunk_[type_at] = bits;
    return *this;
  }
  // A version 12 allocation written field by field (Note [Allocations named by the blocks before
  // them] in records.h): `address_field` the address's varint as the Note says (the test knows
  // what it names: `address`, the next delta's base), `size_field` the size's varint (nullptr:
  // none, for a freed block's size), both stacks the previous ones.
  TraceBuilder& blockAllocation(uint64_t time, uint64_t address, uint64_t address_field,
                                const uint64_t* size_field) {
    size_t type_at = chunk_.size();
    chunk_.push_back(0);
    uint64_t units = timeDelta(time);
    uint8_t bits = format::EventBits::kEvent | format::CompactEventBits::kSameStacks |
                   format::CompactEventBits::kTime;
    varint(units - format::CompactEventBits::kTimeInline);
    varint(address_field);
    if (size_field) varint(*size_field);
    last_address_ = address;
    chunk_[type_at] = bits;
    return *this;
  }
  // A version 11 or 12 free of the `entry`-th most recent allocation (bits 2-0; the test says it
  // is at `address`), both stacks the previous ones.
  TraceBuilder& compactFreeOfEntry(uint64_t time, uint64_t address, uint8_t entry) {
    uint64_t units = timeDelta(time);
    type(static_cast<format::RecordType>(format::EventBits::kEvent | format::EventBits::kFree |
                                         format::CompactEventBits::kTime |
                                         format::CompactEventBits::kSameStacks | entry));
    varint(units - format::CompactEventBits::kTimeInline);
    last_address_ = address;
    return *this;
  }
  TraceBuilder& failedAlloc(uint64_t time, uint64_t size, uint32_t python = 0) {
    type(format::RecordType::kFailedAlloc);
    varint(timeDelta(time));
    varint(size);
    varint(python);
    varint(0);
    return *this;
  }
  // Version 2's records (Note [Virtual memory management], Note [Device memory readings]).
  TraceBuilder& memoryMap(uint64_t time, uint64_t address, uint64_t size, uint64_t offset,
                          uint64_t handle) {
    type(format::RecordType::kMemoryMap);
    varint(timeDelta(time));
    varint(address);
    varint(size);
    varint(offset);
    varint(handle);
    return *this;
  }
  // kMemoryUnmap, kAddressReserve or kAddressFree.
  TraceBuilder& addressRange(format::RecordType record, uint64_t time, uint64_t address,
                             uint64_t size) {
    type(record);
    varint(timeDelta(time));
    varint(address);
    varint(size);
    return *this;
  }
  TraceBuilder& deviceMemory(uint64_t time, int device, uint64_t free_bytes, uint64_t total) {
    type(format::RecordType::kDeviceMemory);
    varint(timeDelta(time));
    varint(codec::zigzag(device));
    varint(free_bytes);
    varint(total);
    return *this;
  }
  // Version 3's records (Note [The simulated device]).
  TraceBuilder& simulatedDevice(const std::string& profile, const std::string& file,
                                uint64_t memory_bytes, uint8_t memory_set_by_user,
                                uint64_t device_count) {
    type(format::RecordType::kSimulatedDevice);
    bytes(profile);
    bytes(file);
    varint(memory_bytes);
    chunk_.push_back(memory_set_by_user);
    varint(device_count);
    return *this;
  }
  TraceBuilder& deviceRead(uint64_t time, uint64_t size, uint32_t python = 0, uint32_t native = 0) {
    type(format::RecordType::kDeviceRead);
    varint(timeDelta(time));
    varint(size);
    varint(python);
    varint(native);
    return *this;
  }
  TraceBuilder& assumedValue(uint64_t time, uint32_t assumed, uint32_t python = 0,
                             uint32_t native = 0) {
    type(format::RecordType::kAssumedValue);
    varint(timeDelta(time));
    varint(assumed);
    varint(python);
    varint(native);
    return *this;
  }
  // Lines [first_line, first_line + line_count) of a generated file stand for a source stack
  // (Note [Generated code]).
  TraceBuilder& generatedCode(uint32_t file, uint64_t first_line, uint64_t line_count,
                              uint32_t source_stack) {
    type(format::RecordType::kGeneratedCode);
    varint(file);
    varint(first_line);
    varint(line_count);
    varint(source_stack);
    return *this;
  }
  // A segment of PyTorch's caching allocator changed (Note [PyTorch's own allocator]).
  TraceBuilder& segment(uint64_t time, format::SegmentAction action, int64_t device,
                        uint64_t address, uint64_t size, uint64_t graph_pool = 0,
                        uint64_t user_pool = 0) {
    type(format::RecordType::kSegment);
    varint(timeDelta(time));
    chunk_.push_back(static_cast<uint8_t>(action));
    varint(codec::zigzag(device));
    varint(address);
    varint(size);
    varint(graph_pool);
    varint(user_pool);
    return *this;
  }
  // The module owning a live allocation (Note [Weights and their modules]).
  TraceBuilder& ownerModule(uint64_t address, uint32_t module) {
    type(format::RecordType::kOwnerModule);
    varint(address);
    varint(module);
    return *this;
  }
  // Version 10's short forms (Note [Records beside the events, shorter]): a category or an owner
  // of the k-th most recent allocation, and a string that begins as the one before it.
  TraceBuilder& recentCategory(uint64_t k, format::Category category) {
    type(format::RecordType::kRecentCategory);
    varint(k << 3 | static_cast<uint8_t>(category));
    return *this;
  }
  TraceBuilder& recentOwnerModule(uint64_t k, uint32_t module) {
    type(format::RecordType::kRecentOwnerModule);
    varint(k);
    varint(module);
    return *this;
  }
  // A segment whose address is a delta from the events' address base, which moves to it.
  TraceBuilder& segmentNear(uint64_t time, format::SegmentAction action, int64_t device,
                            uint64_t address, uint64_t size) {
    type(format::RecordType::kSegmentNear);
    varint(timeDelta(time));
    chunk_.push_back(static_cast<uint8_t>(action));
    varint(codec::zigzag(device));
    auto delta = static_cast<int64_t>(address - last_address_);
    if ((delta & 0xff) == 0)
      varint(codec::zigzag(delta >> 8) << 1 | 1);
    else
      varint(codec::zigzag(delta) << 1);
    last_address_ = address;
    varint(size);
    varint(0);
    varint(0);
    return *this;
  }
  uint32_t stringAfter(uint64_t shared, const std::string& rest) {
    type(format::RecordType::kStringAfter);
    varint(shared);
    bytes(rest);
    return ++strings_;
  }
  // Version 12's (Note [Strings that begin as an earlier one]): the string `back` ids before.
  uint32_t stringFrom(uint64_t back, uint64_t shared, const std::string& rest) {
    type(format::RecordType::kStringFrom);
    varint(back);
    varint(shared);
    bytes(rest);
    return ++strings_;
  }
  // A size the simulated GPU answered without knowing it (Note [Sizes in the trace]); its
  // context's API is kSimulatedSize. `at_most` UINT64_MAX: no bound.
  TraceBuilder& simulatedSize(uint64_t time, uint64_t address, uint64_t size, uint64_t at_most,
                              format::Certainty certainty, uint32_t question, uint32_t python = 0) {
    type(format::RecordType::kSimulatedSize);
    varint(timeDelta(time));
    varint(address);
    varint(size);
    varint(at_most == UINT64_MAX ? 0 : at_most + 1);
    chunk_.push_back(static_cast<uint8_t>(certainty));
    varint(question);
    varint(python);
    varint(0);
    return *this;
  }
  TraceBuilder& raw(std::initializer_list<uint8_t> bytes) {
    chunk_.insert(chunk_.end(), bytes);
    return *this;
  }
  // Ends the current chunk (framed and checksummed).
  TraceBuilder& flushChunk() {
    if (chunk_.empty()) return *this;
    uint8_t header[12];
    codec::putU32(header, static_cast<uint32_t>(chunk_.size()));
    codec::putU32(header + 4, codec::crc32c(chunk_.data(), chunk_.size()));
    codec::putU32(header + 8, codec::crc32c(header, 8));
    file_.insert(file_.end(), header, header + 12);
    file_.insert(file_.end(), chunk_.begin(), chunk_.end());
    chunk_.clear();
    return *this;
  }
  size_t chunkBytes() const { return chunk_.size(); }
  std::vector<uint8_t> bytes() {
    flushChunk();
    return file_;
  }
  std::string write(const std::string& path) {
    std::vector<uint8_t> data = bytes();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(data.data()),
               static_cast<std::streamsize>(data.size()));
    return path;
  }

 private:
  TraceBuilder& event(bool is_free, uint64_t time, uint64_t address, const uint64_t* size,
                      uint32_t python, uint32_t native) {
    if (version_ >= format::kCompactEventsVersion)
      return compactEvent(is_free, time, address, size, 0, python, native, false);
    uint8_t bits = format::EventBits::kEvent | (is_free ? format::EventBits::kFree : 0);
    int64_t delta = static_cast<int64_t>(address - last_address_);
    last_address_ = address;
    size_t type_at = chunk_.size();
    chunk_.push_back(0);
    varint(timeDelta(time));
    if (delta % 256 == 0) {
      bits |= format::EventBits::kAddressIn256;
      delta /= 256;
    }
    varint(codec::zigzag(delta));
    if (size) varint(*size);
    varint(python);
    varint(native);
    chunk_[type_at] = bits;
    return *this;
  }
  uint64_t timeDelta(uint64_t time) {
    uint64_t delta = time - last_time_;
    last_time_ = time;
    return delta / time_unit_ns_;
  }
  void type(format::RecordType type) { chunk_.push_back(static_cast<uint8_t>(type)); }
  void varint(uint64_t value) {
    uint8_t buffer[10];
    chunk_.insert(chunk_.end(), buffer, codec::putVarint(buffer, value));
  }
  void bytes(const std::string& text) {
    varint(text.size());
    chunk_.insert(chunk_.end(), text.begin(), text.end());
  }
  void putU32(uint32_t value) {
    uint8_t buffer[4];
    codec::putU32(buffer, value);
    file_.insert(file_.end(), buffer, buffer + 4);
  }

  std::vector<uint8_t> file_;
  uint32_t version_;
  uint64_t time_unit_ns_ = 1;
  std::vector<uint8_t> chunk_;
  uint32_t strings_ = 0, frames_ = 0, python_stacks_ = 0, native_stacks_ = 0;
  uint64_t last_time_ = 0;
  uint64_t last_address_ = 0;
  uint32_t last_python_[2] = {0, 0};  // version 12's stack field: [alloc, free]
};

// A fresh path in the test's temporary directory.
std::string temporaryPath(const std::string& name);

}  // namespace memtrace::testing
