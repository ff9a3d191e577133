// The test runtime library (libcudart.so.13). It reaches the driver as CUDA's runtime does
// since 11.4, through cuGetProcAddress (dlopen of libcuda.so.1, dlsym of cuGetProcAddress_v2,
// every driver function it calls asked of that), or with MEMTRACE_TEST_CUDART_DRIVER=link as
// runtimes up to 11.3 did, through ordinary calls (the PLT). Either way, under LD_PRELOAD
// memtrace's driver hooks see these nested calls: the tests prove they are not counted twice.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cstdio>

#include "tests/testcudart/testcuda.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

// The runtime's own version, which unversioned lookups (cudaGetDriverEntryPoint) ask at.
#define TESTCUDA_RUNTIME_VERSION 13000

namespace {

// The driver functions the runtime calls.
struct Driver {
  decltype(&cuMemAlloc_v2) mem_alloc;
  decltype(&cuMemFree_v2) mem_free;
  decltype(&cuMemAllocAsync) mem_alloc_async;
  decltype(&cuMemFreeAsync) mem_free_async;
  decltype(&cuMemGetInfo_v2) mem_get_info;
  decltype(&cuGetProcAddress_v2) get_proc_address;
};

template <typename Fn>
void ask(decltype(&cuGetProcAddress_v2) get_proc_address, const char* name, Fn* out) {
  void* function = nullptr;
  CUdriverProcAddressQueryResult status;
  if (get_proc_address(name, &function, TESTCUDA_RUNTIME_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,
                       &status) != CUDA_SUCCESS) {
    std::fprintf(stderr, "test runtime: the driver has no %s\n", name);
    abort();
  }
  *out = reinterpret_cast<Fn>(function);
}

Driver loadDriver() {
  const char* mode = getenv("MEMTRACE_TEST_CUDART_DRIVER");
  if (mode && strcmp(mode, "link") == 0)
    return Driver{&cuMemAlloc_v2,  &cuMemFree_v2,    &cuMemAllocAsync,
                  &cuMemFreeAsync, &cuMemGetInfo_v2, &cuGetProcAddress_v2};
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto get_proc_address =
      library
          ? reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(library, "cuGetProcAddress_v2"))
          : nullptr;
  if (!get_proc_address) {
    std::fprintf(stderr, "test runtime: no cuGetProcAddress_v2 in libcuda.so.1\n");
    abort();
  }
  Driver driver{};
  driver.get_proc_address = get_proc_address;
  ask(get_proc_address, "cuMemAlloc", &driver.mem_alloc);
  ask(get_proc_address, "cuMemFree", &driver.mem_free);
  ask(get_proc_address, "cuMemAllocAsync", &driver.mem_alloc_async);
  ask(get_proc_address, "cuMemFreeAsync", &driver.mem_free_async);
  ask(get_proc_address, "cuMemGetInfo", &driver.mem_get_info);
  return driver;
}

// Loaded at the first runtime call, as CUDA's runtime initializes lazily.
const Driver& driver() {
  static const Driver loaded = loadDriver();
  return loaded;
}

cudaError_t fromDriver(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return cudaErrorMemoryAllocation;
    case CUDA_ERROR_INVALID_DEVICE:
      return cudaErrorInvalidDevice;
    case CUDA_ERROR_NOT_FOUND:
      return cudaErrorSymbolNotFound;
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t mallocAsync(void** pointer, size_t size) {
  testcuda_note_capture_mode();
  CUdeviceptr device_pointer = 0;
  cudaError_t result = fromDriver(driver().mem_alloc_async(&device_pointer, size, nullptr));
  if (result == cudaSuccess) *pointer = reinterpret_cast<void*>(device_pointer);
  return result;
}

}  // namespace

EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  *count = testcuda_device_count();
  return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int* device) {
  *device = testcuda_current_device();
  return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= testcuda_device_count()) return cudaErrorInvalidDevice;
  testcuda_set_current_device(device);
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t, int* device) {
  *device = testcuda_current_device();
  return cudaSuccess;
}

EXPORT cudaError_t cudaMalloc(void** pointer, size_t size) {
  if (!pointer) return cudaErrorInvalidValue;
  CUdeviceptr device_pointer = 0;
  cudaError_t result = fromDriver(driver().mem_alloc(&device_pointer, size));
  if (result == cudaSuccess) *pointer = reinterpret_cast<void*>(device_pointer);
  return result;
}

EXPORT cudaError_t cudaFree(void* pointer) {
  return fromDriver(driver().mem_free(reinterpret_cast<CUdeviceptr>(pointer)));
}

EXPORT cudaError_t cudaMallocManaged(void** pointer, size_t size, unsigned int) {
  return cudaMalloc(pointer, size);
}

