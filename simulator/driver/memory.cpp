// The simulated driver's memory: allocations, pools, virtual memory management (what
// PyTorch's expandable segments use), pointer attributes, copies and memsets.
#include <cuda.h>
#include <string.h>

#include <map>
#include <mutex>
#include <vector>

#include "simulator/core/device.h"
#include "simulator/core/pools.h"
#include "simulator/core/testing.h"
#include "simulator/core/work.h"
#include "simulator/driver/driver_internal.h"

using namespace simgpu;
using namespace simgpu::driver;

namespace {
void* address(CUdeviceptr pointer) {
  return reinterpret_cast<void*>(pointer);
}
}  // namespace

SIMGPU_API CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t size) {
  if (!pointer || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  activate(currentDevice());
  void* memory = nullptr;
  CUresult result = fromStatus(allocate(&memory, size, currentDevice(), MemoryKind::kDevice));
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return result;
}

SIMGPU_API CUresult cuMemFree_v2(CUdeviceptr pointer) {
  if (poolFree(address(pointer))) return CUDA_SUCCESS;
  return fromStatus(release(address(pointer)));
}

SIMGPU_API CUresult cuMemAllocManaged(CUdeviceptr* pointer, size_t size, unsigned int) {
  if (!pointer || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  void* memory = nullptr;
  CUresult result = fromStatus(allocate(&memory, size, currentDevice(), MemoryKind::kManaged));
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return result;
}

SIMGPU_API CUresult cuMemAllocPitch_v2(CUdeviceptr* pointer, size_t* pitch, size_t width,
                                       size_t height, unsigned int) {
  if (!pitch) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 511) & ~size_t{511};
  return cuMemAlloc_v2(pointer, *pitch * height);
}

SIMGPU_API CUresult cuMemAllocHost_v2(void** pointer, size_t size) {
  return fromStatus(allocate(pointer, size, currentDevice(), MemoryKind::kHost));
}

SIMGPU_API CUresult cuMemHostAlloc(void** pointer, size_t size, unsigned int) {
  return cuMemAllocHost_v2(pointer, size);
}

SIMGPU_API CUresult cuMemFreeHost(void* pointer) {
  return fromStatus(release(pointer));
}

SIMGPU_API CUresult cuMemHostRegister_v2(void*, size_t, unsigned int) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemHostUnregister(void*) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* device, void* host, unsigned int) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = reinterpret_cast<CUdeviceptr>(host);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  testing::noteMemoryInfo();
  int device = currentDevice();
  uint64_t total = totalBytes(device), used = usedBytes(device);
  *total_bytes = total;
  *free_bytes = used < total ? total - used : 0;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr pointer) {
  Pointer found = find(address(pointer));
  if (!found.found) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = found.start;
  if (size) *size = found.size;
  return CUDA_SUCCESS;
}

namespace {

CUresult pointerAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr pointer) {
  Pointer found = find(address(pointer));
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      if (!found.found) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<unsigned*>(data) =
          found.kind == MemoryKind::kHost ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      if (!found.found) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUcontext*>(data) = context(found.device < 0 ? 0 : found.device);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      if (!found.found) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<int*>(data) = found.device < 0 ? currentDevice() : found.device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = pointer;
      return found.found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      *static_cast<void**>(data) =
          found.found && found.kind != MemoryKind::kDevice ? address(pointer) : nullptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = found.found && found.kind == MemoryKind::kManaged;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = found.start;
      return found.found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = found.size;
      return found.found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<unsigned*>(data) = found.found;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: {
      static unsigned long long next = 1;
      *static_cast<unsigned long long*>(data) = found.found ? found.start : next++;
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<unsigned*>(data) = 1;
      return CUDA_SUCCESS;
    default:
      return refused("cuPointerGetAttribute", "that attribute is not simulated");
  }
}

}  // namespace

SIMGPU_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                          CUdeviceptr pointer) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  return pointerAttribute(data, attribute, pointer);
}

SIMGPU_API CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes,
                                           void** data, CUdeviceptr pointer) {
  for (unsigned i = 0; i < count; ++i) {
    CUresult result = pointerAttribute(data[i], attributes[i], pointer);
    // As the driver does, an unregistered pointer leaves the rest answered, not an error.
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_INVALID_VALUE) return result;
  }
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuPointerSetAttribute(const void*, CUpointer_attribute, CUdeviceptr) {
  return CUDA_SUCCESS;
}

// ---- Pools ------------------------------------------------------------------------------

