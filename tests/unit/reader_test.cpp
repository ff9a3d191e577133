#include "tracer/reader/reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "tests/unit/trace_builder.h"

namespace memtrace::testing {

std::string temporaryPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  std::string base = dir && *dir ? dir : "/tmp";
  return base + "/memtrace-unit-" + std::to_string(getpid()) + "-" + name;
}

namespace {

using format::MarkerKind;
using reader::Event;
using reader::EventKind;
using reader::TraceError;
using reader::TraceReader;

struct Collector : reader::RecordVisitor {
  void onEvent(const Event& event) { events.push_back(event); }
  void onMarker(const reader::Marker& marker) { markers.push_back(marker); }
  std::vector<Event> events;
  std::vector<reader::Marker> markers;
};

void writeBytes(const std::string& path, const std::vector<uint8_t>& data) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// A small trace with every kind of record, over three chunks.
std::vector<uint8_t> sampleTrace() {
  TraceBuilder trace;
  trace.processInfo();
  trace.simulatedDevice("h200", "/opt/profiles/h200.json", 150754820096, 0, 1);
  uint32_t file = trace.string("/home/user/model.py");
  uint32_t function = trace.string("forward");
  uint32_t frame = trace.frame(file, function, 12);
  uint32_t stack = trace.pythonStack(0, frame);
  uint32_t native = trace.nativeStack(0, 0x401000);
  trace.device(0, trace.string("GPU 0"), 80ull << 30);
  trace.context(7, 0, 0x10, format::Api::kCudaMallocAsync);
  trace.alloc(0, 0x7f0000000000, 1000);  // untraced: before the start mark
  trace.marker(5, MarkerKind::kTracingStarted);
  trace.flushChunk();
  trace.alloc(10, 0x7f0000100000, 4096, stack, native);
  trace.alloc(20, 0x7f0000000123, 1 << 20, stack, native);  // not 256-aligned delta
  trace.free(30, 0x7f0000100000);
  trace.flushChunk();
  trace.failedAlloc(40, 1ull << 40, stack);
  trace.context(7, 0, 0, format::Api::kDeviceRead);
  trace.deviceRead(45, 8, stack, native);
  trace.context(7, 0, 0x10, format::Api::kCudaMallocAsync);  // the events' context again
  trace.marker(50, MarkerKind::kTracingStopped);
  trace.free(60, 0x7f0000000000);
  trace.marker(70, MarkerKind::kProcessExit);
  return trace.bytes();
}

TEST(Reader, DecodesEveryRecord) {
  std::string path = temporaryPath("sample.bin");
  writeBytes(path, sampleTrace());
  TraceReader trace(path);
  Collector collector;
  trace.read(collector);
  const reader::Tables& tables = trace.tables();
  EXPECT_EQ(tables.process.pid, 42);
  ASSERT_EQ(tables.process.command_line.size(), 2u);
  EXPECT_EQ(tables.process.command_line[1], "model.py");
  EXPECT_EQ(tables.string(tables.python_frames[1].file), "/home/user/model.py");
  EXPECT_EQ(tables.python_frames[1].line, 12);
  EXPECT_EQ(tables.native_stacks[1].ip, 0x401000u);
  ASSERT_NE(tables.device(0), nullptr);
  EXPECT_EQ(tables.device(0)->total_bytes, 80ull << 30);
  ASSERT_TRUE(tables.simulated);
  EXPECT_EQ(tables.simulated->profile_name, "h200");

  ASSERT_EQ(collector.events.size(), 6u);
  const Event& first = collector.events[0];
  EXPECT_EQ(first.kind, EventKind::kAlloc);
  EXPECT_FALSE(first.traced);
  EXPECT_EQ(first.address, 0x7f0000000000u);
  const Event& second = collector.events[1];
  EXPECT_TRUE(second.traced);
  EXPECT_EQ(second.time_ns, 10u);
  EXPECT_EQ(second.size, 4096u);
  EXPECT_EQ(second.python_stack, 1u);
  EXPECT_EQ(second.native_stack, 1u);
  EXPECT_EQ(second.context->stream, 0x10u);
  EXPECT_EQ(second.context->api, format::Api::kCudaMallocAsync);
  EXPECT_EQ(collector.events[2].address, 0x7f0000000123u);
  EXPECT_EQ(collector.events[3].kind, EventKind::kFree);
  EXPECT_EQ(collector.events[4].kind, EventKind::kFailedAlloc);
  EXPECT_EQ(collector.events[4].size, 1ull << 40);
  EXPECT_FALSE(collector.events[5].traced);  // after the stop mark
  EXPECT_EQ(collector.events[5].time_ns, 60u);
  ASSERT_EQ(collector.markers.size(), 3u);
  EXPECT_EQ(collector.markers[2].kind, MarkerKind::kProcessExit);
  EXPECT_EQ(trace.cutOffset(), 0u);

  // A second read starts over and gives the same events.
  Collector again;
  trace.read(again);
  EXPECT_EQ(again.events.size(), 6u);
  EXPECT_EQ(trace.tables().strings.size(), tables.strings.size());
  std::remove(path.c_str());
}

TEST(Reader, EveryFlippedByteIsAnError) {
  std::vector<uint8_t> good = sampleTrace();
  std::string path = temporaryPath("flipped.bin");
  for (size_t offset = 0; offset < good.size(); ++offset) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = good;
      bad[offset] ^= mask;
      // A version this reader also reads, or the flight recorder's flag, names a file whose
      // records read the same under it: no damage the reader could see.
      if (offset >= 8 && offset < 12) {
        uint32_t version = codec::getU32(bad.data() + 8);
        if (version >= format::kOldestVersion && version <= format::kVersion) continue;
      }
      if (offset >= 12 && offset < 16 &&
          !(codec::getU32(bad.data() + 12) & ~format::kKnownFileFlags))
        continue;
      writeBytes(path, bad);
      try {
        TraceReader trace(path);
        Collector collector;
        trace.read(collector);
        ADD_FAILURE() << "a flip of byte " << offset << " with " << int(mask) << " went unnoticed";
      } catch (const TraceError& error) {
        EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
      }
    }
  }
  std::remove(path.c_str());
}

TEST(Reader, AFileCutAnywhereReadsUpToItsLastWholeChunk) {
  std::vector<uint8_t> good = sampleTrace();
  std::string path = temporaryPath("cut.bin");
  // Where each chunk ends.
  std::vector<size_t> boundaries;
  for (size_t at = format::kFileHeaderSize; at < good.size();
       at += format::kChunkHeaderSize + codec::getU32(good.data() + at))
    boundaries.push_back(at);
  boundaries.push_back(good.size());
  ASSERT_EQ(boundaries.size(), 4u) << "the sample has three chunks";

  size_t previous_events = 0;
  for (size_t size = 0; size <= good.size(); ++size) {
    writeBytes(path, std::vector<uint8_t>(good.begin(), good.begin() + size));
    try {
      TraceReader trace(path);
      Collector collector;
      trace.read(collector);
      EXPECT_GE(size, boundaries[1]) << "read without one whole chunk";
      EXPECT_GE(collector.events.size(), previous_events) << "cut at " << size;
      previous_events = collector.events.size();
      // The reader says where the partial chunk began, or nothing on a chunk boundary.
      size_t last_whole = *(std::upper_bound(boundaries.begin(), boundaries.end(), size) - 1);
      EXPECT_EQ(trace.cutOffset(), last_whole == size ? 0 : last_whole) << "cut at " << size;
    } catch (const TraceError& error) {
      // Refused only while not one whole chunk is there: nothing was recorded yet.
      std::string expected = size == 0                        ? "the file is empty"
                             : size < format::kFileHeaderSize ? "the file header is cut short"
                             : size == format::kFileHeaderSize
                                 ? "the trace holds no records"
                                 : "ends before its first whole chunk";
      EXPECT_LT(size, boundaries[1]);
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos)
          << "cut at " << size << ": " << error.what();
    }
  }
  EXPECT_EQ(previous_events, 6u);
  std::remove(path.c_str());
}

