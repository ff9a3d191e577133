// Virtual memory management (Note [Virtual memory management] in tracer/format/records.h)
// and device memory readings (Note [Device memory readings]): what happens to physical
// memory after cuMemCreate made it, and what the driver says the device holds.
#include <atomic>

#include "tracer/recorder/recorder.h"
#include "tracer/recorder/recorder_state.h"

namespace memtrace {

using namespace detail;

namespace {

std::atomic<DeviceMemoryReader> g_device_memory_reader{nullptr};

// The physical memory at `handle`, or nullptr when the recorder did not see it made.
LiveBlock* physicalMemory(uint64_t handle) {
  LiveBlock* block = g_recorder.live.find(handle);
  return block && block->api == format::Api::kCuMemCreate ? block : nullptr;
}

bool unused(const LiveBlock& block) {
  return block.references == 0 && block.mappings == 0;
}

// Writes a record that changes no live bytes (the recorder's lock held), into the open file or the
// one the recorder wants open.
template <typename Write>
void writeRecord(Write&& write) {
  if (!ensureFileOpen()) return;
  uint64_t time = monotonicNow();
  if (!write(time))
    failWrite();
  else
    afterRecord(time);
}

// Physical memory freed by an unmap: found under the recorder's lock, recorded after it (each free
// captures its own stacks before taking the lock again). The driver cannot hand the handle out
// again before the real call, which comes after.
constexpr int kFreesPerPass = 64;

}  // namespace

void recordPhysicalRetain(const RecursionGuard&, uint64_t handle) {
  ensureRecorderInitialized();
  RecorderLock lock;
  LiveBlock* block = physicalMemory(handle);
  if (block && block->references != UINT16_MAX) ++block->references;
}

void recordPhysicalRelease(const RecursionGuard& guard, const EventSource& source,
                           uint64_t handle) {
  ensureRecorderInitialized();
  {
    RecorderLock lock;
    LiveBlock* block = physicalMemory(handle);
    if (!block || block->references == 0) return;
    if (block->references != UINT16_MAX) --block->references;
    if (!unused(*block)) return;
  }
  recordFree(guard, source, reinterpret_cast<const void*>(handle));
}

void recordMemoryMap(const RecursionGuard&, uintptr_t address, uint64_t size, uint64_t offset,
                     uint64_t handle) {
  ensureRecorderInitialized();
  RecorderLock lock;
  if (LiveBlock* block = physicalMemory(handle)) {
    bool inserted = false;
    if (g_recorder.mappings.insert(address, Mapping{size, handle}, &inserted) && inserted &&
        block->mappings != UINT16_MAX)
      ++block->mappings;
  }
  writeRecord([&](uint64_t time) {
    return g_recorder.writer.writeMemoryMap(time, address, size, offset, handle);
  });
}

void recordMemoryUnmap(const RecursionGuard& guard, const EventSource& source, uintptr_t address,
                       uint64_t size) {
  ensureRecorderInitialized();
  {
    RecorderLock lock;
    writeRecord([&](uint64_t time) {
      return g_recorder.writer.writeAddressRange(time, format::RecordType::kMemoryUnmap, address,
                                                 size);
    });
  }
  // cuMemUnmap takes whole mappings, end to end: walk them from `address`.
  uintptr_t at = address;
  uintptr_t end = address + size;
  while (at < end) {
    uint64_t frees[kFreesPerPass];
    int count = 0;
    {
      RecorderLock lock;
      while (at < end && count < kFreesPerPass) {
        Mapping mapping;
        if (!g_recorder.mappings.erase(at, &mapping) || mapping.size == 0) {
          at = end;
          break;
        }
        at += mapping.size;
        LiveBlock* block = physicalMemory(mapping.handle);
        if (!block) continue;
        if (block->mappings != UINT16_MAX) --block->mappings;
        if (unused(*block)) frees[count++] = mapping.handle;
      }
    }
    for (int i = 0; i < count; ++i)
      recordFree(guard, source, reinterpret_cast<const void*>(frees[i]));
  }
}

void recordAddressRange(const RecursionGuard&, bool reserved, uintptr_t address, uint64_t size) {
  ensureRecorderInitialized();
  RecorderLock lock;
  writeRecord([&](uint64_t time) {
    return g_recorder.writer.writeAddressRange(
        time, reserved ? format::RecordType::kAddressReserve : format::RecordType::kAddressFree,
        address, size);
  });
}

void setDeviceMemoryReader(DeviceMemoryReader reader) {
  g_device_memory_reader.store(reader, std::memory_order_release);
}

void recordDeviceMemory() {
  DeviceMemoryReader reader = g_device_memory_reader.load(std::memory_order_acquire);
  if (!reader) return;
  {
    // Only a process with a file of its own events reads: a forked child that allocated
    // nothing must never call the driver it inherited (CUDA is not fork-safe: its locks may
    // have been held by a thread the child does not have), not even at exit.
    RecorderLock lock;
    if (!g_recorder.file.isOpen()) return;
  }
  int device = -1;
  uint64_t free_bytes = 0, total_bytes = 0;
  // The driver call, before the lock (Note [Lock order]).
  if (!reader(&device, &free_bytes, &total_bytes)) return;
  if (device < 0 || device >= kMaxDevices || free_bytes > total_bytes) return;
  RecorderLock lock;
  if (!g_recorder.file.isOpen()) return;  // a reading alone opens no file
  uint64_t time = monotonicNow();
  g_recorder.device_memory_read_ns[device] = time;
  g_recorder.device_memory_file[device] = g_recorder.writer.generation();
  if (!g_recorder.writer.writeDeviceMemory(time, device, free_bytes, total_bytes))
    failWrite();
  else
    afterRecord(time);
}

}  // namespace memtrace
