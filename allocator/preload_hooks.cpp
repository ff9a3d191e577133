// The CUDA allocation entry points, interposed under LD_PRELOAD. Each forwards to the real
// function (real_functions.h) and tells the recorder what happened.
//
// Note [Every hook reads the same way]
//   1. Find the real function; without one, answer as CUDA does when it is not set up.
//   2. Re-entered (Note [Recursion guard])? Call the real function and nothing else.
//   3. An allocation: call the real function, then record it if it succeeded (or record
//      the failure if it ran out of memory). A free: record it, then call the real
//      function, so the address cannot be handed out again before its free is written.
//   4. Pass the hook's own return address (MEMTRACE_CALLER): native stacks start there.
//
// Programs reach these hooks by linking the functions, and by looking them up
// (lookup_hooks.cpp: dlsym, cuGetProcAddress, cudaGetDriverEntryPoint), which is how CUDA's
// runtime itself reaches the driver since CUDA 11.4. A runtime call that reaches a driver
// hook either way is one event, the runtime's: the driver hook runs inside the runtime hook's
// RecursionGuard (Note [Recursion guard]). Physical memory and its mappings (cuMemCreate and
// kin) are in virtual_memory_hooks.cpp.
#include "allocator/hook_support.h"
#include "allocator/real_functions.h"
#include "allocator/torch_allocator.h"
#include "tracer/recorder/memtrace.h"

using memtrace::EventSource;
using memtrace::RecursionGuard;
using memtrace::format::Api;
using memtrace::format::Level;
namespace hooks = memtrace::hooks;

namespace {

// `caller` is the hook's return address (Note [Every hook reads the same way]). Stream-ordered
// allocations are each one allocation as their caller asked for it (PyTorch's cudaMallocAsync
// backend's tensors among them); a synchronous one's level is its caller's (levelOf).
EventSource runtimeSource(Api api, Level level, int device, const void* stream,
                          const void* caller) {
  return EventSource{api, level, device, hooks::streamId(stream), caller};
}

EventSource driverSource(Api api, const void* stream, const void* caller) {
  // Driver-API callers are their own allocators: each call is one allocation.
  return EventSource{api, Level::kTensor, hooks::driverDevice(), hooks::streamId(stream), caller};
}

template <typename Real>
cudaError_t mallocAsyncHook(Real real, const void* caller, void** pointer, size_t size,
                            cudaStream_t stream, auto&&... rest) {
  if (RecursionGuard::active()) return real(pointer, size, rest..., stream);
  RecursionGuard guard;
  cudaError_t result = real(pointer, size, rest..., stream);
  hooks::recordAllocResult(guard, result == cudaSuccess, result == cudaErrorMemoryAllocation,
                           runtimeSource(Api::kCudaMallocAsync, Level::kTensor,
                                         hooks::streamDevice(stream), stream, caller),
                           pointer ? *pointer : nullptr, size);
  return result;
}

template <typename Real>
cudaError_t freeAsyncHook(Real real, const void* caller, void* pointer, cudaStream_t stream) {
  if (RecursionGuard::active() || !pointer) return real(pointer, stream);
  RecursionGuard guard;
  memtrace::recordFree(
      guard, runtimeSource(Api::kCudaMallocAsync, Level::kTensor, -1, stream, caller), pointer);
  return real(pointer, stream);
}

// What a synchronous allocation's result codes mean, and where its event comes from, for
// each of the two APIs. The device is asked only after the real call, and only when the
// call is recorded: a re-entered hook calls nothing but the real function.
template <typename Result>
struct SyncApi;

template <>
struct SyncApi<cudaError_t> {
  static constexpr cudaError_t kNotInitialized = cudaErrorInitializationError;
  static constexpr cudaError_t kSuccess = cudaSuccess;
  static constexpr cudaError_t kOutOfMemory = cudaErrorMemoryAllocation;
  static EventSource source(Api api, Level level, const void* caller) {
    return runtimeSource(api, level, hooks::runtimeDevice(), nullptr, caller);
  }
};

template <>
struct SyncApi<CUresult> {
  static constexpr CUresult kNotInitialized = CUDA_ERROR_NOT_INITIALIZED;
  static constexpr CUresult kSuccess = CUDA_SUCCESS;
  static constexpr CUresult kOutOfMemory = CUDA_ERROR_OUT_OF_MEMORY;
  static EventSource source(Api api, Level level, const void* caller) {
    EventSource source = driverSource(api, nullptr, caller);
    source.level = level;
    return source;
  }
};

// cudaMalloc, cudaMallocManaged, cuMemAlloc_v2, cuMemAllocManaged: `rest` are the arguments
// after the size. PyTorch's caching allocator's segments are its tracker's to record (Note
// [PyTorch's own allocator] in tracer/format/records.h), or segment-level events without one.
template <typename Real, typename Pointer>
auto syncAllocHook(Real real, Api api, const void* caller, Pointer* pointer, size_t size,
                   auto... rest) {
  using Codes = SyncApi<decltype(real(pointer, size, rest...))>;
  if (!real) return Codes::kNotInitialized;
  if (RecursionGuard::active()) return real(pointer, size, rest...);
  RecursionGuard guard;
  hooks::Caller who = hooks::memoryCallerOf(caller);
  auto result = real(pointer, size, rest...);
  if (who == hooks::Caller::kTorchTracked) return result;
  hooks::recordAllocResult(guard, result == Codes::kSuccess, result == Codes::kOutOfMemory,
                           Codes::source(api, hooks::levelOf(who), caller),
                           pointer ? reinterpret_cast<void*>(*pointer) : nullptr, size);
  return result;
}

}  // namespace

