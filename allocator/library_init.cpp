// What runs when libmemtrace.so is loaded: the recorder's start, and the simulated GPU's
// discovery. Also the small CUDA queries the hooks share.
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdio>

#include "allocator/hook_support.h"
#include "allocator/real_functions.h"
#include "allocator/simulated_device.h"
#include "tracer/recorder/config.h"

namespace memtrace::hooks {
namespace {

bool describeDevice(int device, char* name, size_t name_size, uint64_t* total_bytes) {
  // Before the device's first event is written: the simulated GPU's record comes first when
  // its libraries were loaded after ours (Note [Finding the simulated GPU]).
  findSimulatedDevice();
  auto get = MEMTRACE_CUDA(kDriver, cuDeviceGet);
  auto get_name = MEMTRACE_CUDA(kDriver, cuDeviceGetName);
  auto total_memory = MEMTRACE_CUDA(kDriver, cuDeviceTotalMem_v2);
  CUdevice handle;
  if (!get || !get_name || get(&handle, device) != CUDA_SUCCESS ||
      get_name(name, static_cast<int>(name_size), handle) != CUDA_SUCCESS)
    return false;
  size_t bytes = 0;
  *total_bytes = total_memory && total_memory(&bytes, handle) == CUDA_SUCCESS ? bytes : 0;
  return true;
}

// Note [Device memory readings] (tracer/format/records.h): cuMemGetInfo of the current
// context's device. The thread switches to relaxed stream capture mode around it, as c10 does
// around its own calls, so that a CUDA graph being captured on another thread is never
// invalidated by it; with no context current (or no driver) there is no reading.
bool readDeviceMemory(int* device, uint64_t* free_bytes, uint64_t* total_bytes) {
  auto context_device = MEMTRACE_CUDA(kDriver, cuCtxGetDevice);
  auto memory_info = MEMTRACE_CUDA(kDriver, cuMemGetInfo_v2);
  CUdevice current = -1;
  if (!context_device || !memory_info || context_device(&current) != CUDA_SUCCESS) return false;
  auto exchange_mode = MEMTRACE_CUDA(kDriver, cuThreadExchangeStreamCaptureMode);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (exchange_mode && exchange_mode(&mode) != CUDA_SUCCESS) exchange_mode = nullptr;
  size_t free_memory = 0, total_memory = 0;
  CUresult result = memory_info(&free_memory, &total_memory);
  if (exchange_mode) exchange_mode(&mode);
  if (result != CUDA_SUCCESS) return false;
  *device = current;
  *free_bytes = free_memory;
  *total_bytes = total_memory;
  return true;
}

// Nothing here changes the program: PyTorch's allocator stays as the program configured it
// (PYTORCH_CUDA_ALLOC_CONF untouched), and its tensors are recorded from inside it (Note
// [PyTorch's own allocator] in tracer/format/records.h; allocator/torch_allocator.cpp).
__attribute__((constructor)) void initializeLibrary() {
  setDeviceDescriber(describeDevice);
  setDeviceMemoryReader(readDeviceMemory);
  ensureRecorderInitialized();
  findSimulatedDevice();
}

}  // namespace

int runtimeDevice() {
  auto get_device = MEMTRACE_CUDA(kRuntime, cudaGetDevice);
  int device = -1;
  if (!get_device || get_device(&device) != cudaSuccess) return -1;
  return device;
}

int streamDevice(cudaStream_t stream) {
  auto stream_device = MEMTRACE_CUDA(kRuntime, cudaStreamGetDevice);
  int device = -1;
  if (stream_device && stream_device(stream, &device) == cudaSuccess) return device;
  return runtimeDevice();
}

int driverDevice() {
  auto context_device = MEMTRACE_CUDA(kDriver, cuCtxGetDevice);
  CUdevice device = -1;
  if (!context_device || context_device(&device) != CUDA_SUCCESS) return -1;
  return device;
}

}  // namespace memtrace::hooks
