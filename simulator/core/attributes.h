// What a simulated card answers to cuDeviceGetAttribute / cudaDeviceGetAttribute (one
// numbering: the runtime's cudaDevAttr values are the driver's CUdevice_attribute values)
// and to cudaGetDeviceProperties.
#pragma once

#include <cuda_runtime_api.h>

namespace simgpu {

// false: an attribute the simulated device does not know (the caller refuses it).
bool deviceAttribute(int attribute, int device, int* value);
void deviceProperties(cudaDeviceProp* properties, int device);
// The card's UUID: 16 bytes made from the profile's name and the device index, stable across
// runs, with "memtrace" in the first bytes so that nobody mistakes it for a real card's.
void deviceUuid(unsigned char uuid[16], int device);

}  // namespace simgpu