extern "C" {

MEMTRACE_EXPORT cudaError_t cudaMalloc(void** pointer, size_t size) {
  return syncAllocHook(MEMTRACE_REAL(kRuntime, cudaMalloc), Api::kCudaMalloc, MEMTRACE_CALLER,
                       pointer, size);
}

MEMTRACE_EXPORT cudaError_t cudaFree(void* pointer) {
  auto real = MEMTRACE_REAL(kRuntime, cudaFree);
  if (!real) return cudaErrorInitializationError;
  if (RecursionGuard::active() || !pointer) return real(pointer);
  RecursionGuard guard;
  hooks::Caller who = hooks::memoryCallerOf(MEMTRACE_CALLER);
  if (who != hooks::Caller::kTorchTracked)
    memtrace::recordFree(
        guard, runtimeSource(Api::kCudaMalloc, hooks::levelOf(who), -1, nullptr, MEMTRACE_CALLER),
        pointer);
  return real(pointer);
}

MEMTRACE_EXPORT cudaError_t cudaMallocManaged(void** pointer, size_t size, unsigned int flags) {
  return syncAllocHook(MEMTRACE_REAL(kRuntime, cudaMallocManaged), Api::kCudaMallocManaged,
                       MEMTRACE_CALLER, pointer, size, flags);
}

MEMTRACE_EXPORT cudaError_t cudaMallocAsync(void** pointer, size_t size, cudaStream_t stream) {
  auto real = MEMTRACE_REAL(kRuntime, cudaMallocAsync);
  return real ? mallocAsyncHook(real, MEMTRACE_CALLER, pointer, size, stream)
              : cudaErrorInitializationError;
}

MEMTRACE_EXPORT cudaError_t cudaMallocAsync_ptsz(void** pointer, size_t size, cudaStream_t stream) {
  auto real = MEMTRACE_REAL(kRuntime, cudaMallocAsync_ptsz);
  return real ? mallocAsyncHook(real, MEMTRACE_CALLER, pointer, size, stream)
              : cudaErrorInitializationError;
}

MEMTRACE_EXPORT cudaError_t cudaMallocFromPoolAsync(void** pointer, size_t size, cudaMemPool_t pool,
                                                    cudaStream_t stream) {
  auto real = MEMTRACE_REAL(kRuntime, cudaMallocFromPoolAsync);
  return real ? mallocAsyncHook(real, MEMTRACE_CALLER, pointer, size, stream, pool)
              : cudaErrorInitializationError;
}

MEMTRACE_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** pointer, size_t size,
                                                         cudaMemPool_t pool, cudaStream_t stream) {
  auto real = MEMTRACE_REAL(kRuntime, cudaMallocFromPoolAsync_ptsz);
  return real ? mallocAsyncHook(real, MEMTRACE_CALLER, pointer, size, stream, pool)
              : cudaErrorInitializationError;
}

MEMTRACE_EXPORT cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  auto real = MEMTRACE_REAL(kRuntime, cudaFreeAsync);
  return real ? freeAsyncHook(real, MEMTRACE_CALLER, pointer, stream)
              : cudaErrorInitializationError;
}

