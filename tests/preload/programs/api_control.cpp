// Without LD_PRELOAD: loads libmemtrace.so with dlopen, as PyTorch's pluggable allocator
// does, and drives it through the C API and the pluggable entry points. Prints what the
// test checks: the library's counters and what the simulated GPU saw (simgpu_testing.h).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "simulator/core/simgpu_api.h"
#include "simulator/core/simgpu_testing.h"
#include "tracer/recorder/memtrace.h"

// The release threshold of the device's default pool, as memtrace left it.
static uint64_t releaseThreshold(int device) {
  cudaMemPool_t pool = nullptr;
  uint64_t threshold = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) != cudaSuccess)
    return 0;
  return threshold;
}

#define LOAD(name) auto name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name))

int main(int argc, char** argv) {
  if (argc < 3) return 64;
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 65;
  }
  LOAD(memtrace_alloc);
  LOAD(memtrace_free);
  LOAD(memtrace_start);
  LOAD(memtrace_stop);
  LOAD(memtrace_annotate);
  LOAD(memtrace_phase_begin);
  LOAD(memtrace_phase_end);
  LOAD(memtrace_close);
  LOAD(memtrace_current_bytes);
  LOAD(memtrace_peak_bytes);
  LOAD(memtrace_reset_peak);
  LOAD(memtrace_last_error);
  LOAD(memtrace_empty_cache);
  // The pluggable allocator uses the CUDA runtime the process has loaded (PyTorch's); this
  // program links it, and allocates on a stream of its own, as PyTorch's current stream is.
  cudaStream_t created = nullptr;
  if (cudaStreamCreate(&created) != cudaSuccess) return 66;
  void* stream = created;

  // Before tracing starts: counted, and written as untraced when the file opens.
  void* weights = memtrace_alloc(10000, 0, stream);
  void* temporary = memtrace_alloc(30000, 0, stream);
  memtrace_free(temporary, 30000, 0, stream);
  std::printf("annotate_before_start %d %s\n", memtrace_annotate("too early"),
              memtrace_last_error());

  if (memtrace_start(argv[2]) != 0) {
    std::printf("start failed: %s\n", memtrace_last_error());
    return 1;
  }
  memtrace_phase_begin("forward");
  void* x = memtrace_alloc(1000, 0, stream);
  void* y = memtrace_alloc(2000, 1, stream);  // device 1
  memtrace_free(x, 1000, 0, stream);
  memtrace_phase_end();
  memtrace_annotate("after forward");
  memtrace_stop();
  void* z = memtrace_alloc(500, 0, stream);  // while stopped: untraced
  memtrace_free(z, 500, 0, stream);
  std::printf("zero_size %p\n", memtrace_alloc(0, 0, stream));
  std::printf(
      "current %llu peak %llu current0 %llu peak1 %llu\n",
      (unsigned long long)memtrace_current_bytes(-1), (unsigned long long)memtrace_peak_bytes(-1),
      (unsigned long long)memtrace_current_bytes(0), (unsigned long long)memtrace_peak_bytes(1));
  memtrace_reset_peak(-1);
  std::printf("peak_after_reset %llu\n", (unsigned long long)memtrace_peak_bytes(-1));
  std::printf("threshold0 %llu threshold1 %llu capture_mode %d\n",
              (unsigned long long)releaseThreshold(0), (unsigned long long)releaseThreshold(1),
              simgpu_testing_capture_mode_at_last_alloc());
  memtrace_empty_cache(0);
  std::printf("trims %d\n", simgpu_testing_pool_trims());
  std::printf("runtime_live %llu\n",
              (unsigned long long)(simgpu_used_bytes(0) + simgpu_used_bytes(1)));
  memtrace_free(y, 2000, 1, stream);
  memtrace_free(weights, 10000, 0, stream);
  std::printf("close %d\n", memtrace_close());
  return 0;
}
