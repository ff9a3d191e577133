// The test runtime library (libcudart.so.13). Like the runtime of CUDA 11.3 and older it
// reaches the driver through ordinary calls (the PLT), so under LD_PRELOAD memtrace's
// driver hooks see these nested calls: the tests prove they are not counted twice.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "tests/testcudart/testcuda.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

cudaError_t fromDriver(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return cudaErrorMemoryAllocation;
    case CUDA_ERROR_INVALID_DEVICE:
      return cudaErrorInvalidDevice;
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t mallocAsync(void** pointer, size_t size) {
  testcuda_note_capture_mode();
  CUdeviceptr device_pointer = 0;
  cudaError_t result = fromDriver(cuMemAllocAsync(&device_pointer, size, nullptr));
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
  cudaError_t result = fromDriver(cuMemAlloc_v2(&device_pointer, size));
  if (result == cudaSuccess) *pointer = reinterpret_cast<void*>(device_pointer);
  return result;
}

EXPORT cudaError_t cudaFree(void* pointer) {
  return fromDriver(cuMemFree_v2(reinterpret_cast<CUdeviceptr>(pointer)));
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
  return fromDriver(cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(pointer), stream));
}
EXPORT cudaError_t cudaFreeAsync_ptsz(void* pointer, cudaStream_t stream) {
  return fromDriver(cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(pointer), stream));
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