MEMTRACE_EXPORT cudaError_t cudaFreeAsync_ptsz(void* pointer, cudaStream_t stream) {
  auto real = MEMTRACE_REAL(kRuntime, cudaFreeAsync_ptsz);
  return real ? freeAsyncHook(real, MEMTRACE_CALLER, pointer, stream)
              : cudaErrorInitializationError;
}

MEMTRACE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t size) {
  return syncAllocHook(MEMTRACE_REAL(kDriver, cuMemAlloc_v2), Api::kCuMemAlloc, MEMTRACE_CALLER,
                       pointer, size);
}

MEMTRACE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* pointer, size_t size, unsigned int flags) {
  return syncAllocHook(MEMTRACE_REAL(kDriver, cuMemAllocManaged), Api::kCuMemAllocManaged,
                       MEMTRACE_CALLER, pointer, size, flags);
}

MEMTRACE_EXPORT CUresult cuMemFree_v2(CUdeviceptr pointer) {
  auto real = MEMTRACE_REAL(kDriver, cuMemFree_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active() || !pointer) return real(pointer);
  RecursionGuard guard;
  if (hooks::memoryCallerOf(MEMTRACE_CALLER) != hooks::Caller::kTorchTracked)
    memtrace::recordFree(guard, driverSource(Api::kCuMemAlloc, nullptr, MEMTRACE_CALLER),
                         reinterpret_cast<void*>(pointer));
  return real(pointer);
}

}  // extern "C"

namespace {

// cuMemAllocAsync and cuMemAllocFromPoolAsync: `rest` are the arguments between the size and
// the stream (the pool).
template <typename Real>
CUresult driverAllocAsync(Real real, const void* caller, CUdeviceptr* pointer, size_t size,
                          CUstream stream, auto... rest) {
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(pointer, size, rest..., stream);
  RecursionGuard guard;
  CUresult result = real(pointer, size, rest..., stream);
  hooks::recordAllocResult(guard, result == CUDA_SUCCESS, result == CUDA_ERROR_OUT_OF_MEMORY,
                           driverSource(Api::kCuMemAllocAsync, stream, caller),
                           pointer ? reinterpret_cast<void*>(*pointer) : nullptr, size);
  return result;
}

template <typename Real>
CUresult driverFreeAsync(Real real, const void* caller, CUdeviceptr pointer, CUstream stream) {
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active() || !pointer) return real(pointer, stream);
  RecursionGuard guard;
  memtrace::recordFree(guard, driverSource(Api::kCuMemAllocAsync, stream, caller),
                       reinterpret_cast<void*>(pointer));
  return real(pointer, stream);
}

}  // namespace

extern "C" {

MEMTRACE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* pointer, size_t size, CUstream stream) {
  return driverAllocAsync(MEMTRACE_REAL(kDriver, cuMemAllocAsync), MEMTRACE_CALLER, pointer, size,
                          stream);
}

MEMTRACE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* pointer, size_t size, CUstream stream) {
  return driverAllocAsync(MEMTRACE_REAL(kDriver, cuMemAllocAsync_ptsz), MEMTRACE_CALLER, pointer,
                          size, stream);
}

MEMTRACE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* pointer, size_t size,
                                                 CUmemoryPool pool, CUstream stream) {
  return driverAllocAsync(MEMTRACE_REAL(kDriver, cuMemAllocFromPoolAsync), MEMTRACE_CALLER, pointer,
                          size, stream, pool);
}

MEMTRACE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* pointer, size_t size,
                                                      CUmemoryPool pool, CUstream stream) {
  return driverAllocAsync(MEMTRACE_REAL(kDriver, cuMemAllocFromPoolAsync_ptsz), MEMTRACE_CALLER,
                          pointer, size, stream, pool);
}

MEMTRACE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr pointer, CUstream stream) {
  return driverFreeAsync(MEMTRACE_REAL(kDriver, cuMemFreeAsync), MEMTRACE_CALLER, pointer, stream);
}

MEMTRACE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr pointer, CUstream stream) {
  return driverFreeAsync(MEMTRACE_REAL(kDriver, cuMemFreeAsync_ptsz), MEMTRACE_CALLER, pointer,
                         stream);
}

}  // extern "C"
