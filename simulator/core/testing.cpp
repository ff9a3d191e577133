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
#include "simulator/core/testing.h"

#include <atomic>

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

}  // namespace simgpu::testing

SIMGPU_EXPORT int simgpu_testing_capture_mode_at_last_alloc(void) {
  return simgpu::testing::t_mode_at_last_alloc;
}

SIMGPU_EXPORT int simgpu_testing_capture_mode_at_last_memory_info(void) {
  return simgpu::testing::t_mode_at_last_memory_info;
}

SIMGPU_EXPORT int simgpu_testing_pool_trims(void) {
  return simgpu::testing::g_pool_trims.load(std::memory_order_relaxed);
}
