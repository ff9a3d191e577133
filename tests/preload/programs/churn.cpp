// Allocates and frees `iterations` times, pausing `pause_us` between iterations, and exits 0.
// Every `every` iterations it says how far it got and when (CLOCK_MONOTONIC, the clock the
// tests compare against): "progress <allocations> <frees> <ns>"; at the end "done <a> <f>".
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

static long long monotonicNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1000000000LL + now.tv_nsec;
}

int main(int argc, char** argv) {
  long iterations = argc > 1 ? std::atol(argv[1]) : 20000;
  long pause_us = argc > 2 ? std::atol(argv[2]) : 0;
  long every = argc > 3 ? std::atol(argv[3]) : 0;
  void* held[16] = {};
  long allocations = 0, frees = 0;
  for (long i = 0; i < iterations; ++i) {
    void*& slot = held[i % 16];
    if (slot) {
      cudaFree(slot);
      ++frees;
    }
    if (cudaMalloc(&slot, 4096 + (i % 7) * 512) == cudaSuccess) ++allocations;
    if (every > 0 && (i + 1) % every == 0) {
      std::printf("progress %ld %ld %lld\n", allocations, frees, monotonicNs());
      std::fflush(stdout);
    }
    if (pause_us > 0) {
      timespec pause{0, pause_us * 1000};
      nanosleep(&pause, nullptr);
    }
  }
  std::printf("done %ld %ld\n", allocations, frees);
  return 0;
}