SIMGPU_API CUresult cuMemAllocAsync(CUdeviceptr* pointer, size_t size, CUstream stream) {
  if (!pointer) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  launched(stream, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  void* memory = nullptr;
  CUresult result = fromStatus(poolAllocate(defaultPool(currentDevice()), &memory, size));
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return result;
}
SIMGPU_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* pointer, size_t size, CUstream stream) {
  return cuMemAllocAsync(pointer, size, stream);
}
SIMGPU_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* pointer, size_t size, CUmemoryPool pool,
                                            CUstream stream) {
  if (!pointer || !pool) return CUDA_ERROR_INVALID_VALUE;
  launched(stream, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  void* memory = nullptr;
  CUresult result = fromStatus(poolAllocate(reinterpret_cast<Pool*>(pool), &memory, size));
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  return result;
}
SIMGPU_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* pointer, size_t size,
                                                 CUmemoryPool pool, CUstream stream) {
  return cuMemAllocFromPoolAsync(pointer, size, pool, stream);
}
SIMGPU_API CUresult cuMemFreeAsync(CUdeviceptr pointer, CUstream stream) {
  launched(stream, CU_GRAPH_NODE_TYPE_MEM_FREE);
  return cuMemFree_v2(pointer);
}
SIMGPU_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr pointer, CUstream stream) {
  return cuMemFreeAsync(pointer, stream);
}
SIMGPU_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *pool = reinterpret_cast<CUmemoryPool>(defaultPool(device));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice device) {
  return cuDeviceGetDefaultMemPool(pool, device);
}
SIMGPU_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return refused("cuMemPoolCreate", "pools of host memory");
  *pool = reinterpret_cast<CUmemoryPool>(createPool(props->location.id));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  destroyPool(reinterpret_cast<Pool*>(pool));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                          void* value) {
  if (!pool || !value) return CUDA_ERROR_INVALID_VALUE;
  return poolSetAttribute(reinterpret_cast<Pool*>(pool), attribute, value)
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}
SIMGPU_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                          void* value) {
  if (!pool || !value) return CUDA_ERROR_INVALID_VALUE;
  return poolGetAttribute(reinterpret_cast<Pool*>(pool), attribute, value)
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}
SIMGPU_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  poolTrim(reinterpret_cast<Pool*>(pool), keep);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuMemPoolSetAccess(CUmemoryPool, const CUmemAccessDesc*, size_t) {
  return CUDA_SUCCESS;
}

// ---- Virtual memory management (Note [Virtual memory]) ----------------------------------------

// Note [Virtual memory]
// cuMemCreate makes physical memory, counted against its device from then until its last
// reference is released and its last mapping is gone (cuMemRelease's documentation);
// cuMemAddressReserve reserves device address space (Note [Device memory]), and mapping
// physical memory into it changes nothing the host can see: nothing ever touches device
// memory. PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
// reserve one range and map 2 MiB pages into it as they grow.

namespace {

// CUDA's granularity for device memory on the cards profiled (cuMemGetAllocationGranularity).
constexpr size_t kGranularity = size_t{2} << 20;

struct Physical {
  size_t size;
  int device;  // -1: host memory, not counted as the device's
  int references;
  int mappings;
  CUmemAllocationProp prop;
};

struct Mapping {
  size_t size;
  CUmemGenericAllocationHandle handle;
};

std::mutex g_mutex;
std::map<CUmemGenericAllocationHandle, Physical>* g_physical =
    new std::map<CUmemGenericAllocationHandle, Physical>;
std::map<uintptr_t, Mapping>* g_mapped = new std::map<uintptr_t, Mapping>;
CUmemGenericAllocationHandle g_next_handle = 0x10000;

// g_mutex held.
void freeIfUnused(std::map<CUmemGenericAllocationHandle, Physical>::iterator it) {
  if (it->second.references > 0 || it->second.mappings > 0) return;
  if (it->second.device >= 0) uncharge(it->second.device, it->second.size);
  g_physical->erase(it);
}

}  // namespace

