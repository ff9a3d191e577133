// A library that brings the CUDA runtime as its own dependency; dlopen_local.cpp loads it
// with RTLD_LOCAL, as Python loads an extension module, so libcudart is not in the global
// scope and dlsym(RTLD_NEXT) from a preloaded library cannot find it.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

extern "C" __attribute__((visibility("default"))) int workload(void) {
  void* a = nullptr;
  void* b = nullptr;
  if (cudaMalloc(&a, 1 << 20) != cudaSuccess) return 1;
  if (cudaMalloc(&b, 5000) != cudaSuccess) return 2;
  return cudaFree(a) == cudaSuccess ? 0 : 3;
}

namespace {

// The object dladdr names for `function`, or "-".
const char* objectOf(void* function) {
  Dl_info info{};
  if (!function || !dladdr(function, &info) || !info.dli_fname) return "-";
  const char* name = info.dli_fname;
  for (const char* p = name; *p; ++p)
    if (*p == '/') name = p + 1;
  return name;
}

}  // namespace

// What dlsym's pseudo handles answer when this library asks: glibc answers them relative to
// the caller, and a library loaded RTLD_LOCAL sees its own dependencies (libcudart here) that
// the global scope does not have. Prints "scope <how> <object>" lines.
extern "C" __attribute__((visibility("default"))) int lookups(void) {
  std::printf("scope default-cudaRuntimeGetVersion %s\n",
              objectOf(dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion")));
  std::printf("scope next-cudaMalloc %s\n", objectOf(dlsym(RTLD_NEXT, "cudaMalloc")));
  std::printf("scope next-cudaGetDevice %s\n", objectOf(dlsym(RTLD_NEXT, "cudaGetDevice")));
  return 0;
}