TEST(Reader, RefusesOtherVersionsWithAClearMessage) {
  std::string path = temporaryPath("version.bin");
  for (uint32_t version : {0u, format::kVersion + 1}) {
    TraceBuilder(version).processInfo().write(path);
    try {
      TraceReader trace(path);
      FAIL() << "version " << version << " was accepted";
    } catch (const TraceError& error) {
      EXPECT_EQ(std::string(error.what()),
                path + ": trace format version " + std::to_string(version) +
                    ", but this memtrace reads versions 1 to " + std::to_string(format::kVersion));
    }
  }
  std::remove(path.c_str());
}

// Version 2 only added records (records.h): a version-1 file reads as it always did.
TEST(Reader, ReadsVersionOneFiles) {
  std::string path = temporaryPath("version1.bin");
  TraceBuilder(1).processInfo().context(7, 0).alloc(10, 0x1000, 512).free(20, 0x1000).write(path);
  TraceReader trace(path);
  Collector collector;
  trace.read(collector);
  ASSERT_EQ(collector.events.size(), 2u);
  EXPECT_EQ(collector.events[1].kind, EventKind::kFree);
  EXPECT_FALSE(trace.tables().distributed);
  std::remove(path.c_str());
}

// Note [Times in microseconds] (version 8): kProcessInfo names the time unit, every time
// delta counts units of it, and the reader gives nanoseconds since the start as before; a
// version-7 file's deltas are nanoseconds.
TEST(Reader, TimeDeltasCountTheFileUnit) {
  std::string path = temporaryPath("time-unit.bin");
  struct Times : Collector {
    void onDeviceMemory(const reader::DeviceMemory& reading) {
      readings.push_back(reading.time_ns);
    }
    std::vector<uint64_t> readings;
  };
  for (uint64_t unit : {1000u, 1u, 7u}) {
    SCOPED_TRACE("unit " + std::to_string(unit) + " ns");
    TraceBuilder trace;
    trace.processInfo(42, format::StackMode::kPython, unit).context(7, 0);
    trace.marker(0, format::MarkerKind::kTracingStarted);
    trace.alloc(7000, 0x1000, 512).alloc(7000, 0x2000, 512);  // the same time: a zero delta
    trace.deviceMemory(21000, 0, 1 << 20, 1 << 30).flushChunk();
    trace.free(7000000000000, 0x1000);  // 81 days: the delta carries over the chunk
    trace.write(path);
    TraceReader reader(path);
    Times times;
    reader.read(times);
    EXPECT_EQ(reader.tables().process.time_unit_ns, unit);
    ASSERT_EQ(times.events.size(), 3u);
    EXPECT_EQ(times.events[0].time_ns, 7000u);
    EXPECT_EQ(times.events[1].time_ns, 7000u);
    EXPECT_EQ(times.events[2].time_ns, 7000000000000u);
    EXPECT_EQ(times.readings, std::vector<uint64_t>{21000});
  }
  {
    TraceBuilder version_7(7);
    version_7.processInfo().context(7, 0).alloc(1234, 0x1000, 512).write(path);
    TraceReader reader(path);
    Collector collector;
    reader.read(collector);
    EXPECT_EQ(reader.tables().process.time_unit_ns, 1u);
    ASSERT_EQ(collector.events.size(), 1u);
    EXPECT_EQ(collector.events[0].time_ns, 1234u);
  }
  // A unit of 0 or past a second is damage, refused at the process record.
  for (uint64_t unit : {uint64_t{0}, format::kMaxTimeUnitNs + 1}) {
    TraceBuilder().processInfo(42, format::StackMode::kPython, unit).context(7, 0).write(path);
    std::string what;
    try {
      TraceReader reader(path);
      reader::RecordVisitor visitor;
      reader.read(visitor);
    } catch (const TraceError& error) {
      what = error.what();
    }
    EXPECT_NE(
        what.find("a time unit of " + std::to_string(unit) + " ns (1 to 1000000000 expected)"),
        std::string::npos)
        << what;
  }
  std::remove(path.c_str());
}

// Note [Event tables] (version 7): an allocation may name its size's slot and a free one of
// the last allocations instead of writing them; version 6 wrote neither, and a version-6 file
// that seems to is damaged.
std::vector<uint8_t> tablesTrace() {
  uint8_t slot = static_cast<uint8_t>(format::EventTables::sizeSlot(4096) + 1);
  TraceBuilder trace(10);  // the builder's table entries are written in version 7-10's layout
  trace.processInfo().context(7, 0);
  trace.alloc(10, 0x7f0000000000, 4096);             // the size written: its slot holds it
  trace.allocOfSizeEntry(20, 0x7f0000001000, slot);  // 4096 again, by its slot
  trace.alloc(30, 0x7f0000002000, 100);
  trace.freeOfRecentAllocation(40, 0x7f0000000000, 3);  // the third most recent
  trace.freeOfRecentAllocation(50, 0x7f0000002000, 1);  // the most recent
  trace.free(60, 0x7f0000001000);                       // by its address
  trace.flushChunk();
  trace.allocOfSizeEntry(70, 0x7f0000003000, slot);  // the tables carry over chunks
  trace.freeOfRecentAllocation(80, 0x7f0000003000, 1);
  return trace.bytes();
}

TEST(Reader, EventsNameEntriesOfTheEventTables) {
  std::string path = temporaryPath("tables.bin");
  writeBytes(path, tablesTrace());
  {
    TraceReader reader(path);
    Collector collector;
    reader.read(collector);
    ASSERT_EQ(collector.events.size(), 8u);
    const uint64_t addresses[] = {0x7f0000000000, 0x7f0000001000, 0x7f0000002000, 0x7f0000000000,
                                  0x7f0000002000, 0x7f0000001000, 0x7f0000003000, 0x7f0000003000};
    const uint64_t sizes[] = {4096, 4096, 100, 0, 0, 0, 4096, 0};
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(collector.events[i].address, addresses[i]) << "event " << i;
      EXPECT_EQ(collector.events[i].size, sizes[i]) << "event " << i;
      EXPECT_EQ(collector.events[i].time_ns, 10 * (i + 1)) << "event " << i;
    }
  }
  // A free naming an entry has no address field, so bit 5 (the field divided by 256) is
  // damage; in a version-6 file, so is any entry.
  TraceBuilder with_bit_5(10);
  with_bit_5.processInfo().context(7, 0).alloc(10, 0x1000, 64);
  with_bit_5.freeOfRecentAllocation(20, 0x1000, 1, format::EventBits::kAddressIn256);
  TraceBuilder version_6(6);
  version_6.processInfo().context(7, 0).alloc(10, 0x1000, 64);
  version_6.freeOfRecentAllocation(20, 0x1000, 1);
  for (auto [builder, expected] :
       {std::pair{&with_bit_5, "a free naming a recent allocation with bit 5 set"},
        std::pair{&version_6, "an event with reserved bits set"}}) {
    builder->write(path);
    try {
      TraceReader reader(path);
      Collector collector;
      reader.read(collector);
      ADD_FAILURE() << "read: " << expected;
    } catch (const TraceError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  }
  std::remove(path.c_str());
}

