// Plain CUDA C++ for tools/gpu/frameworks_check.py: runtime allocations, linked with the
// dynamic runtime (its calls reach memtrace's runtime hooks) or the static one (nvcc's
// default: only the driver hooks see them, through cuGetProcAddress). Prints its account in
// tests/preload/programs/account.h's format.
#include <cuda_runtime_api.h>

#include <cstdio>

static void* allocate(size_t size) {
  void* pointer = nullptr;
  if (cudaMalloc(&pointer, size) != cudaSuccess) return nullptr;
  std::printf("alloc cudaMalloc %p %zu\n", pointer, size);
  return pointer;
}

int main() {
  void* a = allocate(64 << 20);
  void* b = allocate(3 << 20);
  void* c = nullptr;
  cudaStream_t stream = nullptr;
  if (cudaMallocAsync(&c, 10 << 20, stream) == cudaSuccess)
    std::printf("alloc cudaMallocAsync %p %d\n", c, 10 << 20);
  std::printf("free cudaMalloc %p\n", a);
  cudaFree(a);
  std::printf("free cudaMallocAsync %p\n", c);
  cudaFreeAsync(c, stream);
  cudaStreamSynchronize(stream);
  void* d = allocate(1 << 20);
  (void)b;
  (void)d;
  return a && b && c && d ? 0 : 1;
}
