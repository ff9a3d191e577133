// Writes a large synthetic trace for the report benchmark: N events of a model-like
// pattern (a few hundred allocations live, sizes from 512 B to 64 MiB, 200 distinct Python
// stacks over 40 source lines, 1 % of them while tracing is stopped), framed in 1 MiB
// chunks like the recorder's. With RANK and WORLD it is that rank's trace of a job (its rank
// record, and a random pattern of its own), for the job report's benchmark.
//   make_trace OUT EVENTS [RANK WORLD]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/trace_builder.h"

using memtrace::format::MarkerKind;
using memtrace::testing::TraceBuilder;

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: make_trace OUT EVENTS [RANK WORLD]\n");
    return 2;
  }
  long events = std::atol(argv[2]);
  long rank = argc == 5 ? std::atol(argv[3]) : -1;
  TraceBuilder trace;
  trace.processInfo();
  if (rank >= 0)
    trace.distributed(rank, std::atol(argv[4]), rank, std::atol(argv[4]), 0, 0, "bench");
  uint32_t file = trace.string("/home/user/project/model.py");
  std::vector<uint32_t> stacks;
  uint32_t root = trace.pythonStack(0, trace.frame(file, trace.string("main"), 1));
  for (int line = 0; line < 40; ++line) {
    uint32_t function = trace.string("layer" + std::to_string(line));
    uint32_t frame = trace.frame(file, function, 100 + line);
    uint32_t parent = trace.pythonStack(root, frame);
    for (int leaf = 0; leaf < 5; ++leaf)
      stacks.push_back(
          trace.pythonStack(parent, trace.frame(file, function, 1000 + 10 * line + leaf)));
  }
  trace.context(1, 0).marker(0, MarkerKind::kTracingStarted);

  std::mt19937_64 random(42 + (rank >= 0 ? rank : 0));
  std::vector<uint64_t> live;
  uint64_t next_address = 0x7f0000000000, time = 0;
  bool traced = true;
  for (long i = 0; i < events; ++i) {
    time += 200 + random() % 2000;
    // Tracing stops for 1 000 events in every 100 000: 1 % of them untraced.
    if (i % 100000 == 99000 || (i % 100000 == 0 && !traced)) {
      trace.marker(time, traced ? MarkerKind::kTracingStopped : MarkerKind::kTracingStarted);
      traced = !traced;
    }
    bool free = !live.empty() && (live.size() > 600 || random() % 2);
    if (free) {
      size_t index = random() % live.size();
      trace.free(time, live[index]);
      live[index] = live.back();
      live.pop_back();
    } else {
      uint64_t size = 512ull << (random() % 18);
      next_address += (size + 511) & ~511ull;
      live.push_back(next_address);
      uint32_t stack = traced ? stacks[random() % stacks.size()] : 0;
      trace.alloc(time, next_address, size, stack);
    }
    if (trace.chunkBytes() >= (1 << 20)) trace.flushChunk();
  }
  trace.marker(time, MarkerKind::kProcessExit);
  trace.write(argv[1]);
  return 0;
}
