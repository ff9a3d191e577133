// The recorder linked directly: what it writes, read back with the reader. The recorder is
// process-wide, so every test frees what it allocated and closes its file.
#include "tracer/recorder/recorder.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/trace_builder.h"
#include "tracer/reader/reader.h"
#include "tracer/recorder/memtrace.h"
#include "tracer/recorder/record_writer.h"
#include "tracer/recorder/trace_file.h"

namespace memtrace::testing {
namespace {

using format::MarkerKind;

EventSource source(int device, const void* caller) {
  return EventSource{format::Api::kPluggable, format::Level::kTensor, device, 0x5, caller};
}

void* address(uint64_t value) {
  return reinterpret_cast<void*>(value);
}

// These stand in for the hooks: noinline, so that their return address is a frame.
__attribute__((noinline)) void alloc(uint64_t where, uint64_t size, int device = 0) {
  RecursionGuard guard;
  recordAlloc(guard, source(device, __builtin_return_address(0)), address(where), size);
}

__attribute__((noinline)) void release(uint64_t where) {
  RecursionGuard guard;
  recordFree(guard, source(0, __builtin_return_address(0)), address(where));
}

struct Recorded : reader::RecordVisitor {
  void onEvent(const reader::Event& event) {
    events.push_back(event);
    devices.push_back(event.context->device);
    threads.push_back(event.context->thread_id);
    apis.push_back(event.context->api);
    streams.push_back(event.context->stream);
    levels.push_back(event.context->level);
  }
  void onMarker(const reader::Marker& marker) { markers.push_back(marker.kind); }
  std::vector<reader::Event> events;
  std::vector<int> devices;
  std::vector<int64_t> threads;  // the event's context's, read while it is current
  std::vector<format::Api> apis;
  std::vector<uint64_t> streams;
  std::vector<format::Level> levels;
  std::vector<MarkerKind> markers;
};

Recorded readBack(const std::string& path, reader::Tables* tables = nullptr) {
  reader::TraceReader trace(path);
  Recorded recorded;
  trace.read(recorded);
  if (tables) *tables = trace.tables();
  return recorded;
}

TEST(Recorder, EventsRoundTripExactly) {
  std::string path = temporaryPath("roundtrip.bin");
  ASSERT_EQ(memtrace_start(path.c_str()), 0) << memtrace_last_error();
  // Addresses that exercise every delta: aligned and not, up and down, near the top.
  const uint64_t addresses[] = {0x7f0000000000,     0x7f0000000100, 0x12345,       0x7f00000fff00,
                                0xffffffffffff0000, 0x10,           0x7f0000000200};
  const uint64_t sizes[] = {1, 256, 1ull << 40, (1ull << 63) + 5, 3, 512, 7};
  for (size_t i = 0; i < std::size(addresses); ++i) alloc(addresses[i], sizes[i], int(i % 3));
  for (size_t i = std::size(addresses); i-- > 0;) release(addresses[i]);
  release(0xdead0000);  // unknown: nothing is written
  ASSERT_EQ(memtrace_close(), 0);

  Recorded recorded = readBack(path);
  ASSERT_EQ(recorded.events.size(), 2 * std::size(addresses));
  for (size_t i = 0; i < std::size(addresses); ++i) {
    const reader::Event& event = recorded.events[i];
    EXPECT_EQ(event.kind, reader::EventKind::kAlloc);
    EXPECT_EQ(event.address, addresses[i]);
    EXPECT_EQ(event.size, sizes[i]);
    EXPECT_EQ(recorded.devices[i], int(i % 3));
    EXPECT_TRUE(event.traced);
    const reader::Event& free = recorded.events[2 * std::size(addresses) - 1 - i];
    EXPECT_EQ(free.kind, reader::EventKind::kFree);
    EXPECT_EQ(free.address, addresses[i]);
    EXPECT_EQ(recorded.devices[2 * std::size(addresses) - 1 - i], int(i % 3));
  }
  for (size_t i = 1; i < recorded.events.size(); ++i)
    EXPECT_GE(recorded.events[i].time_ns, recorded.events[i - 1].time_ns);
  EXPECT_EQ(recorded.markers,
            (std::vector<MarkerKind>{MarkerKind::kTracingStarted, MarkerKind::kTraceClosed}));
  std::remove(path.c_str());
}

uint64_t monotonicNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return uint64_t(now.tv_sec) * 1000000000u + uint64_t(now.tv_nsec);
}

// Note [Times in microseconds] in records.h: the file names its time unit (1 µs unless
// MEMTRACE_TIME_RESOLUTION=ns), and each event's time is the start of the unit its clock
// reading fell in, read back as nanoseconds since the start.
TEST(Recorder, TimesCountTheFileUnit) {
  for (const char* resolution : {"", "ns", "us"}) {
    SCOPED_TRACE(std::string("MEMTRACE_TIME_RESOLUTION=") + resolution);
    setenv("MEMTRACE_TIME_RESOLUTION", resolution, 1);
    uint64_t unit = std::string(resolution) == "ns" ? 1 : 1000;
    std::string path = temporaryPath("time-unit.bin");
    ASSERT_EQ(memtrace_start(path.c_str()), 0) << memtrace_last_error();
    std::vector<std::pair<uint64_t, uint64_t>> taken;  // the clock before and after each event
    for (uint64_t i = 0; i < 200; ++i) {
      uint64_t before = monotonicNs();
      if (i % 2 == 0)
        alloc(0x7f0000000000 + (i / 2) * 0x1000, 512);
      else
        release(0x7f0000000000 + (i / 2) * 0x1000);
      taken.emplace_back(before, monotonicNs());
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(30));
    }
    ASSERT_EQ(memtrace_close(), 0);
    unsetenv("MEMTRACE_TIME_RESOLUTION");
    reader::Tables tables;
    Recorded recorded = readBack(path, &tables);
    EXPECT_EQ(tables.process.time_unit_ns, unit);
    ASSERT_EQ(recorded.events.size(), taken.size());
    uint64_t start = tables.process.start_monotonic_ns;
    for (size_t i = 0; i < taken.size(); ++i) {
      uint64_t time = recorded.events[i].time_ns;
      EXPECT_EQ(time % unit, 0u) << "event " << i;
      // The unit [start + time, start + time + unit) holds a reading between the two taken.
      EXPECT_LE(start + time, taken[i].second) << "event " << i;
      EXPECT_GT(start + time + unit, taken[i].first) << "event " << i;
    }
    std::remove(path.c_str());
  }
}

