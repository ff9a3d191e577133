// What the driver's files share.
#pragma once

#include <cuda.h>

#include "simulator/core/device.h"

#define SIMGPU_API extern "C" __attribute__((visibility("default")))

namespace simgpu::driver {

CUresult fromStatus(Status status);
// CUDA_SUCCESS, or why no device can be used (said once on stderr).
CUresult ready();
CUresult refused(const char* function, const char* why = nullptr);
CUcontext context(int device);
int contextDevice(CUcontext ctx);

}  // namespace simgpu::driver
