// The test hooks of the simulated GPU (simgpu_testing.h).
//
// Note [Test hooks of the simulated GPU]
// memtrace's C-level tests (tests/preload) run their programs on the simulated GPU's libcuda.so.1
// and libcudart.so.13, the fake CUDA the product ships, rather than on a second one of their own.
// What they check beyond CUDA's own answers is how memtrace treated the card: that it allocated
// in relaxed capture mode, read the device's memory in relaxed mode, trimmed a pool once. CUDA
// has no query for these, so the card counts them here and simgpu_testing.h reads them; the
// counting changes nothing the card answers. The other things those tests need are options the
// simulated GPU has anyway: MEMTRACE_GPU_COUNT, MEMTRACE_GPU_MEMORY, MEMTRACE_GPU_CONTEXT_BYTES
// (what a context takes), MEMTRACE_GPU_RUNTIME_DRIVER (how the runtime reaches the driver:
// Note [The runtime over the driver] in simulator/runtime/memory.cpp), and a cuMemAlloc of a
// CUDA newer than any (cuGetProcAddress at version 99000: Note [A variant from the future] in
// simulator/driver/driver.cpp).
// One hook changes when the card answers, never what: MEMTRACE_GPU_TEST_MEET=N makes the first
// stream-capture query (cudaStreamIsCapturing) made on each of N devices wait until all N were
// made, 10 seconds at most (then each goes on, and simgpu_testing_meeting says it failed).
// PyTorch's caching allocator asks that query under a device's allocator lock just before the
// cudaMalloc of a segment (cudaMallocMaybeCapturing in c10/cuda/CUDACachingAllocator.cpp), so
// threads making their first tensors on N devices then all hold their devices' locks at once
// when the first of them reaches cudaMalloc: the interleaving of Note [Tensors made while the
// tracker attaches] in allocator/torch_allocator.cpp, made certain rather than left to chance.
#include "simulator/core/testing.h"

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "simulator/core/device.h"
#include "simulator/core/simgpu_testing.h"

namespace simgpu::testing {
namespace {
thread_local int t_mode_at_last_alloc = -1;
thread_local int t_mode_at_last_memory_info = -1;
std::atomic<int> g_pool_trims{0};
}  // namespace

void noteStreamOrderedAllocation() {
  t_mode_at_last_alloc = captureMode();
}

void noteMemoryInfo() {
  t_mode_at_last_memory_info = captureMode();
}

void notePoolTrim() {
  g_pool_trims.fetch_add(1, std::memory_order_relaxed);
}

namespace {
struct Meeting {
  std::mutex mutex;
  std::condition_variable all_here;
  uint64_t devices_here = 0;  // a bit per device (the first 64)
  int here = 0;
  int outcome = -1;  // -1 not asked, 0 timed out, 1 met
};
Meeting g_meeting;

int meetingSize() {
  static const int size = [] {
    const char* text = getenv("MEMTRACE_GPU_TEST_MEET");
    int value = text && *text ? atoi(text) : 0;
    return value >= 2 && value <= 64 ? value : 0;
  }();
  return size;
}
}  // namespace

void meetBeforeCaptureQuery(int device) {
  int size = meetingSize();
  if (size == 0 || device < 0 || device >= 64) return;
  std::unique_lock<std::mutex> lock(g_meeting.mutex);
  uint64_t bit = uint64_t{1} << device;
  if (g_meeting.outcome != -1 && g_meeting.here >= size) return;  // met (or gave up) already
  if (g_meeting.devices_here & bit) return;  // only a device's first query waits
  g_meeting.devices_here |= bit;
  if (++g_meeting.here == size) {
    g_meeting.outcome = 1;
    g_meeting.all_here.notify_all();
    return;
  }
  if (!g_meeting.all_here.wait_for(lock, std::chrono::seconds(10),
                                   [] { return g_meeting.outcome == 1; })) {
    g_meeting.outcome = 0;
    g_meeting.here = size;  // nobody waits any more
  }
}

}  // namespace simgpu::testing

SIMGPU_EXPORT int simgpu_testing_capture_mode_at_last_alloc(void) {
  return simgpu::testing::t_mode_at_last_alloc;
}

SIMGPU_EXPORT int simgpu_testing_capture_mode_at_last_memory_info(void) {
  return simgpu::testing::t_mode_at_last_memory_info;
}

SIMGPU_EXPORT int simgpu_testing_meeting(void) {
  std::lock_guard<std::mutex> lock(simgpu::testing::g_meeting.mutex);
  return simgpu::testing::g_meeting.outcome;
}

SIMGPU_EXPORT int simgpu_testing_pool_trims(void) {
  return simgpu::testing::g_pool_trims.load(std::memory_order_relaxed);
}