// Note [Event tables] in records.h: recurring sizes and frees of recent allocations are
// written as table entries, the others as fields; every one reads back exactly.
TEST(Recorder, TableEntriesRoundTripExactly) {
  std::string path = temporaryPath("tables-roundtrip.bin");
  ASSERT_EQ(memtrace_start(path.c_str()), 0) << memtrace_last_error();
  std::vector<uint64_t> live;
  std::vector<std::pair<uint64_t, uint64_t>> written;  // (address, size); size 0: a free
  for (uint64_t i = 0; i < 300; ++i) {
    uint64_t where = 0x7f0000000000 + i * 0x10000 + (i % 3) * 0x100;
    uint64_t size = (i % 5 == 0) ? 1000 + i : 256 << (i % 4);  // recurring and new sizes
    alloc(where, size);
    live.push_back(where);
    written.emplace_back(where, size);
    // Free the most recent, one up to 12 back, or none.
    if (i % 3 != 2 && live.size() > 1) {
      size_t back = (i * 7) % 13;
      size_t at = live.size() - 1 - (back < live.size() ? back : 0);
      release(live[at]);
      written.emplace_back(live[at], 0);
      live.erase(live.begin() + static_cast<long>(at));
    }
  }
  for (uint64_t where : live) {
    release(where);
    written.emplace_back(where, 0);
  }
  ASSERT_EQ(memtrace_close(), 0);
  Recorded recorded = readBack(path);
  ASSERT_EQ(recorded.events.size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    const reader::Event& event = recorded.events[i];
    EXPECT_EQ(event.kind, written[i].second ? reader::EventKind::kAlloc : reader::EventKind::kFree)
        << "event " << i;
    EXPECT_EQ(event.address, written[i].first) << "event " << i;
    EXPECT_EQ(event.size, written[i].second) << "event " << i;
  }
  std::remove(path.c_str());
}

TEST(Recorder, CountsEverythingAndSnapshotsWhatWasLiveBeforeTheStart) {
  memtrace_reset_peak(-1);
  uint64_t base = memtrace_current_bytes(-1);
  alloc(0x100000, 5000);  // before any trace: counted, not written
  alloc(0x200000, 7000);
  release(0x200000);
  EXPECT_EQ(memtrace_current_bytes(-1), base + 5000);
  EXPECT_EQ(memtrace_peak_bytes(-1), base + 12000);
  EXPECT_EQ(memtrace_annotate("early"), -1);

  std::string path = temporaryPath("snapshot.bin");
  ASSERT_EQ(memtrace_start(path.c_str()), 0);
  EXPECT_EQ(memtrace_is_tracing(), 1);
  alloc(0x300000, 100);
  ASSERT_EQ(memtrace_stop(), 0);
  EXPECT_EQ(memtrace_stop(), -1) << "stopping twice is an error";
  alloc(0x400000, 200);                   // while stopped: written, untraced
  ASSERT_EQ(memtrace_start(nullptr), 0);  // the same file goes on
  ASSERT_EQ(memtrace_annotate("again"), 0);
  release(0x400000);
  release(0x300000);
  release(0x100000);
  ASSERT_EQ(memtrace_close(), 0);
  EXPECT_EQ(memtrace_current_bytes(-1), base);

  Recorded recorded = readBack(path);
  std::vector<std::pair<uint64_t, bool>> seen;
  for (const reader::Event& event : recorded.events) seen.emplace_back(event.size, event.traced);
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, bool>>{
                      {5000, false}, {100, true}, {200, false}, {0, true}, {0, true}, {0, true}}));
  EXPECT_EQ(recorded.markers,
            (std::vector<MarkerKind>{MarkerKind::kTracingStarted, MarkerKind::kTracingStopped,
                                     MarkerKind::kTracingStarted, MarkerKind::kAnnotation,
                                     MarkerKind::kTraceClosed}));
  std::remove(path.c_str());
}

