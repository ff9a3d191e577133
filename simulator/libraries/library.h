// What the simulated math and communication libraries share: a handle that remembers what the
// program told it (its stream, its workspace, its modes), and the entry-point macro. Each
// library's own types are declared in its file from NVIDIA's published API (the values and
// layouts the program passes), checked against the real headers by simulator.headers
// (tests/simulator/check_headers.cpp) where those headers are at hand.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "simulator/core/device.h"
#include "simulator/core/work.h"

#define SIMGPU_API extern "C" __attribute__((visibility("default")))

namespace simgpu {

struct LibraryHandle {
  void* stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int math_mode = 0;
  int pointer_mode = 0;
  int atomics_mode = 0;
  int sm_count_target = 0;
  int device = 0;
};

inline LibraryHandle* newHandle() {
  auto* handle = new LibraryHandle;
  handle->device = currentDevice();
  return handle;
}

}  // namespace simgpu
