// What the runtime's files share: the calling thread's last error, and the translation of
// the core's answers into cudaError_t.
#pragma once

#include <cuda_runtime_api.h>

#include "simulator/core/device.h"

#define SIMGPU_API extern "C" __attribute__((visibility("default")))

namespace simgpu::runtime {

// Records a failure as the thread's last error (cudaGetLastError) and returns it.
cudaError_t fail(cudaError_t error);
cudaError_t fromStatus(Status status);
// cudaSuccess, or the reason no device can be used (no profile: one line on stderr, once).
cudaError_t ready();
// ready(), and the current device's primary context made (what a call that needs one does).
cudaError_t context();
cudaError_t refused(const char* function, const char* why = nullptr);

}  // namespace simgpu::runtime
