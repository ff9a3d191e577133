// What a program that dies keeps of its own account: how many allocations and frees it made,
// counted in a file it maps shared ($DYING_ACCOUNT), after each CUDA call returned. The page
// cache keeps the counts whatever ends the program (SIGKILL included), so that a test can
// compare the trace with every event made before the end (tests/preload/test_dying.py).
#pragma once

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace dying {

struct Counts {
  std::atomic<uint64_t> allocations;
  std::atomic<uint64_t> frees;
};

inline Counts* counts() {
  static Counts* mapped = [] {
    const char* path = std::getenv("DYING_ACCOUNT");
    int fd = path ? open(path, O_RDWR | O_CREAT | O_TRUNC, 0644) : -1;
    if (fd < 0 || ftruncate(fd, 4096) != 0) std::abort();
    void* memory = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (memory == MAP_FAILED) std::abort();
    close(fd);
    return static_cast<Counts*>(memory);
  }();
  return mapped;
}

// Allocation and free pairs, `live` allocations kept at a time (the slots are the caller's).
inline void churn(void** slots, int live, long pairs, long& next) {
  Counts* account = counts();
  for (long i = 0; i < pairs; ++i, ++next) {
    void*& slot = slots[next % live];
    if (slot) {
      cudaFree(slot);
      slot = nullptr;
      account->frees.fetch_add(1, std::memory_order_release);
    }
    if (cudaMalloc(&slot, 4096 + (next % 7) * 512) == cudaSuccess)
      account->allocations.fetch_add(1, std::memory_order_release);
  }
}

}  // namespace dying
