// A library that brings the CUDA runtime as its own dependency; dlopen_local.cpp loads it
// with RTLD_LOCAL, as Python loads an extension module, so libcudart is not in the global
// scope and dlsym(RTLD_NEXT) from a preloaded library cannot find it.
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("default"))) int workload(void) {
  void* a = nullptr;
  void* b = nullptr;
  if (cudaMalloc(&a, 1 << 20) != cudaSuccess) return 1;
  if (cudaMalloc(&b, 5000) != cudaSuccess) return 2;
  return cudaFree(a) == cudaSuccess ? 0 : 3;
}