TEST(Recorder, StartingWithAnotherPathMovesToANewFile) {
  std::string first = temporaryPath("first.bin");
  std::string second = temporaryPath("second.bin");
  ASSERT_EQ(memtrace_start(first.c_str()), 0);
  alloc(0x500000, 11);
  ASSERT_EQ(memtrace_start(second.c_str()), 0);
  alloc(0x600000, 22);
  release(0x500000);
  release(0x600000);
  ASSERT_EQ(memtrace_close(), 0);
  Recorded one = readBack(first);
  ASSERT_EQ(one.events.size(), 1u);
  EXPECT_EQ(one.markers.back(), MarkerKind::kTraceClosed);
  Recorded two = readBack(second);
  ASSERT_EQ(two.events.size(), 4u);
  EXPECT_FALSE(two.events[0].traced) << "live when the second file opened: a snapshot";
  EXPECT_EQ(two.events[0].size, 11u);
  EXPECT_TRUE(two.events[1].traced);
  std::remove(first.c_str());
  std::remove(second.c_str());
}

// Note [Generated code]: a stretch told while a file is open is written at once; one told
// before a file opens (or for an earlier file) is written into every file that opens later. The
// table lives as long as the process: this test's stretch is in every later file of this binary.
TEST(Recorder, GeneratedCodeIsWrittenIntoEveryFile) {
  const char* files[] = {"/home/user/model.py", "/venv/site-packages/torch/nn/modules/linear.py"};
  const char* functions[] = {"forward", "forward"};
  const int lines[] = {12, 125};
  const char* generated = "/tmp/torchinductor_me/ab/cab.py";
  EXPECT_EQ(memtrace_generated_code(generated, 143, 9, files, functions, lines, 0), -1);
  EXPECT_NE(std::string(memtrace_last_error()).find("memtrace_generated_code"), std::string::npos);
  ASSERT_EQ(memtrace_generated_code(generated, 143, 9, files, functions, lines, 2), 0);
  std::string first = temporaryPath("generated-first.bin");
  std::string second = temporaryPath("generated-second.bin");
  ASSERT_EQ(memtrace_start(first.c_str()), 0);
  ASSERT_EQ(memtrace_generated_code(generated, 152, 40, files, functions, lines, 1), 0);
  ASSERT_EQ(memtrace_start(second.c_str()), 0);
  ASSERT_EQ(memtrace_close(), 0);
  for (const std::string& path : {first, second}) {
    reader::Tables tables;
    readBack(path, &tables);
    ASSERT_EQ(tables.generated_code.size(), 2u) << path;
    const reader::GeneratedCode& told = tables.generated_code[0];
    EXPECT_EQ(tables.string(told.file), generated);
    EXPECT_EQ(told.first_line, 143);
    EXPECT_EQ(told.line_count, 9);
    const reader::StackNode& innermost = tables.python_stacks[told.source_stack];
    EXPECT_EQ(tables.python_frames[innermost.frame].line, 125);
    const reader::StackNode& outer = tables.python_stacks[innermost.parent];
    EXPECT_EQ(outer.parent, 0u);
    EXPECT_EQ(tables.string(tables.python_frames[outer.frame].file), "/home/user/model.py");
    EXPECT_EQ(tables.generated_code[1].first_line, 152);
    EXPECT_EQ(tables.generated_code[1].source_stack, innermost.parent);  // the same frame's node
  }
  std::remove(first.c_str());
  std::remove(second.c_str());
}

TEST(Recorder, ModuleScopesFollowEachThread) {
  std::string path = temporaryPath("modules.bin");
  ASSERT_EQ(memtrace_start(path.c_str()), 0);
  EXPECT_EQ(memtrace_module_exit(), -1) << "nothing to exit";
  memtrace_module_enter("model");
  alloc(0x800000, 1);
  memtrace_module_enter("model.layers.0");
  alloc(0x800100, 2);
  alloc(0x800200, 3);  // same module: no new scope record
  std::thread other([] {
    memtrace_module_enter("model.other_thread");
    alloc(0x800300, 4);
    memtrace_module_exit();
  });
  other.join();
  alloc(0x800400, 5);  // this thread is still in model.layers.0
  memtrace_module_exit();
  alloc(0x800500, 6);  // back in model
  memtrace_module_exit();
  alloc(0x800600, 7);          // no module
  std::string deep(400, 'x');  // longer than a path may be: cut, not overflowed
  memtrace_module_enter(deep.c_str());
  alloc(0x800700, 8);
  memtrace_module_exit();
  for (uint64_t where = 0x800000; where <= 0x800700; where += 0x100) release(where);
  ASSERT_EQ(memtrace_close(), 0);

  reader::Tables tables;
  Recorded recorded = readBack(path, &tables);
  std::vector<std::string> modules;
  for (const reader::Event& event : recorded.events)
    if (event.kind == reader::EventKind::kAlloc) modules.emplace_back(tables.string(event.module));
  EXPECT_EQ(modules, (std::vector<std::string>{"model", "model.layers.0", "model.layers.0",
                                               "model.other_thread", "model.layers.0", "model", "",
                                               std::string(255, 'x')}));
  std::remove(path.c_str());
}

