// Which of a fatbinary's images CUDA loads on a device: what a kernel's architecture is there
// (cudaFuncGetAttributes's ptxVersion and binaryVersion), and whether it can run at all.
#pragma once

namespace simgpu {

// The architecture (10 * major + minor) of the image CUDA would load from `fatbinary` (the
// __fatBinC_Wrapper_t a program registers, or the fatbinary itself) on a device of compute
// capability `device` (90 for 9.0): the newest machine code (SASS) of the device's major
// version no newer than the device, else the newest PTX no newer than the device (compiled
// when loaded). 0: no image the device can run. -1: not a fatbinary memtrace can read.
int loadedArchitecture(const void* fatbinary, int device);

}  // namespace simgpu
