// What a dlsym costs (docs/performance.md, "Every CUDA entry point"): 100 000 lookups of each
// kind, best of five, in the simulated driver's handle and in RTLD_DEFAULT. Run it with and
// without LD_PRELOAD=libmemtrace.so:  dlsym_bench build/simulator/lib/libcuda.so.1
#include <dlfcn.h>
#include <time.h>

#include <cstdio>

namespace {

double nowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

double bestNsPerLookup(void* handle, const char* name) {
  constexpr int kLookups = 100000;
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    double start = nowNs();
    for (int i = 0; i < kLookups; ++i) {
      void* volatile found = dlsym(handle, name);
      (void)found;
    }
    double each = (nowNs() - start) / kLookups;
    if (each < best) best = each;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 64;
  void* driver = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!driver) return 65;
  std::printf("a name not starting with cu (simgpu_driver_proc_address): %.0f ns\n",
              bestNsPerLookup(driver, "simgpu_driver_proc_address"));
  std::printf("a cu name not hooked (cuInit): %.0f ns\n", bestNsPerLookup(driver, "cuInit"));
  std::printf("a hooked name (cuMemAlloc_v2): %.0f ns\n", bestNsPerLookup(driver, "cuMemAlloc_v2"));
  std::printf("RTLD_DEFAULT (printf): %.0f ns\n", bestNsPerLookup(RTLD_DEFAULT, "printf"));
  return 0;
}
