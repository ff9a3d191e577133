// C++ exceptions thrown and caught while libmemtrace.so is preloaded with native stacks on
// (libunwind loaded): they must unwind through the program's own unwinder as usual.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <stdexcept>
#include <string>

static void* allocateOrThrow(size_t size, int i) {
  void* pointer = nullptr;
  cudaMalloc(&pointer, size);
  if (i % 3 == 0) throw std::runtime_error("planned failure " + std::to_string(i));
  return pointer;
}

int main() {
  int caught = 0;
  for (int i = 0; i < 300; ++i) {
    try {
      void* pointer = allocateOrThrow(1024 + i, i);
      cudaFree(pointer);
    } catch (const std::runtime_error& error) {
      ++caught;
    }
  }
  std::printf("caught %d\n", caught);
  return caught == 100 ? 0 : 1;
}