// Cut anywhere, a file whose events name table entries reads its whole chunks, each event as
// the whole file reads it.
TEST(Reader, AFileWithEventTablesCutAnywhereReadsItsWholeChunksAsTheyWere) {
  std::vector<uint8_t> good = tablesTrace();
  std::string path = temporaryPath("tables-cut.bin");
  writeBytes(path, good);
  Collector whole;
  TraceReader(path).read(whole);
  ASSERT_EQ(whole.events.size(), 8u);
  size_t first_chunk_end = format::kFileHeaderSize + format::kChunkHeaderSize +
                           codec::getU32(good.data() + format::kFileHeaderSize);
  for (size_t size = first_chunk_end; size <= good.size(); ++size) {
    writeBytes(path, std::vector<uint8_t>(good.begin(), good.begin() + size));
    TraceReader trace(path);
    Collector collector;
    trace.read(collector);
    ASSERT_EQ(collector.events.size(), size == good.size() ? 8u : 6u) << "cut at " << size;
    for (size_t i = 0; i < collector.events.size(); ++i) {
      EXPECT_EQ(collector.events[i].address, whole.events[i].address) << "cut at " << size;
      EXPECT_EQ(collector.events[i].size, whole.events[i].size) << "cut at " << size;
    }
  }
  std::remove(path.c_str());
}

// A version-6 file (no event tables) reads as it always did.
TEST(Reader, ReadsVersionSixFiles) {
  std::string path = temporaryPath("version6.bin");
  TraceBuilder(6)
      .processInfo()
      .context(7, 0)
      .alloc(10, 0x7f0000000000, 4096)
      .alloc(20, 0x7f0000001000, 4096)
      .free(30, 0x7f0000000000)
      .free(40, 0x7f0000001000)
      .write(path);
  TraceReader trace(path);
  Collector collector;
  trace.read(collector);
  ASSERT_EQ(collector.events.size(), 4u);
  EXPECT_EQ(collector.events[1].size, 4096u);
  EXPECT_EQ(collector.events[2].address, 0x7f0000000000u);
  EXPECT_EQ(collector.events[3].address, 0x7f0000001000u);
  std::remove(path.c_str());
}

TEST(Reader, ReadsARanksDescription) {
  std::string path = temporaryPath("rank.bin");
  TraceBuilder()
      .processInfo()
      .distributed(3, 8, 1, 2, 1, 4, "job-7")
      .alloc(1, 0x1000, 64)
      .write(path);
  TraceReader trace(path);
  Collector visitor;
  trace.read(visitor);
  ASSERT_TRUE(trace.tables().distributed);
  const reader::DistributedInfo& rank = *trace.tables().distributed;
  EXPECT_EQ(rank.rank, 3);
  EXPECT_EQ(rank.world_size, 8);
  EXPECT_EQ(rank.local_rank, 1);
  EXPECT_EQ(rank.local_world_size, 2);
  EXPECT_EQ(rank.group_rank, 1);
  EXPECT_EQ(rank.restart_count, 4);
  EXPECT_EQ(rank.job_id, "job-7");
  EXPECT_EQ(visitor.events.size(), 1u);
  // Twice is a damaged file, and so is a rank past the world.
  TraceBuilder()
      .processInfo()
      .distributed(0, 2, 0, 2, 0, 0, "")
      .distributed(0, 2, 0, 2, 0, 0, "")
      .write(path);
  EXPECT_THROW(TraceReader(path).read(visitor), TraceError);
  TraceBuilder().processInfo().distributed(2, 2, 0, 2, 0, 0, "").write(path);
  EXPECT_THROW(TraceReader(path).read(visitor), TraceError);
  std::remove(path.c_str());
}

TEST(Reader, DecodesVirtualMemoryAndDeviceMemoryRecords) {
  std::string path = temporaryPath("vmm.bin");
  TraceBuilder trace;
  trace.processInfo().context(7, 1, 0, format::Api::kCuMemCreate, format::Level::kSegment);
  trace.addressRange(format::RecordType::kAddressReserve, 5, 0x7f0000000000, 64 << 20);
  trace.alloc(10, 0x10000, 2 << 20);  // physical memory: its handle is its address
  trace.memoryMap(20, 0x7f0000000000, 2 << 20, 0, 0x10000);
  trace.deviceMemory(25, 1, 70ull << 30, 80ull << 30);
  trace.addressRange(format::RecordType::kMemoryUnmap, 30, 0x7f0000000000, 2 << 20);
  trace.free(40, 0x10000);
  trace.addressRange(format::RecordType::kAddressFree, 50, 0x7f0000000000, 64 << 20);
  trace.write(path);
  struct Collector : reader::RecordVisitor {
    std::vector<std::string> seen;
    void onMemoryMap(const reader::MemoryMap& map) {
      seen.push_back("map " + std::to_string(map.time_ns) + " " + std::to_string(map.address) +
                     " " + std::to_string(map.size) + " " + std::to_string(map.offset) + " " +
                     std::to_string(map.handle));
    }
    void range(const char* name, const reader::AddressRange& range) {
      seen.push_back(std::string(name) + " " + std::to_string(range.time_ns) + " " +
                     std::to_string(range.address) + " " + std::to_string(range.size));
    }
    void onMemoryUnmap(const reader::AddressRange& r) { range("unmap", r); }
    void onAddressReserve(const reader::AddressRange& r) { range("reserve", r); }
    void onAddressFree(const reader::AddressRange& r) { range("address-free", r); }
    void onDeviceMemory(const reader::DeviceMemory& reading) {
      seen.push_back("memory " + std::to_string(reading.time_ns) + " " +
                     std::to_string(reading.device) + " " + std::to_string(reading.usedBytes()));
    }
    void onEvent(const Event& event) {
      seen.push_back("event " + std::to_string(event.time_ns) + " " +
                     format::apiName(event.context->api));
    }
  } collector;
  TraceReader reader(path);
  reader.read(collector);
  uint64_t va = 0x7f0000000000;
  EXPECT_EQ(collector.seen,
            (std::vector<std::string>{
                "reserve 5 " + std::to_string(va) + " " + std::to_string(64 << 20),
                "event 10 cuMemCreate", "map 20 " + std::to_string(va) + " 2097152 0 65536",
                "memory 25 1 " + std::to_string(10ull << 30),
                "unmap 30 " + std::to_string(va) + " 2097152", "event 40 cuMemCreate",
                "address-free 50 " + std::to_string(va) + " " + std::to_string(64 << 20)}));
  std::remove(path.c_str());
}

