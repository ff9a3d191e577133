// Stream-ordered memory pools (cudaMallocAsync, cuMemAllocAsync, cudaMemPool*): each
// allocation is device memory of its own, and the pool counts against the device what it has
// reserved, which grows to cover what is allocated from it and shrinks only to its release
// threshold, at a synchronization or cudaMemPoolTrimTo (Note [Pools]).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "simulator/core/device.h"

namespace simgpu {

struct Pool;

Pool* defaultPool(int device);
Pool* createPool(int device);
void destroyPool(Pool* pool);
int poolDevice(Pool* pool);
Status poolAllocate(Pool* pool, void** pointer, size_t size);
// false: not an allocation of a pool.
bool poolFree(void* pointer);
void poolTrim(Pool* pool, uint64_t keep_bytes);
// What a synchronization does to every pool: each shrinks to its release threshold.
void poolsSynchronized(int device);
// cudaMemPoolAttr* (the driver's CUmemPool_attribute numbering); false: unknown attribute.
bool poolSetAttribute(Pool* pool, int attribute, const void* value);
bool poolGetAttribute(Pool* pool, int attribute, void* value);

}  // namespace simgpu
