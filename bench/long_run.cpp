// A long training job's allocations through the test CUDA runtime, for the flight recorder's
// budget (issue 33: a day's events, 10^9, leave a file under 50 MiB and the full trace's table
// at the peak; bench/long_run.py runs it). Each kind of buffer comes from its own function
// (a native frame, so that MEMTRACE_STACKS=native names it): parameters, four blocks'
// activations and temporaries, gradients, optimizer state (made in step 1), a large buffer in
// step PEAK_STEP only (the run's peak, long before its end), and the churn of small buffers most
// of a step's events are. The steps are told to the recorder (memtrace_step_end), as the
// Python package's hooks do.
//   long_run EVENTS [PEAK_STEP [CHURN_PAIRS]]
// At the end it prints its own account: events, steps, the peak, and what was live there by
// function, as JSON (the benchmark compares the report's table with it).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kMiB = 1 << 20;

uint64_t g_events = 0;
uint64_t g_live = 0;
uint64_t g_peak = 0;
std::map<std::string, uint64_t> g_live_by_site, g_peak_by_site;
std::unordered_map<void*, std::pair<const char*, size_t>> g_owner;
using StepEnd = int (*)(uint64_t);
StepEnd g_step_end = nullptr;

// Inlined into each site: the site is the innermost frame of its cudaMalloc.
__attribute__((always_inline)) inline void* made(const char* site, size_t size) {
  void* pointer = nullptr;
  if (cudaMalloc(&pointer, size) != cudaSuccess) std::abort();
  ++g_events;
  g_live += size;
  g_live_by_site[site] += size;
  g_owner[pointer] = {site, size};
  if (g_live > g_peak) {  // strictly higher: the first allocation that reached it
    g_peak = g_live;
    g_peak_by_site = g_live_by_site;
  }
  return pointer;
}

void released(void* pointer) {
  auto owner = g_owner.find(pointer);
  g_live -= owner->second.second;
  g_live_by_site[owner->second.first] -= owner->second.second;
  g_owner.erase(owner);
  cudaFree(pointer);
  ++g_events;
}

// One function per site: the innermost native frame the report names.
__attribute__((noinline)) void* parameter() {
  return made("parameter", kMiB);
}
__attribute__((noinline)) void* activation(int block) {
  return made("activation", 2 * kMiB + block * 256 * 1024);
}
__attribute__((noinline)) void* temporary() {
  return made("temporary", 512 * 1024);
}
__attribute__((noinline)) void* gradient() {
  return made("gradient", kMiB);
}
__attribute__((noinline)) void* optimizerState() {
  return made("optimizerState", 2 * kMiB);
}
__attribute__((noinline)) void* peakBuffer() {
  return made("peakBuffer", 24 * kMiB);
}
__attribute__((noinline)) void* churn(long pair) {
  return made("churn", 4096 + (pair % 5) * 512);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: long_run EVENTS [PEAK_STEP [CHURN_PAIRS]]\n");
    return 2;
  }
  uint64_t events = std::strtoull(argv[1], nullptr, 10);
  long peak_step = argc > 2 ? std::atol(argv[2]) : 3;
  long churn_pairs = argc > 3 ? std::atol(argv[3]) : 1450;  // about 3,000 events a step
  g_step_end = reinterpret_cast<StepEnd>(dlsym(RTLD_DEFAULT, "memtrace_step_end"));
  std::vector<void*> parameters, state;
  for (int i = 0; i < 3; ++i) parameters.push_back(parameter());
  uint64_t step = 0;
  while (g_events < events) {
    ++step;
    std::vector<void*> activations;
    for (int block = 0; block < 4; ++block) {
      activations.push_back(activation(block));
      released(temporary());
    }
    void* extra = static_cast<long>(step) == peak_step ? peakBuffer() : nullptr;
    std::vector<void*> gradients;
    for (size_t i = 0; i < parameters.size(); ++i) gradients.push_back(gradient());
    for (void* pointer : activations) released(pointer);
    if (extra) released(extra);
    while (state.size() < parameters.size()) state.push_back(optimizerState());
    if (g_step_end) g_step_end(step);
    for (void* pointer : gradients) released(pointer);
    void* held[8] = {};
    for (long pair = 0; pair < churn_pairs; ++pair) {
      void*& slot = held[pair % 8];
      if (slot) released(slot);
      slot = churn(pair);
    }
    for (void* pointer : held)
      if (pointer) released(pointer);
  }
  std::printf("{\"events\": %llu, \"steps\": %llu, \"peak_bytes\": %llu, \"at_peak\": {",
              static_cast<unsigned long long>(g_events), static_cast<unsigned long long>(step),
              static_cast<unsigned long long>(g_peak));
  bool first = true;
  for (const auto& [site, bytes] : g_peak_by_site) {
    if (!bytes) continue;
    std::printf("%s\"%s\": %llu", first ? "" : ", ", site.c_str(),
                static_cast<unsigned long long>(bytes));
    first = false;
  }
  std::printf("}}\n");
  return 0;
}