// Note [Records beside the events, shorter] in records.h: a category or an owner of one of the
// last EventTables::kRing allocations is written as its place among them, another as its address,
// a module path that begins as the string before it as the rest of it; each reads back as told.
TEST(Recorder, CategoriesAndOwnersNameRecentAllocationsByTheirPlace) {
  std::string path = temporaryPath("short-records.bin");
  ASSERT_EQ(memtrace_start(path.c_str()), 0);
  constexpr uint64_t kBase = 0x7f3000000000, kCount = format::EventTables::kRing + 100;
  for (uint64_t i = 0; i < kCount; ++i) alloc(kBase + i * 512, 512);
  const uint64_t newest = kBase + (kCount - 1) * 512, far = kBase, near = kBase + 4000 * 512;
  ASSERT_EQ(memtrace_set_category(newest, static_cast<int>(format::Category::kActivation)), 0);
  ASSERT_EQ(memtrace_set_category(far, static_cast<int>(format::Category::kParameter)), 0);
  ASSERT_EQ(memtrace_set_owner_module(near, "model.transformer.h.0"), 0);
  ASSERT_EQ(memtrace_set_owner_module(far, "model.transformer.h.0.attn"), 0);
  for (uint64_t i = 0; i < kCount; ++i) release(kBase + i * 512);
  ASSERT_EQ(memtrace_close(), 0);

  struct Told : Recorded {
    void onCategory(uint64_t address, format::Category category) {
      categories.emplace_back(address, category);
    }
    void onOwnerModule(uint64_t address, uint32_t module) { owners.emplace_back(address, module); }
    std::vector<std::pair<uint64_t, format::Category>> categories;
    std::vector<std::pair<uint64_t, uint32_t>> owners;
  } told;
  reader::TraceReader trace(path);
  trace.read(told);
  EXPECT_EQ(told.categories,
            (std::vector<std::pair<uint64_t, format::Category>>{
                {newest, format::Category::kActivation}, {far, format::Category::kParameter}}));
  ASSERT_EQ(told.owners.size(), 2u);
  EXPECT_EQ(told.owners[0].first, near);
  EXPECT_EQ(trace.tables().string(told.owners[0].second), "model.transformer.h.0");
  EXPECT_EQ(told.owners[1].first, far);
  EXPECT_EQ(trace.tables().string(told.owners[1].second), "model.transformer.h.0.attn");

  // The forms written, found in the file's bytes (its chunks are plain): the far allocation's
  // category by its address, the newest's not (k = 1 instead), the longer path not whole.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto longForm = [](uint64_t address, format::Category category) {
    std::string record(1, static_cast<char>(format::RecordType::kCategory));
    uint8_t varint[10];
    record.append(reinterpret_cast<const char*>(varint),
                  codec::putVarint(varint, address) - varint);
    return record + static_cast<char>(category);
  };
  EXPECT_NE(bytes.find(longForm(far, format::Category::kParameter)), std::string::npos);
  EXPECT_EQ(bytes.find(longForm(newest, format::Category::kActivation)), std::string::npos);
  std::string short_form{
      static_cast<char>(format::RecordType::kRecentCategory),
      static_cast<char>(1 << 3 | static_cast<int>(format::Category::kActivation))};
  EXPECT_NE(bytes.find(short_form), std::string::npos);
  EXPECT_NE(bytes.find("model.transformer.h.0"), std::string::npos);
  EXPECT_EQ(bytes.find("model.transformer.h.0.attn"), std::string::npos);
  std::remove(path.c_str());
}

