#include "simulator/core/pools.h"

#include <cuda.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "simulator/core/testing.h"

// Note [Pools]
// A real pool reserves physical memory in chunks and maps allocations into it; it keeps what
// is freed up to its release threshold (0 by default: everything beyond what is allocated is
// returned at the next synchronization). The simulated pool keeps the two figures the program
// can see, what is allocated from it and what it holds (cudaMemPoolAttrUsedMemCurrent,
// cudaMemPoolAttrReservedMemCurrent, and what cudaMemGetInfo counts), with the reserve grown
// to exactly what is allocated (in 2 MiB steps) when it runs short. A real pool can hold more
// (its chunks are larger and fragment), so an out-of-memory under cudaMallocAsync can come
// somewhat earlier on the card than here; under PyTorch's own caching allocator (its default)
// no pool is used.

namespace simgpu {

struct Pool {
  int device;
  uint64_t used = 0;
  uint64_t reserved = 0;
  uint64_t threshold = 0;
  uint64_t used_high = 0;
  uint64_t reserved_high = 0;
};

namespace {

constexpr uint64_t kStep = uint64_t{2} << 20;

struct Pools {
  std::mutex mutex;
  std::vector<Pool*> all;
  std::vector<Pool*> defaults = std::vector<Pool*>(64, nullptr);
  std::unordered_map<uintptr_t, std::pair<Pool*, uint64_t>> allocations;
};

Pools& pools() {
  static Pools* instance = new Pools;
  return *instance;
}

// Shrinks to max(used, keep), in whole steps. pools().mutex held.
void shrink(Pool* pool, uint64_t keep) {
  uint64_t floor = pool->used > keep ? pool->used : keep;
  if (floor >= pool->reserved) return;  // also a threshold of UINT64_MAX: keep everything
  floor = (floor + kStep - 1) / kStep * kStep;
  if (pool->reserved <= floor) return;
  uncharge(pool->device, pool->reserved - floor);
  pool->reserved = floor;
}

}  // namespace

Pool* defaultPool(int device) {
  if (device < 0 || device >= 64) return nullptr;
  std::lock_guard<std::mutex> lock(pools().mutex);
  Pool*& pool = pools().defaults[device];
  if (!pool) {
    pool = new Pool{device};
    pools().all.push_back(pool);
  }
  return pool;
}

Pool* createPool(int device) {
  std::lock_guard<std::mutex> lock(pools().mutex);
  auto* pool = new Pool{device};
  pools().all.push_back(pool);
  return pool;
}

void destroyPool(Pool* pool) {
  std::lock_guard<std::mutex> lock(pools().mutex);
  shrink(pool, 0);
  // Its allocations stay valid until freed (CUDA frees them with the pool; nobody relies on it).
}

int poolDevice(Pool* pool) {
  return pool->device;
}

Status poolAllocate(Pool* pool, void** pointer, size_t size) {
  testing::noteStreamOrderedAllocation();
  uint64_t bytes = chargedBytes(size ? size : 1);
  {
    std::lock_guard<std::mutex> lock(pools().mutex);
    if (pool->used + bytes > pool->reserved) {
      uint64_t grow = (pool->used + bytes - pool->reserved + kStep - 1) / kStep * kStep;
      if (!charge(pool->device, grow)) return Status::kOutOfMemory;
      pool->reserved += grow;
      if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
    }
    pool->used += bytes;
    if (pool->used > pool->used_high) pool->used_high = pool->used;
  }
  Status status = allocate(pointer, size ? size : 1, pool->device, MemoryKind::kDevice, false);
  std::lock_guard<std::mutex> lock(pools().mutex);
  if (status != Status::kSuccess) {
    pool->used -= bytes;
    return status;
  }
  pools().allocations[reinterpret_cast<uintptr_t>(*pointer)] = {pool, bytes};
  return Status::kSuccess;
}

bool poolFree(void* pointer) {
  {
    std::lock_guard<std::mutex> lock(pools().mutex);
    auto it = pools().allocations.find(reinterpret_cast<uintptr_t>(pointer));
    if (it == pools().allocations.end()) return false;
    it->second.first->used -= it->second.second;
    pools().allocations.erase(it);
  }
  release(pointer);
  return true;
}

void poolTrim(Pool* pool, uint64_t keep_bytes) {
  testing::notePoolTrim();
  std::lock_guard<std::mutex> lock(pools().mutex);
  shrink(pool, keep_bytes);
}

void poolsSynchronized(int device) {
  std::lock_guard<std::mutex> lock(pools().mutex);
  for (Pool* pool : pools().all)
    if (device < 0 || pool->device == device) shrink(pool, pool->threshold);
}

bool poolSetAttribute(Pool* pool, int attribute, const void* value) {
  std::lock_guard<std::mutex> lock(pools().mutex);
  switch (static_cast<CUmemPool_attribute>(attribute)) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->threshold = *static_cast<const uint64_t*>(value);
      return true;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      pool->reserved_high = pool->reserved;
      return true;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      pool->used_high = pool->used;
      return true;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return true;
    default:
      return false;
  }
}

bool poolGetAttribute(Pool* pool, int attribute, void* value) {
  std::lock_guard<std::mutex> lock(pools().mutex);
  switch (static_cast<CUmemPool_attribute>(attribute)) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<uint64_t*>(value) = pool->threshold;
      return true;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *static_cast<uint64_t*>(value) = pool->reserved;
      return true;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *static_cast<uint64_t*>(value) = pool->reserved_high;
      return true;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<uint64_t*>(value) = pool->used;
      return true;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<uint64_t*>(value) = pool->used_high;
      return true;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = 1;
      return true;
    default:
      return false;
  }
}

}  // namespace simgpu
