// The CUDA runtime found with dlopen + dlsym, as ctypes with a library handle or a plugin
// loader finds it: the program links no CUDA library, so only memtrace's dlsym can hand it
// the hooks. Usage: lookup_runtime_dlsym <path of libcudart.so.13>
#include <cuda_runtime_api.h>

#include "tests/preload/programs/account.h"

int main(int argc, char** argv) {
  account::require(argc == 2, "usage: lookup_runtime_dlsym LIBCUDART");
  void* runtime = account::open(argv[1]);
  auto malloc_ = account::symbol<decltype(&cudaMalloc)>(runtime, "cudaMalloc");
  auto free_ = account::symbol<decltype(&cudaFree)>(runtime, "cudaFree");
  auto malloc_async = account::symbol<decltype(&cudaMallocAsync)>(runtime, "cudaMallocAsync");
  auto free_async = account::symbol<decltype(&cudaFreeAsync)>(runtime, "cudaFreeAsync");
  // A function memtrace does not hook: handed out as it is.
  account::symbol<decltype(&cudaGetDevice)>(runtime, "cudaGetDevice");
  // The same through dlvsym, at the version the real runtime gives its symbols.
  auto versioned =
      reinterpret_cast<decltype(&cudaMalloc)>(dlvsym(runtime, "cudaMalloc", "libcudart.so.13"));
  account::lookup("cudaMalloc@libcudart.so.13", reinterpret_cast<const void*>(versioned));

  cudaStream_t stream = nullptr;
  auto create_stream =
      reinterpret_cast<decltype(&cudaStreamCreate)>(dlsym(runtime, "cudaStreamCreate"));
  account::require(create_stream && create_stream(&stream) == cudaSuccess, "cudaStreamCreate");
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  account::require(malloc_(&a, 1 << 20) == cudaSuccess, "cudaMalloc");
  account::alloc("cudaMalloc", a, 1 << 20);
  account::require(malloc_async(&b, 3 << 20, stream) == cudaSuccess, "cudaMallocAsync");
  account::alloc("cudaMallocAsync", b, 3 << 20);
  account::free("cudaMalloc", a);
  free_(a);
  account::require(versioned(&c, 4096) == cudaSuccess, "cudaMalloc (dlvsym)");
  account::alloc("cudaMalloc", c, 4096);
  account::free("cudaMallocAsync", b);
  free_async(b, stream);
  account::require(malloc_(&d, 512) == cudaSuccess, "cudaMalloc");
  account::alloc("cudaMalloc", d, 512);
  // c and d stay live to the end.
  return 0;
}