// Note [Events in fewer bytes] (version 11): a free names its allocation by its place in the
// event tables' ring, found from the live table's number for it (no search), however far back it
// is; version 10 wrote the address of any free of none of the last 7. 64 allocations 1 GiB apart
// freed oldest first: each free's place is 64 down to 1 (one byte), where its address delta
// (1 GiB, 4 bytes) was. Bytes are taken as the difference between two files that differ only by
// the frees, so each free's share is its type byte, its time (0-2 units in the type byte, else
// 1-2 bytes: the clock's, up to about 16 ms) and its place: at most 4, against at least 6
// in version 10's layout (a type byte, a time byte, 4 of address).
TEST(Recorder, FreesNameTheirAllocationByItsPlaceInTheRing) {
  constexpr uint64_t kBase = 0x7f4000000000, kApart = uint64_t{1} << 30, kCount = 64;
  // The same allocations, then their frees in one file only (they are freed after the other
  // file closed, so that neither file begins with a snapshot of them).
  auto record = [&](const std::string& path, bool frees) {
    ASSERT_EQ(memtrace_start(path.c_str()), 0);
    for (uint64_t i = 0; i < kCount; ++i) alloc(kBase + i * kApart, 4096);
    if (frees)
      for (uint64_t i = 0; i < kCount; ++i) release(kBase + i * kApart);
    ASSERT_EQ(memtrace_close(), 0);
    if (!frees)
      for (uint64_t i = 0; i < kCount; ++i) release(kBase + i * kApart);
  };
  std::string without = temporaryPath("ring-places-0.bin"), with = temporaryPath("ring-places.bin");
  record(without, false);
  record(with, true);
  Recorded recorded;
  reader::TraceReader trace(with);
  trace.read(recorded);
  ASSERT_EQ(trace.version(), format::kVersion);
  ASSERT_EQ(recorded.events.size(), 2 * kCount);
  for (uint64_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(recorded.events[i].kind, reader::EventKind::kAlloc);
    EXPECT_EQ(recorded.events[kCount + i].kind, reader::EventKind::kFree);
    EXPECT_EQ(recorded.events[kCount + i].address, kBase + i * kApart) << "free " << i;
  }
  auto fileSize = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    return static_cast<uint64_t>(in.tellg());
  };
  uint64_t free_bytes = fileSize(with) - fileSize(without);
  EXPECT_LE(free_bytes, 4 * kCount) << "the 64 frees took " << free_bytes << " bytes";
  std::remove(without.c_str());
  std::remove(with.c_str());
}

// Note [Allocations named by the blocks before them] in records.h: blocks far apart (a delta of 4
// bytes each as version 11 wrote them) allocated again after their frees, in another order, and
// a block split after each: every such allocation names a recent free or a recent allocation's end
// in one byte of address field and writes no size (a freed block's, or a size in its slot).
TEST(Recorder, AllocationsNameTheBlocksBeforeThem) {
  constexpr uint64_t kBase = 0x7f4000000000, kApart = uint64_t{1} << 30, kCount = 16;
  auto record = [&](const std::string& path, bool again) {
    ASSERT_EQ(memtrace_start(path.c_str()), 0);
    for (uint64_t i = 0; i < kCount; ++i) alloc(kBase + i * kApart, 4096);
    for (uint64_t i = 0; i < kCount; ++i) release(kBase + i * kApart);
    if (again) {
      for (uint64_t i = 0; i < kCount; ++i) {
        uint64_t block = kBase + ((i * 7) % kCount) * kApart;  // another order: k from 1 to 16
        alloc(block, 4096);
        alloc(block + 4096, 4096);  // the rest of the block, at the allocation's end
      }
    }
    ASSERT_EQ(memtrace_close(), 0);
    if (again)
      for (uint64_t i = 0; i < kCount; ++i) {
        release(kBase + i * kApart);
        release(kBase + i * kApart + 4096);
      }
  };
  std::string without = temporaryPath("blocks-0.bin"), with = temporaryPath("blocks.bin");
  record(without, false);
  record(with, true);
  Recorded recorded;
  reader::TraceReader trace(with);
  trace.read(recorded);
  ASSERT_EQ(trace.version(), format::kVersion);
  ASSERT_EQ(recorded.events.size(), 4 * kCount);
  for (uint64_t i = 0; i < kCount; ++i) {
    uint64_t block = kBase + ((i * 7) % kCount) * kApart;
    const reader::Event& again = recorded.events[2 * kCount + 2 * i];
    const reader::Event& rest = recorded.events[2 * kCount + 2 * i + 1];
    EXPECT_EQ(again.kind, reader::EventKind::kAlloc);
    EXPECT_EQ(again.address, block) << "allocation " << i;
    EXPECT_EQ(again.size, 4096u) << "allocation " << i;
    EXPECT_EQ(rest.address, block + 4096) << "allocation " << i;
    EXPECT_EQ(rest.size, 4096u) << "allocation " << i;
  }
  auto fileSize = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    return static_cast<uint64_t>(in.tellg());
  };
  // Each event: its type byte, one byte of address field, a time field where more than 2 us
  // passed (one byte here, and not always); 12 bytes more if the file closed a chunk among them.
  // Version 11 wrote each block allocated again (1 GiB from the one before) with a 4-byte delta:
  // 16 x 5 + 16 x 2 = 112 bytes at the least.
  uint64_t bytes = fileSize(with) - fileSize(without);
  EXPECT_LE(bytes, 3 * 2 * kCount + 12) << "the 32 allocations took " << bytes << " bytes";
  std::remove(without.c_str());
  std::remove(with.c_str());
}

__attribute__((noinline)) void allocateDeep(int depth, uint64_t where) {
  if (depth == 0) {
    alloc(where, 64);
    asm volatile("");  // not a tail call: this frame stays on the stack
    return;
  }
  allocateDeep(depth - 1, where);
  asm volatile("");
}

