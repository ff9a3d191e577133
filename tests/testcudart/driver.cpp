// The test driver library (libcuda.so.1): allocation over host memory with per-device
// accounting, virtual memory management (physical memory in memfd files mapped into reserved
// ranges, with CUDA's rules for when it is freed), cuGetProcAddress, cuMemGetInfo, and the
// device queries memtrace makes. Thread-safe; allocations here are ordinary test code and may
// use the C++ library freely.
#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tests/testcudart/testcuda.h"

// cuda.h names the 5-argument lookup cuGetProcAddress; libcuda.so.1 exports it as
// cuGetProcAddress_v2, and CUDA 11.3's 4-argument one as cuGetProcAddress.
#undef cuGetProcAddress

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
thread_local int t_mode_at_last_memory_info = -1;

uint64_t environmentBytes(const char* name, uint64_t otherwise) {
  const char* text = getenv(name);
  return text && *text ? strtoull(text, nullptr, 10) : otherwise;
}

uint64_t deviceMemory() {
  return environmentBytes("MEMTRACE_TEST_DEVICE_MEMORY", uint64_t{64} << 30);
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

// ---- Virtual memory management ------------------------------------------------------------

// CUDA's granularity for device memory on current GPUs (cuMemGetAllocationGranularity).
constexpr size_t kGranularity = 2 << 20;

struct Physical {
  size_t size;
  int device;  // -1: host memory, not counted as the device's
  int fd;      // a memfd of `size` bytes: what every mapping of it shows
  int references;
  int mappings;
};

struct VirtualMapping {
  size_t size;
  CUmemGenericAllocationHandle handle;
};

std::map<CUmemGenericAllocationHandle, Physical>* g_physical =
    new std::map<CUmemGenericAllocationHandle, Physical>;
std::map<uintptr_t, size_t>* g_reserved = new std::map<uintptr_t, size_t>;  // start -> size
std::map<uintptr_t, VirtualMapping>* g_mapped = new std::map<uintptr_t, VirtualMapping>;
// Handles count from far above any address a test allocates at, so that a handle is never
// mistaken for an address (nor the reverse) in a test's expectations.
CUmemGenericAllocationHandle g_next_handle = 0x10000;

// CUDA frees physical memory when its last reference is released and its last mapping is
// gone, whichever comes last (cuMemRelease's documentation). g_mutex held.
void freeIfUnused(std::map<CUmemGenericAllocationHandle, Physical>::iterator it) {
  if (it->second.references > 0 || it->second.mappings > 0) return;
  close(it->second.fd);
  if (it->second.device >= 0) g_live[it->second.device] -= it->second.size;
  g_physical->erase(it);
}

// Whether [address, address + size) lies in one reserved range. g_mutex held.
bool reserved(uintptr_t address, size_t size) {
  auto it = g_reserved->upper_bound(address);
  if (it == g_reserved->begin()) return false;
  --it;
  return address + size <= it->first + it->second;
}

// ---- cuGetProcAddress -----------------------------------------------------------------------

struct ProcVariant {
  const char* name;
  int since;
  void* legacy;
  void* per_thread;  // nullptr: the same as legacy
};
const std::vector<ProcVariant>& procTable();

CUresult lookUp(const char* symbol, void** function, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (!symbol || !function) return CUDA_ERROR_INVALID_VALUE;
  *function = nullptr;
  bool known = false;
  // The newest variant the caller's version allows (the table lists newest first).
  for (const ProcVariant& variant : procTable()) {
    if (strcmp(variant.name, symbol) != 0) continue;
    known = true;
    if (variant.since > version) continue;
    bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    *function = per_thread && variant.per_thread ? variant.per_thread : variant.legacy;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (status)
    *status =
        known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
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
  if (getenv("MEMTRACE_TEST_NO_CONTEXT")) return CUDA_ERROR_INVALID_CONTEXT;
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

EXPORT CUresult cuMemAllocManaged(CUdeviceptr* pointer, size_t size, unsigned int) {
  return allocate(pointer, size);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* pointer, size_t size, CUmemoryPool, CUstream) {
  return allocate(pointer, size);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* pointer, size_t size, CUmemoryPool,
                                             CUstream) {
  return allocate(pointer, size);
}

// A variant of cuMemAlloc from a CUDA newer than memtrace knows (cuGetProcAddress hands it
// out from version 99000 on): the same behavior under a function memtrace has never seen.
EXPORT CUresult testcuda_cuMemAlloc_future(CUdeviceptr* pointer, size_t size) {
  return allocate(pointer, size);
}

// The allocation underneath, under names memtrace does not hook: a benchmark's untraced call
// (dlsym of a hooked name hands out the hook).
EXPORT int testcuda_mem_alloc(uint64_t* pointer, size_t size) {
  return allocate(reinterpret_cast<CUdeviceptr*>(pointer), size);
}
EXPORT int testcuda_mem_free(uint64_t pointer) {
  return release(pointer);
}

EXPORT CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

// free = total - (live allocations + MEMTRACE_TEST_CONTEXT_BYTES), the bytes a real device
// spends outside any allocation call (its context, its modules).
EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  testcuda_note_capture_mode_at_memory_info();
  std::lock_guard<std::mutex> lock(g_mutex);
  uint64_t total = deviceMemory();
  uint64_t used = g_live[t_device] + environmentBytes("MEMTRACE_TEST_CONTEXT_BYTES", 0);
  *total_bytes = total;
  *free_bytes = used < total ? total - used : 0;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  int* slot = testcuda_capture_mode_slot();
  int previous = *slot;
  *slot = *mode;
  *mode = static_cast<CUstreamCaptureMode>(previous);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp*,
                                              CUmemAllocationGranularity_flags) {
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                            const CUmemAllocationProp* prop, unsigned long long) {
  if (!handle || !prop || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (prop->location.id < 0 || prop->location.id >= testcuda_device_count())
      return CUDA_ERROR_INVALID_DEVICE;
    device = prop->location.id;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (device >= 0 && g_live[device] + size > deviceMemory()) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("testcuda-physical", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = g_next_handle;
  g_next_handle += 0x10;
  (*g_physical)[*handle] = Physical{size, device, fd, 1, 0};
  if (device >= 0) g_live[device] += size;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_physical->find(handle);
  if (it == g_physical->end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.references;
  freeIfUnused(it);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* address) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_mapped->upper_bound(reinterpret_cast<uintptr_t>(address));
  if (it == g_mapped->begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (reinterpret_cast<uintptr_t>(address) >= it->first + it->second.size)
    return CUDA_ERROR_INVALID_VALUE;
  ++(*g_physical)[it->second.handle].references;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr* address, size_t size, size_t, CUdeviceptr,
                                    unsigned long long) {
  if (!address || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  void* range = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_mutex);
  (*g_reserved)[reinterpret_cast<uintptr_t>(range)] = size;
  *address = reinterpret_cast<CUdeviceptr>(range);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr address, size_t size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_reserved->find(address);
  if (it == g_reserved->end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto mapped = g_mapped->lower_bound(address);
  if (mapped != g_mapped->end() && mapped->first < address + size)
    return CUDA_ERROR_INVALID_VALUE;  // still mapped
  munmap(reinterpret_cast<void*>(address), size);
  g_reserved->erase(it);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemMap(CUdeviceptr address, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_physical->find(handle);
  if (it == g_physical->end() || size == 0 || offset + size > it->second.size ||
      !reserved(address, size))
    return CUDA_ERROR_INVALID_VALUE;
  auto next = g_mapped->lower_bound(address);
  if (next != g_mapped->end() && next->first < address + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != g_mapped->begin() && std::prev(next)->first + std::prev(next)->second.size > address)
    return CUDA_ERROR_INVALID_VALUE;
  void* mapped = mmap(reinterpret_cast<void*>(address), size, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_FIXED, it->second.fd, static_cast<off_t>(offset));
  if (mapped == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  (*g_mapped)[address] = VirtualMapping{size, handle};
  ++it->second.mappings;
  return CUDA_SUCCESS;
}

// Unmaps whole mappings that cover [address, address + size) end to end, as CUDA requires.
EXPORT CUresult cuMemUnmap(CUdeviceptr address, size_t size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  uintptr_t at = address;
  while (at < address + size) {
    auto it = g_mapped->find(at);
    if (it == g_mapped->end()) return CUDA_ERROR_INVALID_VALUE;
    at += it->second.size;
  }
  if (at != address + size) return CUDA_ERROR_INVALID_VALUE;
  for (at = address; at < address + size;) {
    auto it = g_mapped->find(at);
    size_t length = it->second.size;
    // Back to a reserved, inaccessible range.
    mmap(reinterpret_cast<void*>(at), length, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    auto physical = g_physical->find(it->second.handle);
    --physical->second.mappings;
    freeIfUnused(physical);
    g_mapped->erase(it);
    at += length;
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) {
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** function, int version,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  return lookUp(symbol, function, version, flags, status);
}

// CUDA 11.3's form, without the status (what `cuGetProcAddress` is exported as).
extern "C" __attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol,
                                                                            void** function,
                                                                            int version,
                                                                            cuuint64_t flags) {
  return lookUp(symbol, function, version, flags, nullptr);
}

namespace {

void* address(auto function) {
  return reinterpret_cast<void*>(function);
}

const std::vector<ProcVariant>& procTable() {
  static const std::vector<ProcVariant> table = {
      {"cuMemAlloc", 99000, address(&testcuda_cuMemAlloc_future), nullptr},
      {"cuMemAlloc", 3020, address(&cuMemAlloc_v2), nullptr},
      {"cuMemFree", 3020, address(&cuMemFree_v2), nullptr},
      {"cuMemAllocManaged", 6000, address(&cuMemAllocManaged), nullptr},
      {"cuMemAllocAsync", 11020, address(&cuMemAllocAsync), address(&cuMemAllocAsync_ptsz)},
      {"cuMemFreeAsync", 11020, address(&cuMemFreeAsync), address(&cuMemFreeAsync_ptsz)},
      {"cuMemAllocFromPoolAsync", 11020, address(&cuMemAllocFromPoolAsync),
       address(&cuMemAllocFromPoolAsync_ptsz)},
      {"cuMemCreate", 10020, address(&cuMemCreate), nullptr},
      {"cuMemRelease", 10020, address(&cuMemRelease), nullptr},
      {"cuMemMap", 10020, address(&cuMemMap), nullptr},
      {"cuMemUnmap", 10020, address(&cuMemUnmap), nullptr},
      {"cuMemSetAccess", 10020, address(&cuMemSetAccess), nullptr},
      {"cuMemAddressReserve", 10020, address(&cuMemAddressReserve), nullptr},
      {"cuMemAddressFree", 10020, address(&cuMemAddressFree), nullptr},
      {"cuMemRetainAllocationHandle", 11000, address(&cuMemRetainAllocationHandle), nullptr},
      {"cuMemGetAllocationGranularity", 10020, address(&cuMemGetAllocationGranularity), nullptr},
      {"cuMemGetInfo", 3020, address(&cuMemGetInfo_v2), nullptr},
      {"cuCtxGetDevice", 2000, address(&cuCtxGetDevice), nullptr},
      {"cuDeviceGet", 2000, address(&cuDeviceGet), nullptr},
      {"cuDriverGetVersion", 2020, address(&cuDriverGetVersion), nullptr},
      {"cuInit", 2000, address(&cuInit), nullptr},
      {"cuGetProcAddress", 12000, address(&cuGetProcAddress_v2), nullptr},
      {"cuGetProcAddress", 11030, address(&cuGetProcAddress), nullptr},
  };
  return table;
}

}  // namespace

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
EXPORT void testcuda_note_capture_mode_at_memory_info(void) {
  t_mode_at_last_memory_info = t_capture_mode;
}
EXPORT int testcuda_capture_mode_at_last_memory_info(void) {
  return t_mode_at_last_memory_info;
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
