// The loop the recording benchmarks time, as a library so that C++ and Python drive the
// same code: allocation+free pairs through the CUDA entry points as a program reaches them
// (so under LD_PRELOAD, through memtrace's hooks), or straight to the real functions of
// the CUDA runtime the process loaded (the untraced call, in the same run).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <time.h>

#include <cstdint>

namespace {

uint64_t now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

using DriverMalloc = CUresult (*)(CUdeviceptr*, size_t);
using DriverFree = CUresult (*)(CUdeviceptr);

template <typename M, typename F>
uint64_t loop(M allocate, F release, long pairs, size_t size) {
  void* keep[4] = {};
  uint64_t start = now();
  for (long i = 0; i < pairs; ++i) {
    // Four live at a time, so that frees are not always of the last allocation.
    void*& slot = keep[i & 3];
    if (slot) release(slot);
    allocate(&slot, size + (i & 3) * 256);
  }
  for (void* pointer : keep)
    if (pointer) release(pointer);
  return now() - start;
}

}  // namespace

extern "C" {

// ns for `pairs` allocation+free pairs through the hooks (the global scope).
__attribute__((visibility("default"), noinline)) uint64_t bench_hooked(long pairs, long size) {
  return loop(cudaMalloc, cudaFree, pairs, static_cast<size_t>(size));
}

// The same loop calling the allocator underneath, bypassing any interposition: the simulated
// driver's own cuMemAlloc_v2 and cuMemFree_v2, asked of its cuGetProcAddress under a name
// memtrace does not hook (simgpu_driver_proc_address: simulator/driver/driver.h), since a
// dlsym of cuMemAlloc_v2 or cuGetProcAddress_v2 would hand out memtrace's hook.
__attribute__((visibility("default"), noinline)) uint64_t bench_direct(long pairs, long size) {
  static DriverMalloc real_malloc = nullptr;
  static DriverFree real_free = nullptr;
  if (!real_malloc) {
    using ProcAddress = int (*)(const char*, void**, int, unsigned long long, int*);
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    auto proc_address = reinterpret_cast<ProcAddress>(dlsym(driver, "simgpu_driver_proc_address"));
    void* function = nullptr;
    proc_address("cuMemAlloc", &function, CUDA_VERSION, 0, nullptr);
    real_malloc = reinterpret_cast<DriverMalloc>(function);
    proc_address("cuMemFree", &function, CUDA_VERSION, 0, nullptr);
    real_free = reinterpret_cast<DriverFree>(function);
  }
  auto allocate = [](void** pointer, size_t bytes) {
    return real_malloc(reinterpret_cast<CUdeviceptr*>(pointer), bytes);
  };
  auto release = [](void* pointer) { return real_free(reinterpret_cast<CUdeviceptr>(pointer)); };
  return loop(allocate, release, pairs, static_cast<size_t>(size));
}

// bench_hooked from `depth` native frames down.
__attribute__((visibility("default"), noinline)) uint64_t bench_hooked_deep(int depth, long pairs,
                                                                            long size) {
  if (depth <= 0) return bench_hooked(pairs, size);
  uint64_t result = bench_hooked_deep(depth - 1, pairs, size);
  asm volatile("");  // not a tail call: each level is a frame
  return result;
}

}  // extern "C"
