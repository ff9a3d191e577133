// Allocates and frees forever, slowly enough for the 100 ms flusher to write several
// chunks; the test kills it with SIGKILL and reads what it left.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <ctime>

int main() {
  void* held[16] = {};
  for (long i = 0;; ++i) {
    void*& slot = held[i % 16];
    if (slot) cudaFree(slot);
    cudaMalloc(&slot, 4096 + (i % 7) * 512);
    if (i == 1000) {
      std::printf("ready\n");
      std::fflush(stdout);
    }
    timespec pause{0, 20000};  // 20 us: tens of thousands of events a second
    nanosleep(&pause, nullptr);
  }
}
