// PyTorch's pluggable allocator entry points:
//   torch.cuda.memory.CUDAPluggableAllocator("libmemtrace.so", "memtrace_alloc", "memtrace_free")
//
// As PyTorch's only allocator it sees every tensor with nothing caching in front, so it
// must be cheap: stream-ordered cudaMallocAsync / cudaFreeAsync from the device's default
// pool, whose release threshold is raised so that freed memory stays in the pool instead
// of going back to the driver at each synchronization. (Plain cudaFree would synchronize
// the device on every free.)
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "allocator/hook_support.h"
#include "allocator/real_functions.h"
#include "tracer/recorder/config.h"
#include "tracer/recorder/memtrace.h"

using memtrace::EventSource;
using memtrace::RecursionGuard;
using memtrace::format::Api;
using memtrace::format::Level;

namespace {

constexpr int kMaxPoolDevices = 64;
std::atomic<bool> g_pool_ready[kMaxPoolDevices];

void raiseReleaseThreshold(int device) {
  if (device < 0 || device >= kMaxPoolDevices ||
      g_pool_ready[device].load(std::memory_order_acquire))
    return;
  auto get_pool = MEMTRACE_CUDA(kRuntime, cudaDeviceGetDefaultMemPool);
  auto set_attribute = MEMTRACE_CUDA(kRuntime, cudaMemPoolSetAttribute);
  cudaMemPool_t pool;
  if (!get_pool || !set_attribute || get_pool(&pool, device) != cudaSuccess) return;
  uint64_t threshold =
      UINT64_MAX;  // keep everything: PyTorch's own cudaMallocAsync backend does too
  if (set_attribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess)
    g_pool_ready[device].store(true, std::memory_order_release);
}

// Allocation under CUDA graph capture: c10 switches the thread to relaxed capture mode
// around its cudaMalloc, because in the default (global) mode a capture running on any
// thread makes "unsafe" calls fail. The pluggable allocator does the same.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() : exchange_(MEMTRACE_CUDA(kRuntime, cudaThreadExchangeStreamCaptureMode)) {
    if (exchange_) exchange_(&mode_);
  }
  ~RelaxedCaptureMode() {
    if (exchange_) exchange_(&mode_);
  }

 private:
  decltype(&cudaThreadExchangeStreamCaptureMode) exchange_;
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace

extern "C" {

MEMTRACE_EXPORT void* memtrace_alloc(ssize_t size, int device, void* stream) {
  if (size <= 0) return nullptr;
  auto malloc_async = MEMTRACE_REAL(kRuntime, cudaMallocAsync);
  if (!malloc_async) {  // PyTorch reports the failed allocation
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      memtrace::warn("memtrace_alloc: no CUDA runtime (libcudart) is loaded in this process");
    return nullptr;
  }
  // The guard also covers cudaMallocAsync's own hook when the library is preloaded as well.
  RecursionGuard guard;
  raiseReleaseThreshold(device);
  void* pointer = nullptr;
  cudaError_t result;
  {
    RelaxedCaptureMode relaxed;
    result = malloc_async(&pointer, static_cast<size_t>(size), static_cast<cudaStream_t>(stream));
  }
  EventSource source{Api::kPluggable, Level::kTensor, device, memtrace::hooks::streamId(stream),
                     __builtin_return_address(0)};
  memtrace::hooks::recordAllocResult(guard, result == cudaSuccess,
                                     result == cudaErrorMemoryAllocation, source, pointer,
                                     static_cast<uint64_t>(size));
  return result == cudaSuccess ? pointer : nullptr;
}

MEMTRACE_EXPORT void memtrace_free(void* pointer, ssize_t size, int device, void* stream) {
  if (!pointer) return;
  auto free_async = MEMTRACE_REAL(kRuntime, cudaFreeAsync);
  if (!free_async) return;
  RecursionGuard guard;
  memtrace::recordFree(guard,
                       EventSource{Api::kPluggable, Level::kTensor, device,
                                   memtrace::hooks::streamId(stream), __builtin_return_address(0)},
                       pointer);
  RelaxedCaptureMode relaxed;
  free_async(pointer, static_cast<cudaStream_t>(stream));
}

MEMTRACE_EXPORT void memtrace_empty_cache(int device) {
  auto get_pool = MEMTRACE_CUDA(kRuntime, cudaDeviceGetDefaultMemPool);
  auto trim = MEMTRACE_CUDA(kRuntime, cudaMemPoolTrimTo);
  cudaMemPool_t pool;
  if (get_pool && trim && get_pool(&pool, device) == cudaSuccess) trim(pool, 0);
}

}  // extern "C"
