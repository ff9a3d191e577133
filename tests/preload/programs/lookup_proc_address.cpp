// The driver's functions found through cuGetProcAddress, as CUDA's runtime (since 11.4)
// finds every one of them: by base name, at a CUDA version, with stream flags.
// Usage: lookup_proc_address <path of libcuda.so.1>
#include <cuda.h>
#include <cudaTypedefs.h>

#include "tests/preload/programs/account.h"

namespace {

PFN_cuGetProcAddress_v12000 get_proc_address;

template <typename Fn>
Fn ask(const char* name, int version, cuuint64_t flags, const char* label) {
  void* function = nullptr;
  CUdriverProcAddressQueryResult status;
  account::require(get_proc_address(name, &function, version, flags, &status) == CUDA_SUCCESS,
                   label);
  account::lookup(label, function);
  return reinterpret_cast<Fn>(function);
}

}  // namespace

int main(int argc, char** argv) {
  account::require(argc == 2, "usage: lookup_proc_address LIBCUDA");
  void* driver = account::open(argv[1]);
  get_proc_address = account::symbol<PFN_cuGetProcAddress_v12000>(driver, "cuGetProcAddress_v2");
  auto alloc = ask<PFN_cuMemAlloc_v3020>("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_DEFAULT,
                                         "cuMemAlloc@13000");
  auto alloc_async_per_thread = ask<PFN_cuMemAllocAsync_v11020_ptsz>(
      "cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
      "cuMemAllocAsync@12000/per-thread");
  auto free_async = ask<PFN_cuMemFreeAsync_v11020>(
      "cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemFreeAsync@12000/legacy");
  auto from_pool = ask<PFN_cuMemAllocFromPoolAsync_v11020>("cuMemAllocFromPoolAsync", 12000,
                                                           CU_GET_PROC_ADDRESS_DEFAULT,
                                                           "cuMemAllocFromPoolAsync@12000");
  // cuGetProcAddress itself, in its two forms: the 4-argument one of CUDA 11.3 and the one
  // with a status since 12.0; a lookup through either is looked at too.
  ask<PFN_cuGetProcAddress_v12000>("cuGetProcAddress", 12000, 0, "cuGetProcAddress@12000");
  auto get_proc_address_11 =
      ask<PFN_cuGetProcAddress_v11030>("cuGetProcAddress", 11030, 0, "cuGetProcAddress@11030");
  void* free_function = nullptr;
  account::require(get_proc_address_11("cuMemFree", &free_function, 11030, 0) == CUDA_SUCCESS,
                   "cuMemFree through cuGetProcAddress@11030");
  account::lookup("cuMemFree@11030", free_function);
  auto free_ = reinterpret_cast<PFN_cuMemFree_v3020>(free_function);
  // Not hooked: the driver's own.
  ask<PFN_cuCtxGetDevice_v2000>("cuCtxGetDevice", 12000, 0, "cuCtxGetDevice@12000");
  // A variant of cuMemAlloc newer than memtrace knows (the simulated driver's, from 99000 on:
  // Note [A variant from the future] in simulator/driver/driver.cpp):
  // handed out untouched, with a warning; what it allocates is not traced.
  auto future = ask<PFN_cuMemAlloc_v3020>("cuMemAlloc", 99000, 0, "cuMemAlloc@99000");

  CUstream stream = nullptr;
  auto create_stream = reinterpret_cast<decltype(&cuStreamCreate)>(dlsym(driver, "cuStreamCreate"));
  account::require(create_stream && create_stream(&stream, 0) == CUDA_SUCCESS, "cuStreamCreate");
  CUmemoryPool pool = nullptr;
  auto default_pool = reinterpret_cast<decltype(&cuDeviceGetDefaultMemPool)>(
      dlsym(driver, "cuDeviceGetDefaultMemPool"));
  account::require(default_pool && default_pool(&pool, 0) == CUDA_SUCCESS,
                   "cuDeviceGetDefaultMemPool");
  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  account::require(alloc(&a, 2 << 20) == CUDA_SUCCESS, "cuMemAlloc");
  account::alloc("cuMemAlloc", a, 2 << 20);
  account::require(alloc_async_per_thread(&b, 6 << 20, stream) == CUDA_SUCCESS,
                   "cuMemAllocAsync_ptsz");
  account::alloc("cuMemAllocAsync", b, 6 << 20);
  account::require(from_pool(&c, 1 << 20, pool, stream) == CUDA_SUCCESS, "cuMemAllocFromPoolAsync");
  account::alloc("cuMemAllocAsync", c, 1 << 20);
  account::require(future(&d, 7 << 20) == CUDA_SUCCESS, "cuMemAlloc@99000");
  std::printf("untraced %p %d\n", reinterpret_cast<void*>(d), 7 << 20);
  account::free("cuMemAllocAsync", b);
  free_async(b, stream);
  account::free("cuMemAlloc", a);
  free_(a);
  free_(d);  // not traced: its free is not either (an address memtrace never saw live)
  return 0;  // c stays live
}
