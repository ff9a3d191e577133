// Allocations three calls deep in named functions, for the native-stack tests.
#include <cuda_runtime_api.h>

#include <cstdio>

extern "C" __attribute__((noinline)) void* allocateLayerWeights(size_t size) {
  void* pointer = nullptr;
  cudaMalloc(&pointer, size);
  asm volatile("");  // keep the call from becoming a tail call
  return pointer;
}

extern "C" __attribute__((noinline)) void* buildLayer(size_t size) {
  void* pointer = allocateLayerWeights(size);
  asm volatile("");
  return pointer;
}

extern "C" __attribute__((noinline)) void* allocateScratch(size_t size) {
  void* pointer = nullptr;
  cudaMalloc(&pointer, size);
  asm volatile("");
  return pointer;
}

int main() {
  void* layers[4];
  for (void*& layer : layers) layer = buildLayer(1 << 20);
  void* scratch = allocateScratch(64 << 10);
  std::printf("done %p %p\n", layers[0], scratch);
  return 0;
}