TEST(Recorder, NativeStacksShareTheirCommonFrames) {
  setenv("MEMTRACE_STACKS", "native", 1);
  std::string path = temporaryPath("native.bin");
  ASSERT_EQ(memtrace_start(path.c_str()), 0);
  // One call site: the stacks differ only in their innermost frames.
  // (A volatile count keeps the compiler from unrolling the loop into three call sites.)
  const int depths[] = {10, 10, 3};
  volatile int count = 3;
  for (int i = 0; i < count; ++i) allocateDeep(depths[i], 0x700000 + 0x100 * i);
  for (uint64_t where : {0x700000, 0x700100, 0x700200}) release(where);
  ASSERT_EQ(memtrace_close(), 0);
  unsetenv("MEMTRACE_STACKS");

  reader::Tables tables;
  Recorded recorded = readBack(path, &tables);
  ASSERT_EQ(recorded.events.size(), 6u);
  uint32_t first = recorded.events[0].native_stack;
  EXPECT_GT(first, 0u);
  EXPECT_EQ(recorded.events[1].native_stack, first);
  uint32_t third = recorded.events[2].native_stack;
  EXPECT_NE(third, first);
  auto depth = [&](uint32_t node) {
    int frames = 0;
    for (; node; node = tables.native_stacks[node].parent) ++frames;
    return frames;
  };
  EXPECT_EQ(depth(first) - depth(third), 7);
  // The shorter stack shares all its frames with the longer one but its innermost (the
  // return from alloc() into allocateDeep(0) hangs off a different parent): one new node.
  EXPECT_EQ(tables.native_stacks.size() - 1, size_t(depth(first)) + 1);
  // Every instruction pointer lies in a recorded loaded object.
  ASSERT_GT(tables.loaded_objects.size(), 1u);
  for (size_t node = 1; node < tables.native_stacks.size(); ++node) {
    uint64_t ip = tables.native_stacks[node].ip;
    bool covered = false;
    for (size_t m = 1; m < tables.loaded_objects.size() && !covered; ++m)
      for (auto [start, size] : tables.loaded_objects[m].segments)
        covered |= ip >= start && ip < start + size;
    EXPECT_TRUE(covered) << std::hex << ip;
  }
  std::remove(path.c_str());
}

bool deviceFlag(const void* context, int) {
  return *static_cast<const bool*>(context);
}

// Note [Tensors made while the tracker attaches] (allocator/torch_allocator.cpp): what
// PyTorch's snapshot holds is recorded once, never over what the recorder knows, and not at all
// while the device's check says it changed.
TEST(Recorder, HeldAllocationsAreRecordedOnceAndOnlyWhileTheirDeviceIsUnchanged) {
  std::string path = temporaryPath("held.bin");
  ASSERT_EQ(memtrace_start(path.c_str()), 0) << memtrace_last_error();
  uint64_t live_before = memtrace_current_bytes(1);
  uint64_t reserved_before = memtrace_reserved_bytes(1);
  bool unchanged = false;
  HeldCheck check{deviceFlag, &unchanged};
  const EventSource torch{format::Api::kTorchAllocator, format::Level::kTensor, 1, 0, nullptr};
  const SegmentChange segment{format::SegmentAction::kAlloc, 1, 0x7e0000000000, 2 << 20, 0, 0};
  alloc(0x7e0000001000, 512, 1);  // a tensor the tracker recorded
  {
    RecursionGuard guard;
    EXPECT_EQ(recordHeldSegment(guard, segment, check), HeldOutcome::kStale);
    EXPECT_EQ(recordHeldAlloc(guard, torch, address(0x7e0000000000), 4096, check),
              HeldOutcome::kStale);
    EXPECT_EQ(memtrace_current_bytes(1), live_before + 512);
    EXPECT_EQ(memtrace_reserved_bytes(1), reserved_before);
    unchanged = true;
    EXPECT_EQ(recordHeldSegment(guard, segment, check), HeldOutcome::kRecorded);
    EXPECT_EQ(recordHeldSegment(guard, segment, check), HeldOutcome::kKnown);
    EXPECT_EQ(recordHeldAlloc(guard, torch, address(0x7e0000001000), 512, check),
              HeldOutcome::kKnown);
    EXPECT_EQ(recordHeldAlloc(guard, torch, address(0x7e0000000000), 4096, check),
              HeldOutcome::kRecorded);
    EXPECT_EQ(recordHeldAlloc(guard, torch, address(0x7e0000000000), 4096, check),
              HeldOutcome::kKnown);
  }
  EXPECT_EQ(memtrace_current_bytes(1), live_before + 512 + 4096);
  EXPECT_EQ(memtrace_reserved_bytes(1), reserved_before + (2 << 20));
  release(0x7e0000000000);
  release(0x7e0000001000);
  {
    RecursionGuard guard;
    recordSegment(guard,
                  SegmentChange{format::SegmentAction::kFree, 1, 0x7e0000000000, 2 << 20, 0, 0});
  }
  EXPECT_EQ(memtrace_current_bytes(1), live_before);
  EXPECT_EQ(memtrace_reserved_bytes(1), reserved_before);
  ASSERT_EQ(memtrace_close(), 0);

  Recorded recorded = readBack(path);
  ASSERT_EQ(recorded.events.size(), 4u);
  const reader::Event& held = recorded.events[1];
  EXPECT_EQ(held.kind, reader::EventKind::kAlloc);
  EXPECT_EQ(held.address, 0x7e0000000000u);
  EXPECT_EQ(held.size, 4096u);
  // No thread's stacks are its: none, and no thread.
  EXPECT_EQ(held.python_stack, 0u);
  EXPECT_EQ(held.native_stack, 0u);
  EXPECT_EQ(recorded.threads[1], 0);
  EXPECT_NE(recorded.threads[0], 0);
  EXPECT_EQ(recorded.apis[1], format::Api::kTorchAllocator);
  std::remove(path.c_str());
}

