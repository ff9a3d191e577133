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

// What every kernel answers about itself (cudaFuncGetAttributes, cuFuncGetAttribute): the
// simulated device reads no machine code, so a kernel is taken to use 32 registers a thread,
// no local memory and no static shared memory, with blocks of up to 1024 threads.
inline constexpr int kRegistersPerThread = 32;

// How many blocks of `block_size` threads and `dynamic_shared` bytes of shared memory a
// multiprocessor of the card runs at once, by its threads, registers, shared memory and block
// limits (the occupancy calculator's rule, with kRegistersPerThread); 0 without a profile.
int activeBlocksPerMultiprocessor(int block_size, size_t dynamic_shared);

}  // namespace simgpu
