// The driver's functions found through the runtime's cudaGetDriverEntryPoint and
// cudaGetDriverEntryPointByVersion, as PyTorch finds cuMemCreate and kin for its expandable
// segments; the segment grows and shrinks as c10's ExpandableSegment does (one physical page
// created then mapped, unmapped then released), beside a plain cudaMalloc.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "simulator/core/simgpu_api.h"
#include "simulator/core/simgpu_testing.h"
#include "tests/preload/programs/account.h"

// PyTorch still calls the deprecated cudaGetDriverEntryPoint on older releases.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

extern "C" cudaError_t cudaGetDriverEntryPoint_ptsz(const char*, void**, unsigned long long,
                                                    cudaDriverEntryPointQueryResult*);

namespace {

template <typename Fn>
Fn entryPoint(const char* name, int version) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status;
  account::require(cudaGetDriverEntryPointByVersion(name, &function, version, cudaEnableDefault,
                                                    &status) == cudaSuccess &&
                       status == cudaDriverEntryPointSuccess,
                   name);
  account::lookup(name, function);
  return reinterpret_cast<Fn>(function);
}

constexpr size_t kPage = 2 << 20;  // the segment's page, CUDA's granularity

}  // namespace

int main() {
  // The device's primary context first, as PyTorch makes it (cudaSetDevice initializes it since
  // CUDA 12): memtrace reads the device's memory only where a context is current.
  account::require(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status;
  account::require(
      cudaGetDriverEntryPoint("cuMemAlloc", &function, cudaEnableDefault, &status) == cudaSuccess,
      "cudaGetDriverEntryPoint");
  account::lookup("cuMemAlloc/cudaGetDriverEntryPoint", function);
  auto alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(function);
  account::require(cudaGetDriverEntryPoint_ptsz("cuMemAllocAsync", &function, cudaEnableDefault,
                                                &status) == cudaSuccess,
                   "cudaGetDriverEntryPoint_ptsz");
  account::lookup("cuMemAllocAsync/cudaGetDriverEntryPoint_ptsz", function);

  auto create = entryPoint<PFN_cuMemCreate_v10020>("cuMemCreate", 12000);
  auto map = entryPoint<PFN_cuMemMap_v10020>("cuMemMap", 12000);
  auto set_access = entryPoint<PFN_cuMemSetAccess_v10020>("cuMemSetAccess", 12000);
  auto unmap = entryPoint<PFN_cuMemUnmap_v10020>("cuMemUnmap", 12000);
  auto release = entryPoint<PFN_cuMemRelease_v10020>("cuMemRelease", 12000);
  auto reserve = entryPoint<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve", 12000);
  auto address_free = entryPoint<PFN_cuMemAddressFree_v10020>("cuMemAddressFree", 12000);

  // The segment: 16 pages of address space, no memory yet.
  CUdeviceptr segment = 0;
  account::require(reserve(&segment, 16 * kPage, 0, 0, 0) == CUDA_SUCCESS, "reserve");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUmemGenericAllocationHandle pages[16] = {};
  auto grow = [&](int page) {
    account::require(create(&pages[page], kPage, &prop, 0) == CUDA_SUCCESS, "cuMemCreate");
    account::alloc("cuMemCreate", pages[page], kPage);
    account::require(map(segment + page * kPage, kPage, 0, pages[page], 0) == CUDA_SUCCESS,
                     "cuMemMap");
    account::require(set_access(segment + page * kPage, kPage, &access, 1) == CUDA_SUCCESS,
                     "cuMemSetAccess");
  };
  auto shrink = [&](int page) {
    account::require(unmap(segment + page * kPage, kPage) == CUDA_SUCCESS, "cuMemUnmap");
    account::free("cuMemCreate", pages[page]);
    account::require(release(pages[page]) == CUDA_SUCCESS, "cuMemRelease");
  };
  grow(0);
  grow(1);
  grow(2);
  void* plain = nullptr;
  account::require(cudaMalloc(&plain, 3 << 20) == cudaSuccess, "cudaMalloc");
  account::alloc("cudaMalloc", plain, 3 << 20);
  CUdeviceptr driver_block = 0;
  account::require(alloc(&driver_block, 1 << 20) == CUDA_SUCCESS, "cuMemAlloc");
  account::alloc("cuMemAlloc", driver_block, 1 << 20);
  shrink(2);
  shrink(1);
  grow(1);
  account::free("cudaMalloc", plain);
  account::require(cudaFree(plain) == cudaSuccess, "cudaFree");
  shrink(1);
  shrink(0);
  account::require(address_free(segment, 16 * kPage) == CUDA_SUCCESS, "cuMemAddressFree");
  std::printf("driver-live %llu\n",
              static_cast<unsigned long long>(simgpu_used_bytes(0) + simgpu_used_bytes(1)));
  std::printf("memory-info-capture-mode %d\n", simgpu_testing_capture_mode_at_last_memory_info());
  return 0;  // driver_block stays live
}
