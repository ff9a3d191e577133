// The cost of recording an allocation and its free, against the untraced call in the same
// run. Run under LD_PRELOAD=libmemtrace.so with MEMTRACE_AUTOSTART=0 (bench/run.py does):
// the hooks are then the ones a traced program goes through.
//
// Counters: ns_per_pair is one cudaMalloc + one cudaFree of the test runtime (host memory),
// hooked or direct; the recording cost of one event is (hooked - direct) / 2.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

extern "C" uint64_t bench_hooked(long pairs, long size);
extern "C" uint64_t bench_direct(long pairs, long size);
extern "C" uint64_t bench_hooked_deep(int depth, long pairs, long size);

namespace {

constexpr long kPairs = 20000;

template <typename Fn>
Fn api(const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
  if (!fn) {
    std::fprintf(stderr, "run this under LD_PRELOAD=libmemtrace.so (missing %s)\n", name);
    std::exit(2);
  }
  return fn;
}

std::string tracePath() {
  const char* dir = getenv("MEMTRACE_BENCH_DIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/memtrace-bench-" + std::to_string(getpid()) +
         ".bin";
}

// Tracing with `stacks` around the benchmark's loop; reports bytes written per event.
// A file's first flush period is written through, a write per record (Note [When records
// reach the file], tracer/recorder/recorder_state.h): `steady` waits past it, so that the loop
// measures the buffered path every later event takes; BM_TracedNoStackFirstPeriod measures
// the window itself.
class Tracing {
 public:
  explicit Tracing(const char* stacks, bool steady = true) : path_(tracePath()) {
    setenv("MEMTRACE_STACKS", stacks, 1);
    if (api<int (*)(const char*)>("memtrace_start")(path_.c_str()) != 0) std::exit(3);
    if (steady) std::this_thread::sleep_for(std::chrono::milliseconds(110));
  }
  ~Tracing() {
    api<int (*)()>("memtrace_close")();
    std::remove(path_.c_str());
  }
  // The bytes of the trace's whole chunks once flushed: a mapped trace's file is longer than
  // its records (the window allocated past them, Note [Records reach the page cache as they
  // are written]), so its chunks are walked, up to the (empty) open chunk.
  long fileBytes() const {
    api<int (*)()>("memtrace_flush")();
    FILE* file = std::fopen(path_.c_str(), "rb");
    if (!file) return 0;
    long end = 16;
    unsigned char header[12];
    while (std::fseek(file, end, SEEK_SET) == 0 && std::fread(header, 1, 12, file) == 12) {
      long size = header[0] | header[1] << 8 | header[2] << 16 | long{header[3]} << 24;
      if (size == 0) break;
      end += 12 + size;
    }
    std::fclose(file);
    return end;
  }

 private:
  std::string path_;
};

void report(benchmark::State& state, uint64_t ns, long pairs) {
  state.SetIterationTime(static_cast<double>(ns) / 1e9);
  state.counters["ns_per_pair"] =
      benchmark::Counter(static_cast<double>(pairs), benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}

void BM_Direct(benchmark::State& state) {
  for (auto _ : state) report(state, bench_direct(kPairs, 4096), kPairs);
}

void BM_HookedNotTracing(benchmark::State& state) {
  // Loaded, but no trace file: counted only (what the pluggable allocator costs before
  // start_tracing()).
  for (auto _ : state) report(state, bench_hooked(kPairs, 4096), kPairs);
}

void tracedLoop(benchmark::State& state, const char* stacks, int depth) {
  Tracing tracing(stacks);
  long before = tracing.fileBytes();
  long events = 0;
  for (auto _ : state) {
    report(state, depth ? bench_hooked_deep(depth, kPairs, 4096) : bench_hooked(kPairs, 4096),
           kPairs);
    events += 2 * kPairs;
  }
  state.counters["bytes_per_event"] =
      static_cast<double>(tracing.fileBytes() - before) / static_cast<double>(events);
}

void BM_TracedNoStack(benchmark::State& state) {
  tracedLoop(state, "none", 0);
}

// A fresh file each iteration, and few enough pairs to stay inside its first flush period:
// what every event costs while it is written through (a forked child's whole life, too).
void BM_TracedNoStackFirstPeriod(benchmark::State& state) {
  constexpr long kWindowPairs = 2000;
  long events = 0;
  long bytes = 0;
  for (auto _ : state) {
    Tracing tracing("none", /*steady=*/false);
    long before = tracing.fileBytes();
    report(state, bench_hooked(kWindowPairs, 4096), kWindowPairs);
    bytes += tracing.fileBytes() - before;
    events += 2 * kWindowPairs;
  }
  state.counters["bytes_per_event"] = static_cast<double>(bytes) / static_cast<double>(events);
}
void BM_TracedNative32(benchmark::State& state) {
  tracedLoop(state, "native", 40);
}

BENCHMARK(BM_Direct)->UseManualTime()->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HookedNotTracing)->UseManualTime()->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_TracedNoStack)->UseManualTime()->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_TracedNoStackFirstPeriod)->UseManualTime()->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_TracedNative32)->UseManualTime()->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
