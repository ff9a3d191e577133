// A fixed sequence of CUDA allocations through every hooked entry point, printing what it
// did so the test can compare the trace with it line by line:
//   alloc <api> <address> <size>   /   free <api> <address>   /   oom <size>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

static void* runtimeAlloc(const char* api, size_t size) {
  void* pointer = nullptr;
  cudaError_t result = cudaMalloc(&pointer, size);
  if (result != cudaSuccess) {
    std::printf("oom %zu\n", size);
    return nullptr;
  }
  std::printf("alloc %s %p %zu\n", api, pointer, size);
  return pointer;
}

int main(int argc, char** argv) {
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  void* a = runtimeAlloc("cudaMalloc", 1000);
  void* b = runtimeAlloc("cudaMalloc", 4096);

  void* c = nullptr;
  if (cudaMallocAsync(&c, 3 << 20, stream) == cudaSuccess)
    std::printf("alloc cudaMallocAsync %p %d\n", c, 3 << 20);
  std::printf("free cudaMalloc %p\n", a);
  cudaFree(a);

  void* d = nullptr;
  if (cudaMallocManaged(&d, 512, 1) == cudaSuccess)
    std::printf("alloc cudaMallocManaged %p %d\n", d, 512);

  cudaSetDevice(1);
  CUdeviceptr e = 0;
  if (cuMemAlloc_v2(&e, 777) == CUDA_SUCCESS)
    std::printf("alloc cuMemAlloc %p %d\n", reinterpret_cast<void*>(e), 777);
  CUdeviceptr f = 0;
  if (cuMemAllocAsync(&f, 2048, nullptr) == CUDA_SUCCESS)
    std::printf("alloc cuMemAllocAsync %p %d\n", reinterpret_cast<void*>(f), 2048);
  std::printf("free cuMemAlloc %p\n", reinterpret_cast<void*>(e));
  cuMemFree_v2(e);
  cudaSetDevice(0);

  // More than the device has (MEMTRACE_GPU_MEMORY): out of memory.
  void* huge = nullptr;
  if (cudaMalloc(&huge, size_t{1} << 40) != cudaSuccess) std::printf("oom %zu\n", size_t{1} << 40);

  std::printf("free cudaMallocAsync %p\n", c);
  cudaFreeAsync(c, stream);
  std::printf("free cudaMalloc %p\n", b);
  cudaFree(b);
  // d (managed, device 0) and f (device 1) stay live to the end.
  (void)argc;
  (void)argv;
  return 0;
}