SIMGPU_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp*,
                                                  CUmemAllocationGranularity_flags) {
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                const CUmemAllocationProp* prop, unsigned long long) {
  if (!handle || !prop || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  int device = -1;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (prop->location.id < 0 || prop->location.id >= deviceCount())
      return CUDA_ERROR_INVALID_DEVICE;
    device = prop->location.id;
    if (!charge(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  *handle = g_next_handle;
  g_next_handle += 0x10;
  (*g_physical)[*handle] = Physical{size, device, 1, 0, *prop};
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_physical->find(handle);
  if (it == g_physical->end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.references;
  freeIfUnused(it);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* at) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_mapped->upper_bound(reinterpret_cast<uintptr_t>(at));
  if (it == g_mapped->begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (reinterpret_cast<uintptr_t>(at) >= it->first + it->second.size)
    return CUDA_ERROR_INVALID_VALUE;
  ++(*g_physical)[it->second.handle].references;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                           CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_physical->find(handle);
  if (it == g_physical->end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second.prop;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemAddressReserve(CUdeviceptr* pointer, size_t size, size_t, CUdeviceptr,
                                        unsigned long long) {
  if (!pointer || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  void* range = nullptr;
  CUresult result = fromStatus(allocate(&range, size, currentDevice(), MemoryKind::kDevice, false));
  *pointer = reinterpret_cast<CUdeviceptr>(range);
  return result;
}

SIMGPU_API CUresult cuMemAddressFree(CUdeviceptr pointer, size_t size) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto mapped = g_mapped->lower_bound(pointer);
    if (mapped != g_mapped->end() && mapped->first < pointer + size)
      return CUDA_ERROR_INVALID_VALUE;  // still mapped
  }
  return fromStatus(release(address(pointer)));
}

SIMGPU_API CUresult cuMemMap(CUdeviceptr pointer, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long) {
  Pointer range = find(address(pointer));
  if (!range.found || pointer + size > range.start + range.size) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_physical->find(handle);
  if (it == g_physical->end() || size == 0 || offset + size > it->second.size)
    return CUDA_ERROR_INVALID_VALUE;
  auto next = g_mapped->lower_bound(pointer);
  if (next != g_mapped->end() && next->first < pointer + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != g_mapped->begin() && std::prev(next)->first + std::prev(next)->second.size > pointer)
    return CUDA_ERROR_INVALID_VALUE;
  (*g_mapped)[pointer] = Mapping{size, handle};
  ++it->second.mappings;
  return CUDA_SUCCESS;
}

// Unmaps whole mappings that cover [pointer, pointer + size) end to end, as CUDA requires.
SIMGPU_API CUresult cuMemUnmap(CUdeviceptr pointer, size_t size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  uintptr_t at = pointer;
  while (at < pointer + size) {
    auto it = g_mapped->find(at);
    if (it == g_mapped->end()) return CUDA_ERROR_INVALID_VALUE;
    at += it->second.size;
  }
  if (at != pointer + size) return CUDA_ERROR_INVALID_VALUE;
  for (at = pointer; at < pointer + size;) {
    auto it = g_mapped->find(at);
    size_t length = it->second.size;
    auto physical = g_physical->find(it->second.handle);
    --physical->second.mappings;
    freeIfUnused(physical);
    g_mapped->erase(it);
    at += length;
  }
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemExportToShareableHandle(void*, CUmemGenericAllocationHandle,
                                                 CUmemAllocationHandleType, unsigned long long) {
  return refused("cuMemExportToShareableHandle",
                 "memory shared between processes is not simulated");
}

SIMGPU_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle*, void*,
                                                   CUmemAllocationHandleType) {
  return refused("cuMemImportFromShareableHandle",
                 "memory shared between processes is not simulated");
}

// ---- Copies and memsets (Note [Reads of device values] in simulator/core/device.cpp) ---------

namespace {

// A copy as the simulated device makes it (Note [Values on the simulated device]).
CUresult copy(void* dst, const void* src, size_t bytes, CUstream stream) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  launched(stream, CU_GRAPH_NODE_TYPE_MEMCPY);
  return simgpu::copy(dst, src, bytes) ? CUDA_SUCCESS : CUDA_ERROR_NOT_PERMITTED;
}

CUresult fill(CUdeviceptr dst, unsigned value, size_t count, size_t width, CUstream stream) {
  if (count == 0) return CUDA_SUCCESS;
  launched(stream, CU_GRAPH_NODE_TYPE_MEMSET);
  if (width == 1) {
    simgpu::fill(address(dst), static_cast<int>(value), count);
    return CUDA_SUCCESS;
  }
  if (count * width > kKeptBytes) {
    if (!isDeviceAddress(address(dst))) {
      auto* out = reinterpret_cast<unsigned char*>(dst);
      for (size_t i = 0; i < count; ++i) memcpy(out + i * width, &value, width);
    }
    return CUDA_SUCCESS;
  }
  // A pattern of 2 or 4 bytes: made on the host, then copied as the device keeps small copies.
  std::vector<unsigned char> pattern(count * width);
  for (size_t i = 0; i < count; ++i) memcpy(pattern.data() + i * width, &value, width);
  simgpu::copy(address(dst), pattern.data(), pattern.size());
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(address(dst), address(src), bytes, nullptr);
}
SIMGPU_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(address(dst), address(src), bytes, stream);
}
SIMGPU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return copy(address(dst), src, bytes, nullptr);
}
SIMGPU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                                         CUstream stream) {
  return copy(address(dst), src, bytes, stream);
}
SIMGPU_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return copy(dst, address(src), bytes, nullptr);
}
SIMGPU_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes,
                                         CUstream stream) {
  return copy(dst, address(src), bytes, stream);
}
SIMGPU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(address(dst), address(src), bytes, nullptr);
}
SIMGPU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                         CUstream stream) {
  return copy(address(dst), address(src), bytes, stream);
}
SIMGPU_API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                 size_t bytes) {
  return copy(address(dst), address(src), bytes, nullptr);
}
SIMGPU_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                      size_t bytes, CUstream stream) {
  return copy(address(dst), address(src), bytes, stream);
}
SIMGPU_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  return fill(dst, value, count, 1, nullptr);
}
SIMGPU_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count,
                                    CUstream stream) {
  return fill(dst, value, count, 1, stream);
}
SIMGPU_API CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t count) {
  return fill(dst, value, count, 2, nullptr);
}
SIMGPU_API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t count,
                                     CUstream stream) {
  return fill(dst, value, count, 2, stream);
}
SIMGPU_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count) {
  return fill(dst, value, count, 4, nullptr);
}
SIMGPU_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count,
                                     CUstream stream) {
  return fill(dst, value, count, 4, stream);
}
SIMGPU_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation, unsigned int,
                                          CUstream) {
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuMemAdvise_v2(CUdeviceptr, size_t, CUmem_advise, CUmemLocation) {
  return CUDA_SUCCESS;
}
