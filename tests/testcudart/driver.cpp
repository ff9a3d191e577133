// The test driver library (libcuda.so.1): allocation over host memory with per-device
// accounting, and the device queries memtrace makes. Thread-safe; allocations here are
// ordinary test code and may use the C++ library freely.
#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "tests/testcudart/testcuda.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Block {
  size_t size;
  int device;
  bool mapped;
};

std::mutex g_mutex;
std::unordered_map<uintptr_t, Block>* g_blocks = new std::unordered_map<uintptr_t, Block>;
uint64_t g_live[64];
uint64_t g_release_threshold[64];
int g_trims = 0;
thread_local int t_device = 0;
thread_local int t_capture_mode = 0;  // cudaStreamCaptureModeGlobal
thread_local int t_mode_at_last_alloc = -1;

uint64_t deviceMemory() {
  const char* text = getenv("MEMTRACE_TEST_DEVICE_MEMORY");
  return text && *text ? strtoull(text, nullptr, 10) : (uint64_t{64} << 30);
}

// Large blocks are mapped without reserving swap, so tests can "allocate" gigabytes.
constexpr size_t kMapThreshold = 1 << 20;

CUresult allocate(CUdeviceptr* pointer, size_t size) {
  if (!pointer) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  int device = t_device;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_live[device] + size > deviceMemory()) return CUDA_ERROR_OUT_OF_MEMORY;
  void* memory;
  bool mapped = size >= kMapThreshold;
  if (mapped) {
    memory = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    // 256-byte aligned, as cudaMalloc guarantees.
    memory = aligned_alloc(256, (size + 255) & ~size_t{255});
    if (!memory) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  (*g_blocks)[reinterpret_cast<uintptr_t>(memory)] = Block{size, device, mapped};
  g_live[device] += size;
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}

CUresult release(CUdeviceptr pointer) {
  if (!pointer) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_blocks->find(pointer);
  if (it == g_blocks->end()) return CUDA_ERROR_INVALID_VALUE;
  g_live[it->second.device] -= it->second.size;
  if (it->second.mapped)
    munmap(reinterpret_cast<void*>(pointer), it->second.size);
  else
    free(reinterpret_cast<void*>(pointer));
  g_blocks->erase(it);
  return CUDA_SUCCESS;
}

}  // namespace

EXPORT CUresult cuInit(unsigned int) {
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= testcuda_device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  snprintf(name, static_cast<size_t>(length), "memtrace test device %d (host memory)", device);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = deviceMemory();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  *device = t_device;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t size) {
  return allocate(pointer, size);
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr pointer) {
  return release(pointer);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr* pointer, size_t size, CUstream) {
  return allocate(pointer, size);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr pointer, CUstream) {
  return release(pointer);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* pointer, size_t size, CUstream) {
  return allocate(pointer, size);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr pointer, CUstream) {
  return release(pointer);
}

EXPORT uint64_t testcuda_live_bytes(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (device >= 0) return device < 64 ? g_live[device] : 0;
  uint64_t total = 0;
  for (uint64_t bytes : g_live) total += bytes;
  return total;
}
EXPORT uint64_t testcuda_release_threshold(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_release_threshold[device];
}
EXPORT void testcuda_set_release_threshold(int device, uint64_t value) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_release_threshold[device] = value;
}
EXPORT void testcuda_note_trim(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_trims;
}
EXPORT int testcuda_trim_count(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_trims;
}
EXPORT int testcuda_capture_mode_at_last_alloc(void) {
  return t_mode_at_last_alloc;
}
EXPORT int* testcuda_capture_mode_slot(void) {
  return &t_capture_mode;
}
EXPORT void testcuda_note_capture_mode(void) {
  t_mode_at_last_alloc = t_capture_mode;
}
EXPORT int testcuda_current_device(void) {
  return t_device;
}
EXPORT void testcuda_set_current_device(int device) {
  t_device = device;
}
EXPORT int testcuda_device_count(void) {
  const char* text = getenv("MEMTRACE_TEST_DEVICES");
  int count = text && *text ? atoi(text) : 2;
  return count > 0 && count <= 64 ? count : 2;
}
