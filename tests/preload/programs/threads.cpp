// 8 threads allocate and free concurrently; each keeps its last few allocations live.
// Prints the totals it made and, when libmemtrace.so is loaded, the library's own peak
// counter, which must equal the peak memtrace-report computes from the trace.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
  constexpr int kThreads = 8;
  constexpr int kIterations = 5000;
  constexpr int kKeep = 4;  // allocations each thread leaves live at the end
  std::vector<std::thread> threads;
  std::vector<uint64_t> kept_bytes(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &kept_bytes] {
      uint64_t state = 0x9E3779B97F4A7C15ULL * (t + 1);
      std::vector<std::pair<void*, size_t>> live;
      for (int i = 0; i < kIterations; ++i) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t size = 256 + (state >> 33) % 65536;
        void* pointer = nullptr;
        if (cudaMalloc(&pointer, size) != cudaSuccess) std::abort();
        live.emplace_back(pointer, size);
        if (live.size() > kKeep) {
          cudaFree(live.front().first);
          live.erase(live.begin());
        }
      }
      for (auto& [pointer, size] : live) kept_bytes[t] += size;
    });
  }
  for (auto& thread : threads) thread.join();
  uint64_t kept = 0;
  for (uint64_t bytes : kept_bytes) kept += bytes;
  std::printf("allocations %d\nfrees %d\nlive_bytes %llu\n", kThreads * kIterations,
              kThreads * (kIterations - kKeep), static_cast<unsigned long long>(kept));
  using Counter = uint64_t (*)(int);
  if (auto peak = reinterpret_cast<Counter>(dlsym(RTLD_DEFAULT, "memtrace_peak_bytes")))
    std::printf("library_peak %llu\n", static_cast<unsigned long long>(peak(-1)));
  if (auto current = reinterpret_cast<Counter>(dlsym(RTLD_DEFAULT, "memtrace_current_bytes")))
    std::printf("library_current %llu\n", static_cast<unsigned long long>(current(-1)));
  return 0;
}
