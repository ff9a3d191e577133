// CUDA's virtual memory management the ways its users combine it, each with the moment the
// driver really frees the physical memory (its last reference released and its last mapping
// gone, whichever comes last), which is when memtrace must record the free:
//   - NCCL's buffers (NCCL_CUMEM_ENABLE): create, reserve, map; freed by retaining the handle
//     from the address, releasing it, unmapping, releasing again, freeing the range;
//   - a handle released right after it is mapped: freed at the unmap;
//   - one handle mapped twice: counted once, freed at the second unmap;
//   - one unmap over two mappings end to end: both freed;
//   - created and released without a mapping;
//   - memory on the host (not the device's: not recorded), and a creation refused for lack of
//     memory (a failed allocation).
#include <cuda.h>

#include "simulator/core/simgpu_api.h"
#include "simulator/core/simgpu_testing.h"
#include "tests/preload/programs/account.h"

namespace {

constexpr size_t kPage = 2 << 20;

CUmemAllocationProp deviceMemory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUmemGenericAllocationHandle create(size_t size, int device = 0) {
  CUmemAllocationProp prop = deviceMemory(device);
  CUmemGenericAllocationHandle handle = 0;
  account::require(cuMemCreate(&handle, size, &prop, 0) == CUDA_SUCCESS, "cuMemCreate");
  account::alloc("cuMemCreate", handle, size);
  return handle;
}

CUdeviceptr reserve(size_t size) {
  CUdeviceptr range = 0;
  account::require(cuMemAddressReserve(&range, size, 0, 0, 0) == CUDA_SUCCESS, "reserve");
  return range;
}

void map(CUdeviceptr address, size_t size, CUmemGenericAllocationHandle handle) {
  account::require(cuMemMap(address, size, 0, handle, 0) == CUDA_SUCCESS, "cuMemMap");
}

void ok(CUresult result, const char* what) {
  account::require(result == CUDA_SUCCESS, what);
}

}  // namespace

int main() {
  // NCCL's buffer, on device 1.
  CUmemGenericAllocationHandle nccl = create(2 * kPage, 1);
  CUdeviceptr nccl_range = reserve(2 * kPage);
  map(nccl_range, 2 * kPage, nccl);
  CUmemGenericAllocationHandle retained = 0;
  ok(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(nccl_range)), "retain");
  account::require(retained == nccl, "the retained handle is the buffer's");
  ok(cuMemRelease(retained), "release (the retained reference)");
  ok(cuMemUnmap(nccl_range, 2 * kPage), "unmap");
  account::free("cuMemCreate", nccl);
  ok(cuMemRelease(nccl), "release (the last reference)");
  ok(cuMemAddressFree(nccl_range, 2 * kPage), "address free");

  // Released right after mapping: the mapping keeps it.
  CUdeviceptr range = reserve(8 * kPage);
  CUmemGenericAllocationHandle early = create(kPage);
  map(range, kPage, early);
  ok(cuMemRelease(early), "release while mapped");
  // Mapped twice: one physical allocation.
  CUmemGenericAllocationHandle twice = create(kPage);
  map(range + kPage, kPage, twice);
  map(range + 2 * kPage, kPage, twice);
  ok(cuMemRelease(twice), "release while mapped twice");
  // Two mappings end to end, unmapped by one call.
  CUmemGenericAllocationHandle left = create(kPage);
  CUmemGenericAllocationHandle right = create(kPage);
  map(range + 4 * kPage, kPage, left);
  map(range + 5 * kPage, kPage, right);
  ok(cuMemRelease(left), "release left");
  ok(cuMemRelease(right), "release right");
  // Made, never mapped.
  CUmemGenericAllocationHandle unmapped = create(3 * kPage);

  account::free("cuMemCreate", early);
  ok(cuMemUnmap(range, kPage), "unmap early");
  ok(cuMemUnmap(range + kPage, kPage), "unmap the first of twice");
  account::free("cuMemCreate", twice);
  ok(cuMemUnmap(range + 2 * kPage, kPage), "unmap the second of twice");
  account::free("cuMemCreate", left);
  account::free("cuMemCreate", right);
  ok(cuMemUnmap(range + 4 * kPage, 2 * kPage), "unmap left and right together");
  account::free("cuMemCreate", unmapped);
  ok(cuMemRelease(unmapped), "release unmapped");
  ok(cuMemAddressFree(range, 8 * kPage), "address free");

  // On the host: not the device's memory.
  CUmemAllocationProp host = deviceMemory(0);
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle host_memory = 0;
  ok(cuMemCreate(&host_memory, kPage, &host, 0), "cuMemCreate on the host");
  std::printf("untraced %#llx %zu\n", static_cast<unsigned long long>(host_memory), kPage);
  // More than the device has.
  CUmemAllocationProp prop = deviceMemory(0);
  CUmemGenericAllocationHandle refused = 0;
  account::require(cuMemCreate(&refused, size_t{1} << 40, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY,
                   "an out-of-memory cuMemCreate");
  std::printf("oom %zu cuMemCreate\n", size_t{1} << 40);
  // Live at the end: one page on device 0, mapped.
  CUmemGenericAllocationHandle kept = create(kPage);
  map(reserve(kPage), kPage, kept);
  ok(cuMemRelease(host_memory), "release the host memory");
  std::printf("driver-live %llu\n",
              static_cast<unsigned long long>(simgpu_used_bytes(0) + simgpu_used_bytes(1)));
  return 0;
}