uint64_t trackerEvents(int device) {
  uint64_t counts[format::kMaxDevices];
  trackerEventCounts(counts);
  return counts[device];
}

// Note [One call from PyTorch's tracker] (recorder.cpp): the tracker's calls record what the
// hooks' recordAlloc and recordFree record with the tracker's source, and each that changes a
// device's memory moves that device's count (Note [Tensors made while the tracker attaches]),
// a free of an address the recorder does not know included; what is read from PyTorch's
// snapshot does not move it (its check would then never see its device unchanged).
TEST(Recorder, TrackerCallsAreTheHooksEventsAndCountOnTheirDevice) {
  std::string path = temporaryPath("tracker.bin");
  ASSERT_EQ(memtrace_start(path.c_str()), 0) << memtrace_last_error();
  uint64_t on_one = trackerEvents(1), on_two = trackerEvents(2);
  const void* caller = reinterpret_cast<const void*>(0x1234);
  recordTrackerAlloc(1, 0x7, 0x7c0000000000, 1024, caller);
  EXPECT_EQ(trackerEvents(1), on_one + 1);
  recordTrackerFree(1, 0x7, 0x7c0000004000, caller);  // never allocated: no event, but counted
  EXPECT_EQ(trackerEvents(1), on_one + 2);
  recordTrackerFree(1, 0x7, 0x7c0000000000, caller);
  EXPECT_EQ(trackerEvents(1), on_one + 3);
  {
    RecursionGuard guard;
    recordSegment(guard,
                  SegmentChange{format::SegmentAction::kAlloc, 1, 0x7c0000000000, 2 << 20, 0, 0});
    EXPECT_EQ(trackerEvents(1), on_one + 4);
    bool unchanged = true;
    const EventSource torch{format::Api::kTorchAllocator, format::Level::kTensor, 1, 0, nullptr};
    EXPECT_EQ(recordHeldAlloc(guard, torch, address(0x7c0000001000), 512,
                              HeldCheck{deviceFlag, &unchanged}),
              HeldOutcome::kRecorded);
    EXPECT_EQ(trackerEvents(1), on_one + 4) << "a held allocation is no tracker call";
    recordFree(guard, torch, address(0x7c0000001000));
    recordSegment(guard,
                  SegmentChange{format::SegmentAction::kFree, 1, 0x7c0000000000, 2 << 20, 0, 0});
  }
  EXPECT_EQ(trackerEvents(1), on_one + 5);
  EXPECT_EQ(trackerEvents(2), on_two) << "another device's count moved";
  // A device past kMaxDevices is recorded and never counted.
  recordTrackerAlloc(format::kMaxDevices, 0x7, 0x7c0000002000, 64, caller);
  recordTrackerFree(format::kMaxDevices, 0x7, 0x7c0000002000, caller);
  ASSERT_EQ(memtrace_close(), 0);

  Recorded recorded = readBack(path);
  ASSERT_EQ(recorded.events.size(), 6u);
  EXPECT_EQ(recorded.events[0].kind, reader::EventKind::kAlloc);
  EXPECT_EQ(recorded.events[0].address, 0x7c0000000000u);
  EXPECT_EQ(recorded.events[0].size, 1024u);
  EXPECT_EQ(recorded.streams[0], 0x7u);
  EXPECT_EQ(recorded.levels[0], format::Level::kTensor);
  EXPECT_EQ(recorded.devices[0], 1);
  EXPECT_EQ(recorded.apis[0], format::Api::kTorchAllocator);
  EXPECT_NE(recorded.threads[0], 0);
  EXPECT_EQ(recorded.events[1].kind, reader::EventKind::kFree);
  EXPECT_EQ(recorded.events[1].address, 0x7c0000000000u);
  EXPECT_EQ(recorded.devices[1], 1);
  EXPECT_EQ(recorded.events[4].kind, reader::EventKind::kAlloc);
  EXPECT_EQ(recorded.devices[4], -1);  // the file names no device past kMaxDevices
  EXPECT_EQ(recorded.events[5].kind, reader::EventKind::kFree);
  std::remove(path.c_str());
}