TEST(Reader, RefusesImpossibleDeviceMemoryReadings) {
  std::string path = temporaryPath("reading.bin");
  auto refusal = [&](int device, uint64_t free_bytes, uint64_t total) -> std::string {
    TraceBuilder().processInfo().deviceMemory(1, device, free_bytes, total).write(path);
    try {
      TraceReader trace(path);
      reader::RecordVisitor visitor;
      trace.read(visitor);
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal(-1, 1, 2).find("a device memory reading without a device"), std::string::npos);
  EXPECT_NE(refusal(64, 1, 2).find("device"), std::string::npos);
  EXPECT_NE(refusal(0, 3, 2).find("more free bytes than total"), std::string::npos);
  EXPECT_EQ(refusal(0, 2, 2), "accepted");
  std::remove(path.c_str());
}

// Note [The simulated device]: the card the run was simulated on, and its reads of device values.
TEST(Reader, ReadsTheSimulatedDeviceAndItsReads) {
  std::string path = temporaryPath("simulated.bin");
  TraceBuilder trace;
  trace.processInfo().simulatedDevice("l4", "/opt/profiles/l4.json", 1ull << 30, 1, 2);
  uint32_t frame = trace.frame(trace.string("/home/user/generate.py"), trace.string("main"), 31);
  uint32_t stack = trace.pythonStack(0, frame);
  trace.context(7, 1, 0, format::Api::kDeviceRead);
  trace.deviceRead(5, 8);  // before tracing: untraced, no stack
  trace.marker(6, MarkerKind::kTracingStarted);
  trace.deviceRead(9, 4096, stack);
  trace.context(7, 1, 0, format::Api::kCudaMallocAsync).alloc(12, 0x1000, 512, stack);
  trace.write(path);
  struct Reads : reader::RecordVisitor {
    void onDeviceRead(const reader::DeviceRead& read) {
      seen.push_back(read);
      threads.push_back(read.context->thread_id);
      devices.push_back(read.context->device);
    }
    void onEvent(const Event& event) { events.push_back(event.index); }
    std::vector<reader::DeviceRead> seen;
    std::vector<int64_t> threads;
    std::vector<int> devices;
    std::vector<uint64_t> events;
  } reads;
  TraceReader reader(path);
  reader.read(reads);
  ASSERT_TRUE(reader.tables().simulated);
  const reader::SimulatedDeviceInfo& simulated = *reader.tables().simulated;
  EXPECT_EQ(simulated.profile_name, "l4");
  EXPECT_EQ(simulated.profile_file, "/opt/profiles/l4.json");
  EXPECT_EQ(simulated.memory_bytes, 1ull << 30);
  EXPECT_TRUE(simulated.memory_set_by_user);
  EXPECT_EQ(simulated.device_count, 2);
  ASSERT_EQ(reads.seen.size(), 2u);
  EXPECT_EQ(reads.seen[0].time_ns, 5u);
  EXPECT_EQ(reads.seen[0].bytes, 8u);
  EXPECT_FALSE(reads.seen[0].traced);
  EXPECT_EQ(reads.seen[0].python_stack, 0u);
  EXPECT_EQ(reads.seen[1].time_ns, 9u);
  EXPECT_EQ(reads.seen[1].bytes, 4096u);
  EXPECT_TRUE(reads.seen[1].traced);
  EXPECT_EQ(reads.seen[1].python_stack, stack);
  EXPECT_EQ(reads.threads, (std::vector<int64_t>{7, 7}));
  EXPECT_EQ(reads.devices, (std::vector<int>{1, 1}));
  // A read is no memory event: the allocation after them is event 0, at its own time.
  EXPECT_EQ(reads.events, (std::vector<uint64_t>{0}));
  std::remove(path.c_str());
}

// Note [Values where they decide the path]: what the simulated run assumed, with its stack and
// text, and the record is version 6's.
TEST(Reader, ReadsTheValuesASimulatedRunAssumed) {
  std::string path = temporaryPath("assumed.bin");
  TraceBuilder trace;
  trace.processInfo().simulatedDevice("h100-80gb", "/opt/profiles/h100.json", 1ull << 30, 0, 1);
  uint32_t frame = trace.frame(trace.string("/home/user/generate.py"), trace.string("main"), 12);
  uint32_t stack = trace.pythonStack(0, frame);
  uint32_t said = trace.string("True: beam search goes on to its length limit");
  trace.marker(3, MarkerKind::kTracingStarted);
  trace.context(9, 0, 0, format::Api::kDeviceRead).assumedValue(5, said, stack);
  trace.write(path);
  struct Assumed : reader::RecordVisitor {
    void onAssumedValue(const reader::AssumedValue& value) {
      seen.push_back(value);
      threads.push_back(value.context->thread_id);
    }
    std::vector<reader::AssumedValue> seen;
    std::vector<int64_t> threads;
  } assumed;
  TraceReader reader(path);
  reader.read(assumed);
  ASSERT_EQ(assumed.seen.size(), 1u);
  EXPECT_EQ(assumed.seen[0].time_ns, 5u);
  EXPECT_EQ(reader.tables().string(assumed.seen[0].assumed),
            "True: beam search goes on to its length limit");
  EXPECT_EQ(assumed.seen[0].python_stack, stack);
  EXPECT_TRUE(assumed.seen[0].traced);
  EXPECT_EQ(assumed.threads, (std::vector<int64_t>{9}));
  TraceBuilder version_5(5);
  version_5.processInfo().assumedValue(1, 0);
  version_5.write(path);
  try {
    TraceReader old(path);
    reader::RecordVisitor visitor;
    old.read(visitor);
    ADD_FAILURE() << "a version 6 record in a version 5 file was read";
  } catch (const TraceError& error) {
    EXPECT_NE(std::string(error.what())
                  .find("a record of type 29 (trace format version 6) in a "
                        "version 5"),
              std::string::npos)
        << error.what();
  }
  std::remove(path.c_str());
}

TEST(Reader, RefusesImpossibleSimulatedDevices) {
  std::string path = temporaryPath("simulated-bad.bin");
  auto refusal = [&](TraceBuilder& trace) -> std::string {
    trace.write(path);
    try {
      TraceReader reader(path);
      reader::RecordVisitor visitor;
      reader.read(visitor);
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  {
    TraceBuilder twice;
    twice.processInfo().simulatedDevice("h200", "", 1, 0, 1).simulatedDevice("h200", "", 1, 0, 1);
    EXPECT_NE(refusal(twice).find("a second simulated device record"), std::string::npos);
  }
  for (uint64_t devices : {0ull, 65ull}) {
    TraceBuilder trace;
    trace.processInfo().simulatedDevice("h200", "", 1, 0, devices);
    EXPECT_NE(refusal(trace).find("with " + std::to_string(devices) + " devices (1 to 64"),
              std::string::npos);
  }
  {
    TraceBuilder flag;
    flag.processInfo().simulatedDevice("h200", "", 1, 2, 1);
    EXPECT_NE(refusal(flag).find("memory flag is neither 0 nor 1"), std::string::npos);
  }
  {
    TraceBuilder read;
    read.processInfo().deviceRead(1, 8, /*python=*/3);
    EXPECT_NE(refusal(read).find("a reference to Python stack 3, which is not defined"),
              std::string::npos);
  }
  {
    TraceBuilder fine;
    fine.processInfo().simulatedDevice("h200", "", 1, 1, 64).deviceRead(1, 8);
    EXPECT_EQ(refusal(fine), "accepted");
  }
  std::remove(path.c_str());
}

// Note [Generated code]: the table of stretches, and what a reader refuses in one.
TEST(Reader, ReadsGeneratedCodeAndRefusesImpossibleStretches) {
  std::string path = temporaryPath("generated.bin");
  auto read = [&](TraceBuilder& trace, size_t* stretches = nullptr) -> std::string {
    trace.write(path);
    try {
      TraceReader reader(path);
      reader::RecordVisitor visitor;
      reader.read(visitor);
      if (stretches) *stretches = reader.tables().generated_code.size();
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  auto stretch = [](uint64_t first_line, uint64_t line_count, uint32_t stack = 1) {
    TraceBuilder trace;
    trace.processInfo();
    uint32_t file = trace.string("/tmp/torchinductor_me/ab/cab.py");
    trace.pythonStack(0, trace.frame(trace.string("model.py"), trace.string("forward"), 12));
    trace.generatedCode(file, first_line, line_count, stack);
    return trace;
  };
  {
    TraceBuilder fine = stretch(143, 9);
    size_t stretches = 0;
    EXPECT_EQ(read(fine, &stretches), "accepted");
    EXPECT_EQ(stretches, 1u);
    TraceBuilder last_line = stretch(2147483640, 8);  // ends at 2^31 - 1
    EXPECT_EQ(read(last_line), "accepted");
  }
  for (auto [first, count] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 1}, {1, 0}, {2147483640, 9}, {1ull << 40, 1}, {1, ~0ull}}) {
    TraceBuilder trace = stretch(first, count);
    EXPECT_NE(read(trace).find("a generated code record with lines"), std::string::npos)
        << first << " + " << count;
  }
  TraceBuilder no_stack = stretch(1, 1, 0);
  EXPECT_NE(read(no_stack).find("without a file or a source stack"), std::string::npos);
  TraceBuilder unknown_stack = stretch(1, 1, 2);
  EXPECT_NE(read(unknown_stack).find("Python stack 2, which is not defined"), std::string::npos);
  TraceBuilder version_3(3);
  version_3.processInfo().generatedCode(0, 1, 1, 0);
  EXPECT_NE(read(version_3).find("a record of type 25 (trace format version 4) in a version 3"),
            std::string::npos);
  std::remove(path.c_str());
}

// Note [PyTorch's own allocator]: version 5's segment record and API, refused in a version 4
// file, and a segment action or device the format does not have.
TEST(Reader, SegmentsAreVersion5s) {
  std::string path = temporaryPath("segments.bin");
  auto read = [&](TraceBuilder& trace) -> std::string {
    trace.write(path);
    try {
      TraceReader reader(path);
      reader::RecordVisitor visitor;
      reader.read(visitor);
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  TraceBuilder fine;
  fine.processInfo().segment(1, format::SegmentAction::kUnmap, 3, 0x1000, 4096, 1, 2);
  EXPECT_EQ(read(fine), "accepted");
  TraceBuilder version_4(4);
  version_4.processInfo().segment(1, format::SegmentAction::kAlloc, 0, 0x1000, 4096);
  EXPECT_NE(read(version_4).find("a record of type 26 (trace format version 5) in a version 4"),
            std::string::npos);
  TraceBuilder api_in_4(4);
  api_in_4.processInfo().context(1, 0, 0, format::Api::kTorchAllocator);
  EXPECT_NE(read(api_in_4).find("version 5"), std::string::npos) << read(api_in_4);
  TraceBuilder action(5);
  action.processInfo().segment(1, format::SegmentAction::kCount, 0, 0x1000, 4096);
  EXPECT_NE(read(action).find("an unknown segment action 4"), std::string::npos);
  TraceBuilder no_device(5);
  no_device.processInfo().segment(1, format::SegmentAction::kAlloc, -1, 0x1000, 4096);
  EXPECT_NE(read(no_device).find("a segment without a device"), std::string::npos);
  // Version 6's simulated size (Note [Sizes in the trace]).
  TraceBuilder size_in_5(5);
  size_in_5.processInfo().simulatedSize(1, 0, 64, 128, format::Certainty::kEstimated, 0);
  EXPECT_NE(read(size_in_5).find("a record of type 28 (trace format version 6) in a version 5"),
            std::string::npos)
      << read(size_in_5);
  TraceBuilder certainty(6);
  certainty.processInfo().simulatedSize(1, 0, 64, 128, format::Certainty::kCount, 0);
  EXPECT_NE(read(certainty).find("an unknown certainty 3 of a simulated size"), std::string::npos);
  TraceBuilder size_fine(6);
  size_fine.processInfo().simulatedSize(1, 0, 64, UINT64_MAX, format::Certainty::kBounded, 0);
  EXPECT_EQ(read(size_fine), "accepted");
  std::remove(path.c_str());
}

// A file is read by the rules of the version it says: a record or an API a later version
// added is refused in it, which also catches a damaged version field (no checksum covers it).
// Note [Weights and their modules]: version 6's owner module record, refused in a version 5 file
// and without a module.
TEST(Reader, OwnerModulesAreVersion6s) {
  std::string path = temporaryPath("owners.bin");
  auto read = [&](TraceBuilder& trace) -> std::string {
    trace.write(path);
    try {
      TraceReader reader(path);
      reader::RecordVisitor visitor;
      reader.read(visitor);
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  TraceBuilder fine;
  fine.processInfo();
  fine.ownerModule(0x1000, fine.string("model.head"));
  EXPECT_EQ(read(fine), "accepted");
  TraceBuilder version_5(5);
  version_5.processInfo();
  version_5.ownerModule(0x1000, version_5.string("model.head"));
  EXPECT_NE(read(version_5).find("a record of type 27 (trace format version 6) in a version 5"),
            std::string::npos)
      << read(version_5);
  TraceBuilder no_module;
  no_module.processInfo().ownerModule(0x1000, 0);
  EXPECT_NE(read(no_module).find("an owner module record without a module"), std::string::npos);
  TraceBuilder unknown;
  unknown.processInfo().ownerModule(0x1000, 3);
  EXPECT_NE(read(unknown).find("string 3, which is not defined"), std::string::npos)
      << read(unknown);
  std::remove(path.c_str());
}

// Note [Allocations named by the blocks before them] in records.h: version 12's allocation names a
// recent free (its address and size, or its address), a recent allocation's end, or writes a
// delta; its size counts 512-byte units where odd; a free's size is known where it named its
// allocation by its place. What the forms name is read back, and what no ring holds is refused.
TEST(Reader, Version12sAllocationsNameTheBlocksBeforeThem) {
  constexpr uint64_t kBase = 0x7f0000000000;
  auto field = [](uint64_t k, uint64_t form) {
    return (k - 1) << format::BlockForm::kShift | form;
  };
  auto build = [&](TraceBuilder& trace) {
    trace.processInfo().context(7, 0);
    // Three allocations by their deltas (times 4), sizes 4096 (8 units, odd) and 100 (even).
    uint64_t units8 = 8 << 1 | 1, bytes100 = 100 << 1;
    trace.blockAllocation(1000, kBase, (codec::zigzag(kBase >> 8) + 1) << 2, &units8);
    trace.blockAllocation(2000, kBase + 0x10000, (codec::zigzag(0x100) + 1) << 2, &bytes100);
    trace.blockAllocation(3000, kBase + 0x20000, (codec::zigzag(0x100) + 1) << 2, &units8);
    // Freed: the first by its place (entry 3: its size known), the third by its address.
    trace.compactFreeOfEntry(4000, kBase, 3);
    trace.compactEvent(true, 5000, kBase + 0x20000, nullptr, 0, 0, 0, true);
  };
  TraceBuilder trace(format::kBlockNamesVersion);
  build(trace);
  uint64_t bytes5 = 5 << 1;
  // The 2nd most recent free with its size (4096 at kBase); the end of the 3rd most recent
  // allocation (100 bytes at kBase + 0x10000, rounded to 512); the newest free's address, 5 bytes.
  trace.blockAllocation(6000, kBase, field(2, format::BlockForm::kFreedBlock), nullptr);
  trace.blockAllocation(7000, kBase + 0x10200, field(3, format::BlockForm::kAllocationEnd),
                        &bytes5);
  trace.blockAllocation(8000, kBase + 0x20000, field(1, format::BlockForm::kFreedAddress), &bytes5);
  std::string path = temporaryPath("block-events.bin");
  trace.write(path);
  TraceReader reader(path);
  Collector collector;
  reader.read(collector);
  ASSERT_EQ(reader.version(), format::kBlockNamesVersion);
  std::vector<std::pair<uint64_t, uint64_t>> expected = {
      {kBase, 4096},        {kBase + 0x10000, 100}, {kBase + 0x20000, 4096}, {kBase, 0},
      {kBase + 0x20000, 0}, {kBase, 4096},          {kBase + 0x10200, 5},    {kBase + 0x20000, 5}};
  ASSERT_EQ(collector.events.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(collector.events[i].address, expected[i].first) << i;
    EXPECT_EQ(collector.events[i].size, expected[i].second) << i;
  }

  // A freed block's size where the free wrote an address (the newest), a free and an end past
  // what the rings hold: refused, in one line.
  auto refused = [&](uint64_t address_field, const std::string& expected_message) {
    TraceBuilder bad(format::kBlockNamesVersion);
    build(bad);
    bad.blockAllocation(6000, kBase, address_field, nullptr);
    bad.write(path);
    try {
      TraceReader bad_reader(path);
      Collector bad_collector;
      bad_reader.read(bad_collector);
      ADD_FAILURE() << "read " << expected_message;
    } catch (const TraceError& error) {
      EXPECT_NE(std::string(error.what()).find(expected_message), std::string::npos)
          << error.what();
    }
  };
  refused(field(1, format::BlockForm::kFreedBlock),
          "an allocation naming the size of free 1 before it, whose size is not known");
  refused(field(3, format::BlockForm::kFreedAddress),
          "an allocation naming free 3 before it, of 2");
  refused(field(4, format::BlockForm::kAllocationEnd),
          "an allocation at the end of allocation 4 before it, of 3");

  // Note [Strings that begin as an earlier one]: a string from the one 2 before it; one from a
  // string past the table, refused.
  TraceBuilder strings(format::kBlockNamesVersion);
  strings.processInfo();
  strings.string("/site-packages/torch/nn/linear.py");
  strings.string("forward");
  uint32_t module = strings.stringFrom(2, 24, "module.py");
  strings.write(path);
  TraceReader strings_reader(path);
  Collector strings_collector;
  strings_reader.read(strings_collector);
  ASSERT_EQ(strings_reader.tables().strings.size(), module + 1u);
  EXPECT_EQ(strings_reader.tables().strings[module], "/site-packages/torch/nn/module.py");
  TraceBuilder past(format::kBlockNamesVersion);
  past.processInfo();
  past.string("forward");
  past.stringFrom(2, 3, "x");
  past.write(path);
  try {
    TraceReader past_reader(path);
    Collector past_collector;
    past_reader.read(past_collector);
    ADD_FAILURE() << "read a string from one past the table";
  } catch (const TraceError& error) {
    EXPECT_NE(std::string(error.what()).find("a string beginning as the string 2 before it, of 1"),
              std::string::npos)
        << error.what();
  }
  std::remove(path.c_str());
}

// Note [Events in fewer bytes]: version 11's events read as the same events in version 10's
// layout: time deltas of 0-2 units in the type byte and longer ones after it, addresses 256-aligned
// and not, frees by their place in the ring (past the last 7, across a chunk) and by address,
// stacks written or the previous ones; a place the ring does not hold is refused in one line.
TEST(Reader, Version11sEventsReadAsVersion10sForms) {
  struct Step {
    bool free;
    uint64_t time;  // ns: the builder's time unit
    uint64_t address;
    uint64_t size;
    uint32_t place;  // a free's place in the ring (> 7), or 0: by its address
    bool same_stacks;
  };
  constexpr uint64_t kBase = 0x7f0000000000;
  std::vector<Step> steps = {
      {false, 0, kBase, 4096, 0, false},           // delta 0, in the type byte
      {false, 1, kBase + 0x1000, 512, 0, true},    // 1
      {false, 3, kBase + 0xf10, 100, 0, true},     // 2; not 256-aligned: 0, then the delta
      {false, 6, kBase - 0x100000, 64, 0, false},  // 3: a time field of 0; a negative delta
      {false, 1006, kBase + (uint64_t{1} << 40), 1 << 20, 0, true},  // a long delta, far away
  };
  for (uint64_t i = 0; i < 10; ++i)
    steps.push_back({false, 1010 + i, kBase + 0x10000 * (i + 1), 512, 0, true});
  // 15 allocations so far: the first (4096 at kBase) is the 15th most recent.
  steps.push_back({true, 1100, kBase, 0, 15, true});
  steps.push_back({true, 1100, kBase + 0xf10, 0, 0, true});  // by its address, not aligned
  steps.push_back({true, 1102, kBase + 0x1000, 0, 14, true});
  steps.push_back({true, 5000000, kBase + 0x10000, 0, 0, true});  // by its address, aligned
  size_t flush_after = 16;  // the tables and bases carry over chunks
  steps.push_back({true, 5000001, kBase + (uint64_t{1} << 40), 0, 11, true});

  auto written = [&](uint32_t version) {
    TraceBuilder trace(version);
    trace.processInfo().context(7, 0);
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& step = steps[i];
      const uint64_t* size = step.free ? nullptr : &step.size;
      if (version >= format::kCompactEventsVersion)
        trace.compactEvent(step.free, step.time, step.address, size, step.place, 0, 0,
                           step.same_stacks && i > 0);
      else if (step.free)
        trace.free(step.time, step.address);
      else
        trace.alloc(step.time, step.address, step.size);
      if (i + 1 == flush_after) trace.flushChunk();
    }
    return trace.bytes();
  };
  std::string path = temporaryPath("compact-events.bin");
  std::vector<std::vector<Event>> read;
  for (uint32_t version : {10u, 11u}) {
    writeBytes(path, written(version));
    TraceReader reader(path);
    Collector collector;
    reader.read(collector);
    ASSERT_EQ(reader.version(), version);
    read.push_back(collector.events);
  }
  ASSERT_EQ(read[0].size(), steps.size());
  ASSERT_EQ(read[1].size(), steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(read[1][i].kind, steps[i].free ? EventKind::kFree : EventKind::kAlloc) << i;
    EXPECT_EQ(read[1][i].address, steps[i].address) << i;
    EXPECT_EQ(read[1][i].size, steps[i].free ? 0 : steps[i].size) << i;
    EXPECT_EQ(read[1][i].time_ns, steps[i].time) << i;
    EXPECT_EQ(read[1][i].address, read[0][i].address) << i;
    EXPECT_EQ(read[1][i].time_ns, read[0][i].time_ns) << i;
  }
  // Version 11 is the shorter: 5 of its frees' addresses are a place or nothing.
  EXPECT_LT(written(11).size(), written(10).size());

  // A place past the allocations the ring holds (2 here): refused, naming both.
  TraceBuilder beyond;
  beyond.processInfo().context(7, 0).alloc(10, 0x1000, 64).alloc(20, 0x2000, 64);
  beyond.compactEvent(true, 30, 0x1000, nullptr, 8, 0, 0, true);
  beyond.write(path);
  try {
    TraceReader reader(path);
    Collector collector;
    reader.read(collector);
    ADD_FAILURE() << "read a free of the 8th allocation of 2";
  } catch (const TraceError& error) {
    EXPECT_NE(
        std::string(error.what()).find("a free naming allocation 8 before this one, of 2 known"),
        std::string::npos)
        << error.what();
  }
  std::remove(path.c_str());
}

// Note [Records beside the events, shorter]: version 10's short forms read as the records they
// shorten (the k-th most recent allocation's address, the string before it's beginning), across
// chunks and past the old ring of 8; what names no allocation of the ring, shares more than the
// string before it has, or comes in a version 9 file is refused in one line.
TEST(Reader, Version10sShortRecordsReadAsTheirLongForms) {
  std::string path = temporaryPath("short-records.bin");
  struct Told : reader::RecordVisitor {
    void onCategory(uint64_t address, format::Category category) {
      categories.emplace_back(address, category);
    }
    void onOwnerModule(uint64_t address, uint32_t module) { owners.emplace_back(address, module); }
    void onSegment(const reader::Segment& segment) { addresses.push_back(segment.address); }
    void onEvent(const reader::Event& event) { addresses.push_back(event.address); }
    std::vector<std::pair<uint64_t, format::Category>> categories;
    std::vector<std::pair<uint64_t, uint32_t>> owners;
    std::vector<uint64_t> addresses;  // of segments and events, in file order
  };
  auto read = [&](TraceBuilder& trace, Told* told, reader::Tables* tables) -> std::string {
    trace.write(path);
    try {
      TraceReader reader(path);
      reader.read(*told);
      *tables = reader.tables();
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  TraceBuilder fine;
  fine.processInfo().context(1, 0, 0, format::Api::kPluggable, format::Level::kTensor);
  uint32_t parent = fine.string("model.transformer.h.10");
  uint32_t child = fine.stringAfter(22, ".attn.c_attn");
  uint32_t other = fine.stringAfter(6, "lm_head");
  for (uint64_t i = 0; i < 5000; ++i) {
    fine.alloc(i + 1, 0x7f0000000000 + i * 512, 512);
    if (i == 2000) fine.flushChunk();  // the ring carries over chunks
  }
  fine.recentCategory(1, format::Category::kActivation);   // the newest
  fine.recentCategory(4096, format::Category::kGradient);  // the oldest the ring holds
  fine.recentOwnerModule(9, child);                        // past the old ring of 8
  fine.recentOwnerModule(2, other);
  // A segment near the last event (a byte delta, then one of 256-byte units), each followed by
  // the tensor at its start: the event's delta counts from the segment's address.
  fine.segmentNear(6000, format::SegmentAction::kAlloc, 0, 0x7f0000000000 + 5000 * 512 + 0x10,
                   2 << 20);
  fine.alloc(6001, 0x7f0000000000 + 5000 * 512 + 0x10, 64);
  fine.segmentNear(6002, format::SegmentAction::kAlloc, 0, 0x7e0000000000, 20 << 20);
  fine.alloc(6003, 0x7e0000000000, 4 << 20);
  Told told;
  reader::Tables tables;
  ASSERT_EQ(read(fine, &told, &tables), "accepted");
  EXPECT_EQ(tables.string(child), "model.transformer.h.10.attn.c_attn");
  EXPECT_EQ(tables.string(other), "model.lm_head");
  EXPECT_EQ(tables.string(parent), "model.transformer.h.10");
  using Categories = std::vector<std::pair<uint64_t, format::Category>>;
  EXPECT_EQ(told.categories,
            (Categories{{0x7f0000000000 + 4999 * 512, format::Category::kActivation},
                        {0x7f0000000000 + 904 * 512, format::Category::kGradient}}));
  using Owners = std::vector<std::pair<uint64_t, uint32_t>>;
  EXPECT_EQ(told.owners,
            (Owners{{0x7f0000000000 + 4991 * 512, child}, {0x7f0000000000 + 4998 * 512, other}}));
  ASSERT_EQ(told.addresses.size(), 5004u);
  EXPECT_EQ(
      std::vector<uint64_t>(told.addresses.end() - 4, told.addresses.end()),
      (std::vector<uint64_t>{0x7f0000000000 + 5000 * 512 + 0x10, 0x7f0000000000 + 5000 * 512 + 0x10,
                             0x7e0000000000, 0x7e0000000000}));

  auto refused = [&](auto build) {
    TraceBuilder trace;
    trace.processInfo().context(1, 0, 0, format::Api::kPluggable, format::Level::kTensor);
    for (uint64_t i = 0; i < 3; ++i) trace.alloc(i + 1, 0x1000 + i * 512, 512);
    build(trace);
    Told unused;
    reader::Tables tables;
    return read(trace, &unused, &tables);
  };
  EXPECT_NE(refused([](TraceBuilder& t) {
              t.recentCategory(4, format::Category::kActivation);
            }).find("a category naming allocation 4 before this one, of 3 known"),
            std::string::npos);
  EXPECT_NE(refused([](TraceBuilder& t) {
              t.recentCategory(0, format::Category::kActivation);
            }).find("a category naming allocation 0"),
            std::string::npos);
  EXPECT_NE(refused([](TraceBuilder& t) {
              t.recentCategory(1, format::Category::kCount);
            }).find("an unknown category 7"),
            std::string::npos);
  EXPECT_EQ(refused([](TraceBuilder& t) { t.recentOwnerModule(1, t.string("model")); }),
            "accepted");
  EXPECT_NE(refused([](TraceBuilder& t) {
              t.recentOwnerModule(5, t.string("model"));
            }).find("an owner module record naming allocation 5 before this one, of 3 known"),
            std::string::npos);
  EXPECT_NE(refused([](TraceBuilder& t) {
              t.string("model");
              t.stringAfter(6, "x");
            }).find("a string sharing 6 bytes with the string before it, of 5"),
            std::string::npos);
  EXPECT_NE(refused([](TraceBuilder& t) {
              t.stringAfter(1, "x");
            }).find("a string sharing 1 bytes with the string before it, of 0"),
            std::string::npos);
  EXPECT_NE(refused([](TraceBuilder& t) {
              t.string(std::string(200, 'a'));
              t.stringAfter(format::kMaxSharedPrefix + 1, "b");
            }).find("a string sharing 128 bytes"),
            std::string::npos);
  TraceBuilder version_9(9);
  version_9.processInfo(42, format::StackMode::kPython, 1000)
      .recentCategory(1, format::Category::kActivation);
  Told unused;
  EXPECT_NE(read(version_9, &unused, &tables)
                .find("a record of type 30 (trace format version 10) in a version 9 file"),
            std::string::npos)
      << read(version_9, &unused, &tables);
  std::remove(path.c_str());
}

TEST(Reader, RefusesWhatItsVersionDoesNotHave) {
  std::string path = temporaryPath("too-new.bin");
  auto message = [&](TraceBuilder& trace) -> std::string {
    trace.write(path);
    try {
      TraceReader reader(path);
      reader::RecordVisitor visitor;
      reader.read(visitor);
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  {
    TraceBuilder trace(2);
    trace.processInfo().simulatedDevice("h200", "", 1, 0, 1);
    EXPECT_NE(
        message(trace).find("a record of type 21 (trace format version 3) in a version 2 file"),
        std::string::npos)
        << message(trace);
  }
  {
    TraceBuilder trace(2);
    trace.processInfo().deviceRead(1, 8);
    EXPECT_NE(message(trace).find("a record of type 22 (trace format version 3)"),
              std::string::npos);
  }
  {
    TraceBuilder trace(1);
    trace.processInfo().deviceMemory(1, 0, 1, 2);
    EXPECT_NE(message(trace).find("a record of type 20 (trace format version 2) in a version 1"),
              std::string::npos);
  }
  {
    TraceBuilder trace(2);
    trace.processInfo().context(1, 0, 0, format::Api::kDeviceRead);
    EXPECT_NE(message(trace).find("API 9 (trace format version 3) in a version 2 file"),
              std::string::npos);
  }
  {
    TraceBuilder trace(1);
    trace.processInfo().context(1, 0, 0, format::Api::kCuMemCreate);
    EXPECT_NE(message(trace).find("API 7 (trace format version 2) in a version 1 file"),
              std::string::npos);
  }
  {
    TraceBuilder trace(3);  // a flight recorder's section (its fields do not matter)
    trace.processInfo().raw({static_cast<uint8_t>(format::RecordType::kSection)});
    EXPECT_NE(message(trace).find("a record of type 23 (trace format version 4) in a version 3"),
              std::string::npos)
        << message(trace);
  }
  {
    TraceBuilder trace(2);  // what version 2 had reads as it did
    trace.processInfo().context(1, 0, 0, format::Api::kCuMemCreate).deviceMemory(1, 0, 1, 2);
    EXPECT_EQ(message(trace), "accepted");
  }
  std::remove(path.c_str());
}

// Version 4's file flags and open chunk are refused in an older file, as they always were:
// there a flag is damage, and a chunk header left zero a corrupted one.
TEST(Reader, RefusesVersionFoursFlagsAndOpenChunkInAnOlderFile) {
  std::string path = temporaryPath("old-flight.bin");
  auto message = [&](const std::vector<uint8_t>& data) -> std::string {
    writeBytes(path, data);
    try {
      TraceReader reader(path);
      reader::RecordVisitor visitor;
      reader.read(visitor);
    } catch (const TraceError& error) {
      return error.what();
    }
    return "accepted";
  };
  for (uint32_t version : {3u, format::kVersion}) {
    std::vector<uint8_t> flagged = TraceBuilder(version).processInfo().bytes();
    codec::putU32(flagged.data() + 12, format::FileFlags::kFlight);
    EXPECT_EQ(message(flagged), version >= format::kOpenChunkVersion
                                    ? "accepted"
                                    : path + ": unknown flags in the file header (corrupted?)");
    // The records after a chunk header left zero, then the zeros a mapped writer leaves.
    std::vector<uint8_t> open = TraceBuilder(version).bytes();
    std::vector<uint8_t> records = TraceBuilder(version).processInfo().bytes();
    open.insert(open.end(), 12, 0);
    open.insert(open.end(), records.begin() + format::kFileHeaderSize + format::kChunkHeaderSize,
                records.end());
    open.insert(open.end(), 64, 0);
    std::string said = message(open);
    if (version >= format::kOpenChunkVersion)
      EXPECT_EQ(said, "accepted");
    else
      EXPECT_NE(said.find("corrupted chunk header (checksum mismatch) at byte 16"),
                std::string::npos)
          << said;
  }
  std::remove(path.c_str());
}

TEST(Reader, RefusesWhatIsNotATrace) {
  std::string path = temporaryPath("bad.bin");
  auto message = [&](const std::vector<uint8_t>& data) {
    writeBytes(path, data);
    try {
      TraceReader trace(path);
      Collector collector;
      trace.read(collector);
    } catch (const TraceError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({}), path + ": the file is empty");
  EXPECT_EQ(message({'G', 'I', 'F', '8', '9', 'a', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
            path + ": not a memtrace trace (it does not start with MEMTRACE)");
  EXPECT_EQ(message({'M', 'E', 'M', 'T', 'R', 'A', 'C', 'E', 1, 0}),
            path + ": the file header is cut short (10 of 16 bytes)");
  EXPECT_EQ(message(TraceBuilder().bytes()), path + ": the trace holds no records");
  EXPECT_NE(
      message(TraceBuilder().processInfo().raw({0x7e}).bytes()).find("unknown record type 126"),
      std::string::npos);
  // Bits 2-0 of an event are version 7's (Note [Event tables]): reserved in version 6.
  EXPECT_NE(message(TraceBuilder(6).processInfo().raw({0x81}).bytes()).find("reserved bits"),
            std::string::npos);
  {
    TraceBuilder trace;
    trace.processInfo().context(1, 0).alloc(1, 0x1000, 64, /*python=*/9);
    EXPECT_NE(message(trace.bytes()).find("a reference to Python stack 9, which is not defined"),
              std::string::npos);
  }
  {
    TraceBuilder trace;
    trace.context(1, 0);  // no process information first
    EXPECT_NE(message(trace.bytes()).find("the first record is not the process information"),
              std::string::npos);
  }
  EXPECT_THROW(TraceReader(path + ".missing"), TraceError);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace memtrace::testing