EXPORT cudaError_t cudaMallocAsync(void** pointer, size_t size, cudaStream_t) {
  return mallocAsync(pointer, size);
}
EXPORT cudaError_t cudaMallocAsync_ptsz(void** pointer, size_t size, cudaStream_t) {
  return mallocAsync(pointer, size);
}
EXPORT cudaError_t cudaMallocFromPoolAsync(void** pointer, size_t size, cudaMemPool_t,
                                           cudaStream_t) {
  return mallocAsync(pointer, size);
}
EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** pointer, size_t size, cudaMemPool_t,
                                                cudaStream_t) {
  return mallocAsync(pointer, size);
}

EXPORT cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  return fromDriver(driver().mem_free_async(reinterpret_cast<CUdeviceptr>(pointer), stream));
}
EXPORT cudaError_t cudaFreeAsync_ptsz(void* pointer, cudaStream_t stream) {
  return fromDriver(driver().mem_free_async(reinterpret_cast<CUdeviceptr>(pointer), stream));
}

// A pool handle encodes its device: 0x1000 + device.
EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device < 0 || device >= testcuda_device_count()) return cudaErrorInvalidDevice;
  *pool = reinterpret_cast<cudaMemPool_t>(static_cast<uintptr_t>(0x1000 + device));
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute,
                                           void* value) {
  if (attribute == cudaMemPoolAttrReleaseThreshold)
    testcuda_set_release_threshold(static_cast<int>(reinterpret_cast<uintptr_t>(pool) - 0x1000),
                                   *static_cast<uint64_t*>(value));
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) {
  testcuda_note_trim();
  return cudaSuccess;
}

EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  int* slot = testcuda_capture_mode_slot();
  int previous = *slot;
  *slot = *mode;
  *mode = static_cast<cudaStreamCaptureMode>(previous);
  return cudaSuccess;
}

// Host memory: nothing is ever pending on a stream.
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}

EXPORT cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = TESTCUDA_RUNTIME_VERSION;
  return cudaSuccess;
}

EXPORT cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  return fromDriver(driver().mem_get_info(free_bytes, total_bytes));
}

// The driver's functions, asked of the driver's cuGetProcAddress as CUDA's runtime does; the
// _ptsz forms read "default" as per-thread default stream.
namespace {

cudaError_t driverEntryPoint(const char* symbol, void** function, unsigned int version,
                             unsigned long long flags, bool per_thread_default,
                             cudaDriverEntryPointQueryResult* status) {
  if (per_thread_default && !(flags & (cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream)))
    flags |= cudaEnablePerThreadDefaultStream;
  CUdriverProcAddressQueryResult found;
  CUresult result =
      driver().get_proc_address(symbol, function, static_cast<int>(version), flags, &found);
  if (status) *status = static_cast<cudaDriverEntryPointQueryResult>(found);
  return result == CUDA_ERROR_NOT_FOUND ? cudaSuccess : fromDriver(result);
}

}  // namespace

EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** function,
                                           unsigned long long flags,
                                           cudaDriverEntryPointQueryResult* status) {
  return driverEntryPoint(symbol, function, TESTCUDA_RUNTIME_VERSION, flags, false, status);
}
EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** function,
                                                unsigned long long flags,
                                                cudaDriverEntryPointQueryResult* status) {
  return driverEntryPoint(symbol, function, TESTCUDA_RUNTIME_VERSION, flags, true, status);
}
EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                                    unsigned int version, unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult* status) {
  return driverEntryPoint(symbol, function, version, flags, false, status);
}
EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** function,
                                                         unsigned int version,
                                                         unsigned long long flags,
                                                         cudaDriverEntryPointQueryResult* status) {
  return driverEntryPoint(symbol, function, version, flags, true, status);
}

EXPORT const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    default:
      return "test runtime error";
  }
}

// cudaMalloc through the process's global scope (where LD_PRELOAD's hooks are), returning
// the pointer: one C call from Python with no Python helper frame in between, as a
// torch.empty(..., device="cuda") is. The demo's stand-in model uses it.
EXPORT void* testcuda_malloc(size_t size) {
  void* pointer = nullptr;
  return cudaMalloc(&pointer, size) == cudaSuccess ? pointer : nullptr;
}

// cudaMalloc on a thread of its own that never ran Python, joined before returning: what
// autograd's engine does on a GPU, where backward runs on the device's own thread while the
// thread that called backward waits (with the GIL released).
EXPORT void* testcuda_malloc_on_new_thread(size_t size) {
  struct Call {
    size_t size;
    void* pointer;
  } call{size, nullptr};
  pthread_t thread;
  auto body = [](void* argument) -> void* {
    auto* call = static_cast<Call*>(argument);
    call->pointer = testcuda_malloc(call->size);
    return nullptr;
  };
  if (pthread_create(&thread, nullptr, body, &call) != 0) return nullptr;
  pthread_join(thread, nullptr);
  return call.pointer;
}
