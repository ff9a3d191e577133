// The CUDA driver found with dlopen + dlsym, as JAX/XLA, NCCL, Numba and CUDA Python find it.
// Usage: lookup_driver_dlsym <path of libcuda.so.1>
#include <cuda.h>

#include "tests/preload/programs/account.h"

int main(int argc, char** argv) {
  account::require(argc == 2, "usage: lookup_driver_dlsym LIBCUDA");
  void* driver = account::open(argv[1]);
  auto alloc = account::symbol<decltype(&cuMemAlloc_v2)>(driver, "cuMemAlloc_v2");
  auto free_ = account::symbol<decltype(&cuMemFree_v2)>(driver, "cuMemFree_v2");
  auto managed = account::symbol<decltype(&cuMemAllocManaged)>(driver, "cuMemAllocManaged");
  auto alloc_async = account::symbol<decltype(&cuMemAllocAsync)>(driver, "cuMemAllocAsync");
  auto free_async = account::symbol<decltype(&cuMemFreeAsync)>(driver, "cuMemFreeAsync");
  account::symbol<decltype(&cuCtxGetDevice)>(driver, "cuCtxGetDevice");  // not hooked

  CUstream stream = nullptr;
  auto create_stream = reinterpret_cast<decltype(&cuStreamCreate)>(dlsym(driver, "cuStreamCreate"));
  account::require(create_stream && create_stream(&stream, 0) == CUDA_SUCCESS, "cuStreamCreate");
  CUdeviceptr a = 0, b = 0, c = 0;
  account::require(alloc(&a, 5 << 20) == CUDA_SUCCESS, "cuMemAlloc_v2");
  account::alloc("cuMemAlloc", a, 5 << 20);
  account::require(alloc_async(&b, 1 << 20, stream) == CUDA_SUCCESS, "cuMemAllocAsync");
  account::alloc("cuMemAllocAsync", b, 1 << 20);
  account::require(managed(&c, 8192, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS, "cuMemAllocManaged");
  account::alloc("cuMemAllocManaged", c, 8192);
  account::free("cuMemAlloc", a);
  free_(a);
  account::free("cuMemAllocAsync", b);
  free_async(b, stream);
  return 0;  // c stays live
}
