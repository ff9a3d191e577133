// The hooks' instructions per cudaMalloc + cudaFree in a program that is not PyTorch (Note
// [NCCL's memory beneath PyTorch's allocator] in allocator/torch_allocator.cpp: every call that
// makes or frees memory asks whether PyTorch's allocator is beneath it), counted by callgrind
// around the loop only, under LD_PRELOAD on the simulated GPU's runtime:
//
//   MEMTRACE_STACKS=none LD_PRELOAD="build/allocator/libmemtrace.so $SIMULATED_GPU_LIBRARIES"
//     valgrind --tool=callgrind --instr-atstart=no build/bench/hook_instructions 1000
//   (and 11000; the simulated GPU's environment: docs/performance.md gives the whole command)
//
// The marginal cost of a pair is the difference of the two totals over 10,000; what
// memoryCallerOf takes of it is its inclusive cost (callgrind_annotate --inclusive=yes),
// differenced the same way. The loop waits past the trace file's first flush period first,
// as bench/record_instructions.cpp does.
#include <cuda_runtime_api.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <valgrind/callgrind.h>

#include <chrono>
#include <thread>

int main(int argc, char** argv) {
  long pairs = argc > 1 ? atol(argv[1]) : 1000;
  void* pointer = nullptr;
  // A few rounds before counting: the runtime's first calls, the device's record, the callers.
  for (int i = 0; i < 16; ++i) {
    if (cudaMalloc(&pointer, 1 << 20) != cudaSuccess) return 3;
    cudaFree(pointer);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  CALLGRIND_START_INSTRUMENTATION;
  for (long i = 0; i < pairs; ++i) {
    cudaMalloc(&pointer, 1 << 20);
    cudaFree(pointer);
  }
  CALLGRIND_STOP_INSTRUMENTATION;
  // What a walk of the loaded objects costs grows with them: say how many there were.
  int objects = 0;
  dl_iterate_phdr([](dl_phdr_info*, size_t, void* count) { return ++*static_cast<int*>(count), 0; },
                  &objects);
  printf("%ld pairs, %d loaded objects\n", pairs, objects);
  return 0;
}