// The writer's bytes for one event stream that takes every form of Note [Allocations named by the
// blocks before them] and Note [Events in fewer bytes] (a freed block again, a freed address with
// another size, a recent allocation's end, an address delta, aligned or not; a size from the table,
// in 512-byte units, odd, past 2^63; a free by its number, by a search, of an address never
// allocated), over the rings' and the indexes' wrap (200,000 events, 4,096 of each; no stacks:
// the reader refuses a stack the file does not define, and the lookups do not touch them): the
// file's bytes are the version 12 writer's at 5d4c255, as a hash. A change to how the writer finds
// what it names (docs/performance.md, Version 12's record path) must leave every byte as it was;
// a change of the format changes this figure, knowingly. The events read back as written.
TEST(RecordWriter, WritesTheSameBytesForTheSameEvents) {
  std::string path = temporaryPath("writer-bytes.bin");
  struct Block {
    uint64_t address, size;
    uint32_t number;
  };
  std::vector<Block> written;  // every event in order (a free's size 0)
  {
    TraceFile file;
    const char* error = "";
    ASSERT_EQ(file.open(path.c_str(), &error), TraceFile::OpenResult::kOpened) << error;
    auto writer = std::make_unique<RecordWriter>(file);
    constexpr uint64_t kStart = 1'000'000'000;
    writer->beginFile(kStart, 1000);
    const char command[] = "writer-bytes";
    ProcessInfoFields info{
        1,  0,  0,    kStart, command, sizeof(command), "test", "host", format::StackMode::kAll,
        64, 64, false};
    ASSERT_TRUE(writer->writeProcessInfo(info));
    ASSERT_TRUE(writer->setContext(
        EventContext{7, 0, 0, format::Api::kTorchAllocator, format::Level::kTensor}));
    uint64_t state = 0x2545f4914f6cdd1dull;
    auto next = [&state] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return state >> 33;
    };
    const uint64_t common[] = {256, 512, 1024, 4096, 1536, 1u << 20, 8u << 20};
    constexpr uint64_t kBase = 0x7f0000000000;
    std::vector<Block> live, freed;
    uint64_t time = kStart;
    for (int i = 0; i < 200'000; ++i) {
      time += next() % 8 == 0 ? next() % 200'000 : next() % 3'000;
      if (live.empty() || (live.size() < 3'000 && next() % 2 == 0)) {
        uint64_t form = next() % 16, size;
        if (form < 8)
          size = common[next() % std::size(common)];
        else if (form < 12)
          size = (1 + next() % 4'000) * 512;
        else if (form < 15)
          size = 1 + next() % 100'000;
        else
          size = next() % 64 == 0 ? (uint64_t{1} << 63) + next() % 1'000 : 512 * (1 + next() % 8);
        uint64_t where = next() % 16, address;
        if (where < 6 && !freed.empty()) {
          const Block& block =
              freed[freed.size() - 1 - next() % std::min<size_t>(freed.size(), 6'000)];
          address = block.address;
          if (where < 4) size = block.size;
        } else if (where < 10 && !live.empty()) {
          const Block& block = live[live.size() - 1 - next() % std::min<size_t>(live.size(), 64)];
          address = format::blockEnd(block.address, block.size);
        } else if (where < 15) {
          address = kBase + (next() % (uint64_t{1} << 30)) * 256;
        } else {
          address = kBase + next() % (uint64_t{1} << 38);  // not 256-aligned, mostly
        }
        Block block{address, size, writer->allocationNumber()};
        ASSERT_TRUE(writer->writeAlloc(time, address, size, 0, 0));
        live.push_back(block);
        written.push_back(block);
      } else {
        size_t at = next() % 2 == 0 ? live.size() - 1 - next() % std::min<size_t>(live.size(), 8)
                                    : next() % live.size();
        Block block = live[at];
        live[at] = live.back();
        live.pop_back();
        uint64_t number = next() % 4 == 0 ? RecordWriter::kNoNumber : block.number;
        if (next() % 64 == 0) block.address += 256 * (1 + next() % 4);  // never allocated there
        ASSERT_TRUE(writer->writeFree(time, block.address, 0, 0, number));
        freed.push_back(block);
        written.push_back(Block{block.address, 0, 0});
      }
    }
    ASSERT_TRUE(file.close());
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
  for (char byte : bytes) hash = (hash ^ static_cast<uint8_t>(byte)) * 0x100000001b3ull;
  Recorded recorded = readBack(path);
  std::remove(path.c_str());
  ASSERT_EQ(recorded.events.size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    ASSERT_EQ(recorded.events[i].address, written[i].address) << "event " << i;
    ASSERT_EQ(recorded.events[i].size, written[i].size) << "event " << i;
  }
  EXPECT_EQ(bytes.size(), 985'520u);
  EXPECT_EQ(hash, 0x8df05410386ed8b9ull) << std::hex << hash;
}

}  // namespace
}  // namespace memtrace::testing
