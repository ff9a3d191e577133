// What every hook in this folder shares: where an event comes from (device, stream, level)
// and the common shape of the allocation hooks (Note [Every hook reads the same way]).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tracer/recorder/recorder.h"

namespace memtrace::hooks {

// The level of runtime-API events under LD_PRELOAD (chosen at load: library_init.cpp).
format::Level preloadLevel();

// The current device of the runtime API (cudaGetDevice), or -1.
int runtimeDevice();
// The device of a stream (cudaStreamGetDevice where the runtime has it), or the current.
int streamDevice(cudaStream_t stream);
// The device of the current driver context, or -1.
int driverDevice();

inline uint64_t streamId(const void* stream) {
  return reinterpret_cast<uintptr_t>(stream);
}

// Records the outcome of a real allocation call.
inline void recordAllocResult(const RecursionGuard& guard, bool succeeded, bool out_of_memory,
                              const EventSource& source, const void* address, uint64_t size) {
  if (succeeded && address)
    recordAlloc(guard, source, address, size);
  else if (out_of_memory)
    recordFailedAlloc(guard, source, size);
}

}  // namespace memtrace::hooks
