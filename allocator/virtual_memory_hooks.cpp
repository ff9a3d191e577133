// CUDA's virtual memory management under LD_PRELOAD: physical memory (cuMemCreate,
// cuMemRetainAllocationHandle, cuMemRelease), its mappings (cuMemMap, cuMemUnmap) and the
// address ranges they go into (cuMemAddressReserve, cuMemAddressFree). PyTorch's expandable
// segments and NCCL allocate this way; what is recorded is Note [Virtual memory management]
// in tracer/format/records.h. Each hook reads as the others do (Note [Every hook reads the
// same way] in preload_hooks.cpp): re-entered, it only calls the real function. What PyTorch's
// caching allocator calls is its tracker's to record (Note [PyTorch's own allocator] in
// tracer/format/records.h): those calls are only passed on once the tracker is attached.
#include "allocator/hook_support.h"
#include "allocator/real_functions.h"
#include "allocator/torch_allocator.h"
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

// Whether `caller`'s call is PyTorch's tracker's to record (the hook then records nothing): one
// made by PyTorch's caching allocator, or beneath it by a MemPool's own allocator (NCCL's; Note
// [NCCL's memory beneath PyTorch's allocator] in torch_allocator.cpp).
bool trackedElsewhere(const void* caller) {
  return memtrace::hooks::memoryCallerOf(caller) == memtrace::hooks::Caller::kTorchTracked;
}

// A call that ends something: `record` (given the guard) runs before the real call.
template <typename Real, typename Record>
CUresult recordedBefore(Real real, const void* caller, Record record, auto... arguments) {
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(arguments...);
  RecursionGuard guard;
  if (!trackedElsewhere(caller)) record(guard);
  return real(arguments...);
}

// A call that makes something: `record` runs after the real call succeeded.
template <typename Real, typename Record>
CUresult recordedAfter(Real real, const void* caller, Record record, auto... arguments) {
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(arguments...);
  RecursionGuard guard;
  bool tracked = trackedElsewhere(caller);
  CUresult result = real(arguments...);
  if (result == CUDA_SUCCESS && !tracked) record(guard);
  return result;
}

}  // namespace

extern "C" {

MEMTRACE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                     const CUmemAllocationProp* prop, unsigned long long flags) {
  auto real = MEMTRACE_REAL(kDriver, cuMemCreate);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (RecursionGuard::active()) return real(handle, size, prop, flags);
  RecursionGuard guard;
  bool tracked = trackedElsewhere(MEMTRACE_CALLER);
  CUresult result = real(handle, size, prop, flags);
  // Memory made on the host (a HOST or HOST_NUMA location) is not the device's.
  if (tracked || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return result;
  memtrace::hooks::recordAllocResult(
      guard, result == CUDA_SUCCESS, result == CUDA_ERROR_OUT_OF_MEMORY,
      physicalSource(prop->location.id, MEMTRACE_CALLER),
      handle ? reinterpret_cast<const void*>(static_cast<uintptr_t>(*handle)) : nullptr, size);
  return result;
}

MEMTRACE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                     void* address) {
  return recordedAfter(
      MEMTRACE_REAL(kDriver, cuMemRetainAllocationHandle), MEMTRACE_CALLER,
      [&](const RecursionGuard& guard) {
        if (handle) memtrace::recordPhysicalRetain(guard, *handle);
      },
      handle, address);
}

MEMTRACE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const void* caller = MEMTRACE_CALLER;
  return recordedBefore(
      MEMTRACE_REAL(kDriver, cuMemRelease), caller,
      [&](const RecursionGuard& guard) {
        memtrace::recordPhysicalRelease(guard, physicalSource(-1, caller), handle);
      },
      handle);
}

MEMTRACE_EXPORT CUresult cuMemMap(CUdeviceptr address, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle handle, unsigned long long flags) {
  return recordedAfter(
      MEMTRACE_REAL(kDriver, cuMemMap), MEMTRACE_CALLER,
      [&](const RecursionGuard& guard) {
        memtrace::recordMemoryMap(guard, address, size, offset, handle);
      },
      address, size, offset, handle, flags);
}

MEMTRACE_EXPORT CUresult cuMemUnmap(CUdeviceptr address, size_t size) {
  const void* caller = MEMTRACE_CALLER;
  return recordedBefore(
      MEMTRACE_REAL(kDriver, cuMemUnmap), caller,
      [&](const RecursionGuard& guard) {
        memtrace::recordMemoryUnmap(guard, physicalSource(-1, caller), address, size);
      },
      address, size);
}

MEMTRACE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* address, size_t size, size_t alignment,
                                             CUdeviceptr wanted, unsigned long long flags) {
  return recordedAfter(
      MEMTRACE_REAL(kDriver, cuMemAddressReserve), MEMTRACE_CALLER,
      [&](const RecursionGuard& guard) {
        if (address) memtrace::recordAddressRange(guard, /*reserved=*/true, *address, size);
      },
      address, size, alignment, wanted, flags);
}

MEMTRACE_EXPORT CUresult cuMemAddressFree(CUdeviceptr address, size_t size) {
  return recordedBefore(
      MEMTRACE_REAL(kDriver, cuMemAddressFree), MEMTRACE_CALLER,
      [&](const RecursionGuard& guard) {
        memtrace::recordAddressRange(guard, /*reserved=*/false, address, size);
      },
      address, size);
}

}  // extern "C"
