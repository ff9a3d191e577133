// CUDA's virtual memory management under LD_PRELOAD: physical memory (cuMemCreate,
// cuMemRetainAllocationHandle, cuMemRelease), its mappings (cuMemMap, cuMemUnmap) and the
// address ranges they go into (cuMemAddressReserve, cuMemAddressFree). PyTorch's expandable
// segments and NCCL allocate this way; what is recorded is Note [Virtual memory management]
// in tracer/format/records.h. Each hook reads as the others do (Note [Every hook reads the
// same way] in preload_hooks.cpp): re-entered, it only calls the real function.
#include "allocator/hook_support.h"
#include "allocator/real_functions.h"
#include "tracer/recorder/memtrace.h"

using memtrace::EventSource;
using memtrace::RecursionGuard;
using memtrace::format::Api;
using memtrace::format::Level;

namespace {

// Physical memory is a segment an allocator hands out in pieces; its free names no device
// (the recorder has the device of the memory it frees).
EventSource physicalSource(int device, const void* caller) {
  return EventSource{Api::kCuMemCreate, Level::kSegment, device, 0, caller};
}

}  // namespace

extern "C" {

MEMTRACE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                     const CUmemAllocationProp* prop, unsigned long long flags) {
  auto real = MEMTRACE_REAL(kDriver, cuMemCreate);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(handle, size, prop, flags);
  RecursionGuard guard;
  CUresult result = real(handle, size, prop, flags);
  // Memory made on the host (a HOST or HOST_NUMA location) is not the device's.
  if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return result;
  memtrace::hooks::recordAllocResult(
      guard, result == CUDA_SUCCESS, result == CUDA_ERROR_OUT_OF_MEMORY,
      physicalSource(prop->location.id, MEMTRACE_CALLER),
      handle ? reinterpret_cast<const void*>(static_cast<uintptr_t>(*handle)) : nullptr, size);
  return result;
}

MEMTRACE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                     void* address) {
  auto real = MEMTRACE_REAL(kDriver, cuMemRetainAllocationHandle);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(handle, address);
  RecursionGuard guard;
  CUresult result = real(handle, address);
  if (result == CUDA_SUCCESS && handle) memtrace::recordPhysicalRetain(guard, *handle);
  return result;
}

MEMTRACE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto real = MEMTRACE_REAL(kDriver, cuMemRelease);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(handle);
  RecursionGuard guard;
  memtrace::recordPhysicalRelease(guard, physicalSource(-1, MEMTRACE_CALLER), handle);
  return real(handle);
}

MEMTRACE_EXPORT CUresult cuMemMap(CUdeviceptr address, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle handle, unsigned long long flags) {
  auto real = MEMTRACE_REAL(kDriver, cuMemMap);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(address, size, offset, handle, flags);
  RecursionGuard guard;
  CUresult result = real(address, size, offset, handle, flags);
  if (result == CUDA_SUCCESS) memtrace::recordMemoryMap(guard, address, size, offset, handle);
  return result;
}

MEMTRACE_EXPORT CUresult cuMemUnmap(CUdeviceptr address, size_t size) {
  auto real = MEMTRACE_REAL(kDriver, cuMemUnmap);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(address, size);
  RecursionGuard guard;
  memtrace::recordMemoryUnmap(guard, physicalSource(-1, MEMTRACE_CALLER), address, size);
  return real(address, size);
}

MEMTRACE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* address, size_t size, size_t alignment,
                                             CUdeviceptr wanted, unsigned long long flags) {
  auto real = MEMTRACE_REAL(kDriver, cuMemAddressReserve);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(address, size, alignment, wanted, flags);
  RecursionGuard guard;
  CUresult result = real(address, size, alignment, wanted, flags);
  if (result == CUDA_SUCCESS && address)
    memtrace::recordAddressRange(guard, /*reserved=*/true, *address, size);
  return result;
}

MEMTRACE_EXPORT CUresult cuMemAddressFree(CUdeviceptr address, size_t size) {
  auto real = MEMTRACE_REAL(kDriver, cuMemAddressFree);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(address, size);
  RecursionGuard guard;
  memtrace::recordAddressRange(guard, /*reserved=*/false, address, size);
  return real(address, size);
}

}  // extern "C"
