// What every hook in this folder shares: where an event comes from (device, stream, level)
// and the common shape of the allocation hooks (Note [Every hook reads the same way]).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tracer/recorder/recorder.h"

// cuda.h names the 5-argument lookup cuGetProcAddress (cuGetProcAddress_v2); the driver also
// exports the 4-argument one of CUDA 11.3 under that name, and memtrace hooks both.
#undef cuGetProcAddress

// The hooked functions the CUDA headers do not declare under their exported names: the
// per-thread-default-stream variants (what programs built with --default-stream per-thread
// call; same signatures) and CUDA 11.3's cuGetProcAddress.
extern "C" {
cudaError_t cudaMallocAsync_ptsz(void**, size_t, cudaStream_t);
cudaError_t cudaFreeAsync_ptsz(void*, cudaStream_t);
cudaError_t cudaMallocFromPoolAsync_ptsz(void**, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char*, void**, unsigned long long,
                                         cudaDriverEntryPointQueryResult*);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char*, void**, unsigned int,
                                                  unsigned long long,
                                                  cudaDriverEntryPointQueryResult*);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
}

// The return address of the hook it is written in: the program's frame that called CUDA
// (Note [Every hook reads the same way] in preload_hooks.cpp).
#define MEMTRACE_CALLER __builtin_return_address(0)

namespace memtrace::hooks {

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
