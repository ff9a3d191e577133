// exit() from a worker thread while other threads allocate and free (issue 12, row 1):
// static destructors run on the exiting thread while the others are still in the hooks.
// Exits 3 from the worker; any other status (a crash) is the recorder's doing. Its output
// is fully buffered, as a program writing to a pipe or file has it: exit() writes it out
// after every static destructor has run, while the other threads still allocate.
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
  static char buffer[4 << 20];
  std::setvbuf(stdout, buffer, _IOFBF, sizeof(buffer));
  for (int line = 0; line < 40000; ++line) std::printf("line %d of the program's output\n", line);
  std::atomic<long> made{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&made, t] {
      void* held[8] = {};
      for (long i = 0;; ++i) {
        void*& slot = held[i % 8];
        if (slot) cudaFree(slot);
        cudaMalloc(&slot, 4096 + t * 64 + (i % 5) * 256);
        made.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::thread([&made] {
    while (made.load(std::memory_order_relaxed) < 20000) std::this_thread::yield();
    exit(3);
  }).join();
  return 0;
}
