// memtrace's own instructions per event on the record path, without stacks: a loop of
// recordAlloc + recordFree (a tensor of PyTorch's caching allocator, as the torch bridge's sink
// records it) with the recorder linked in, counted by callgrind only around the loop.
//
//   valgrind --tool=callgrind --instr-atstart=no build/bench/record_instructions 1000
//   valgrind --tool=callgrind --instr-atstart=no build/bench/record_instructions 11000
//
// The marginal cost of an event is the difference of the two totals over the difference of the
// events (2 per pair), which leaves out what the loop's first round costs once. The totals
// include the loop's own lines and the flusher thread's chunks; what the hooks call alone is
// recordAlloc's and recordFree's inclusive cost (callgrind_annotate --inclusive=yes), differenced
// the same way. Tracing is
// started before the loop (MEMTRACE_STACKS=none, the file in $TMPDIR) and the loop waits
// past the file's first flush period, so it measures the buffered path every later event takes
// (Note [When records reach the file], tracer/recorder/recorder_state.h).
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include <chrono>
#include <string>
#include <thread>

#include "tracer/recorder/memtrace.h"
#include "tracer/recorder/recorder.h"

int main(int argc, char** argv) {
  long pairs = argc > 1 ? atol(argv[1]) : 1000;
  const char* dir = getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/memtrace-instructions-" +
                     std::to_string(getpid()) + ".bin";
  setenv("MEMTRACE_STACKS", "none", 1);
  setenv("MEMTRACE_AUTOSTART", "0", 1);
  if (memtrace_start(path.c_str()) != 0) return 3;
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  memtrace::EventSource source{memtrace::format::Api::kTorchAllocator,
                               memtrace::format::Level::kTensor, 0, 0, nullptr};
  // A few rounds before counting: the device's record, the context, the tables' first slots.
  for (long i = 0; i < 16; ++i) {
    memtrace::RecursionGuard guard;
    const void* address = reinterpret_cast<const void*>(0x7f0000000000 + (i % 4) * 4096);
    memtrace::recordAlloc(guard, source, address, 1024);
    memtrace::recordFree(guard, source, address);
  }
  CALLGRIND_START_INSTRUMENTATION;
  for (long i = 0; i < pairs; ++i) {
    memtrace::RecursionGuard guard;
    const void* address = reinterpret_cast<const void*>(0x7f0000000000 + (i % 4) * 4096);
    memtrace::recordAlloc(guard, source, address, 1024);
    memtrace::recordFree(guard, source, address);
  }
  CALLGRIND_STOP_INSTRUMENTATION;
  memtrace_close();
  remove(path.c_str());
  printf("%ld pairs\n", pairs);
  return 0;
}
