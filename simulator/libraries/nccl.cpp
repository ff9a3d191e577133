// NCCL (libnccl.so.2): communicators that know their rank, size and device, and collectives
// that move nothing (each rank runs on its own simulated device; Note [Collectives]).
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "simulator/libraries/library.h"

// Note [Collectives]
// A job of N ranks runs as N processes, each with its own simulated device, and no rank waits
// for another: each runs at its own pace, as if every collective had completed when it was
// issued. Device memory holds only what small copies put there (Note [Values on the simulated
// device] in simulator/core/device.cpp), and a small collective (every buffer at most
// kKeptBytes) moves those values as if every rank had contributed this rank's: the program is
// taken to be SPMD, every rank the same. So the metadata a job exchanges through NCCL arrives
// as the program expects (DistributedDataParallel's check that every rank has the same
// parameter shapes, all_gather_object's sizes and pickles): an all-gather holds N copies of
// this rank's input, a sum N times it (max, min and average: it), a broadcast the root's, which
// is this rank's. Larger collectives move nothing. What NCCL itself keeps on the device
// (its channels' buffers, allocated by the real library when a communicator is made and at
// the first collective of each kind) is not simulated: the simulated device charges nothing
// for a communicator, so a rank's memory on the card is higher by NCCL's buffers
// (docs/simulated-gpu.md says how much they were where measured).

using namespace simgpu;

namespace {

enum : int { kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5 };

struct UniqueId {
  char internal[128];
};

struct Communicator {
  int ranks;
  int rank;
  int device;
};

Communicator* comm(void* c) {
  return static_cast<Communicator*>(c);
}

// ncclDataType_t: its element size (0: unknown).
size_t elementSize(int type) {
  static constexpr size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return type >= 0 && type < 12 ? kSizes[type] : 0;
}

// ncclRedOp_t.
enum : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

template <typename T>
void combine(T* values, size_t count, int op, int ranks) {
  for (size_t i = 0; i < count; ++i) {
    T x = values[i], result = x;
    if (op == kSum)
      result = static_cast<T>(x * static_cast<T>(ranks));
    else if (op == kProd)
      for (int r = 1; r < ranks; ++r) result = static_cast<T>(result * x);
    values[i] = result;  // max, min, average of equal values: the value
  }
}

// `count` elements at `values` reduced with `op` over `ranks` equal contributions. Half and 8-bit
// floats are left as they are (the value once).
void reduceEqual(void* values, size_t count, int type, int op, int ranks) {
  switch (type) {
    case 0:
      combine(static_cast<int8_t*>(values), count, op, ranks);
      break;
    case 1:
      combine(static_cast<uint8_t*>(values), count, op, ranks);
      break;
    case 2:
      combine(static_cast<int32_t*>(values), count, op, ranks);
      break;
    case 3:
      combine(static_cast<uint32_t*>(values), count, op, ranks);
      break;
    case 4:
      combine(static_cast<int64_t*>(values), count, op, ranks);
      break;
    case 5:
      combine(static_cast<uint64_t*>(values), count, op, ranks);
      break;
    case 7:
      combine(static_cast<float*>(values), count, op, ranks);
      break;
    case 8:
      combine(static_cast<double*>(values), count, op, ranks);
      break;
    default:
      break;
  }
}

// Whether buffers of `bytes` move (Note [Collectives]).
bool moves(size_t bytes) {
  return bytes > 0 && bytes <= kKeptBytes;
}

int check(void* c, int type) {
  return !c || elementSize(type) == 0 ? kInvalidArgument : kSuccess;
}

}  // namespace

// NCCL 2.30.7 (NCCL_VERSION_CODE = major * 10000 + minor * 100 + patch).
SIMGPU_API int ncclGetVersion(int* version) {
  if (!version) return kInvalidArgument;
  *version = 23007;
  return kSuccess;
}
SIMGPU_API int ncclGetUniqueId(UniqueId* id) {
  if (!id) return kInvalidArgument;
  static std::atomic<unsigned> counter{0};
  memset(id, 0, sizeof(*id));
  snprintf(id->internal, sizeof(id->internal), "memtrace-simulated-nccl-%d-%u", getpid(),
           counter++);
  return kSuccess;
}
SIMGPU_API int ncclCommInitRankConfig(void** out, int ranks, UniqueId, int rank, void*) {
  if (!out || ranks <= 0 || rank < 0 || rank >= ranks) return kInvalidArgument;
  *out = new Communicator{ranks, rank, currentDevice()};
  return kSuccess;
}
SIMGPU_API int ncclCommInitRank(void** out, int ranks, UniqueId id, int rank) {
  return ncclCommInitRankConfig(out, ranks, id, rank, nullptr);
}
SIMGPU_API int ncclCommInitRankScalable(void** out, int ranks, int rank, int, UniqueId*, void*) {
  if (!out || ranks <= 0 || rank < 0 || rank >= ranks) return kInvalidArgument;
  *out = new Communicator{ranks, rank, currentDevice()};
  return kSuccess;
}
SIMGPU_API int ncclCommInitAll(void** comms, int count, const int* devices) {
  if (!comms || count <= 0) return kInvalidArgument;
  for (int i = 0; i < count; ++i) comms[i] = new Communicator{count, i, devices ? devices[i] : i};
  return kSuccess;
}
SIMGPU_API int ncclCommSplit(void* c, int color, int key, void** out, void*) {
  if (!c || !out) return kInvalidArgument;
  // NCCL_SPLIT_NOCOLOR (-1): this rank is in no new communicator.
  if (color < 0) {
    *out = nullptr;
    return kSuccess;
  }
  // The new communicator's size is not known without the other ranks: one with every rank
  // of the parent, this rank at its place, is what a split by a uniform color makes.
  *out = new Communicator{comm(c)->ranks, comm(c)->rank, comm(c)->device};
  (void)key;
  return kSuccess;
}
SIMGPU_API int ncclCommDestroy(void* c) {
  delete comm(c);
  return kSuccess;
}
SIMGPU_API int ncclCommAbort(void* c) {
  delete comm(c);
  return kSuccess;
}
SIMGPU_API int ncclCommFinalize(void*) {
  return kSuccess;
}
SIMGPU_API int ncclCommCount(void* c, int* count) {
  if (!c || !count) return kInvalidArgument;
  *count = comm(c)->ranks;
  return kSuccess;
}
SIMGPU_API int ncclCommUserRank(void* c, int* rank) {
  if (!c || !rank) return kInvalidArgument;
  *rank = comm(c)->rank;
  return kSuccess;
}
SIMGPU_API int ncclCommCuDevice(void* c, int* device) {
  if (!c || !device) return kInvalidArgument;
  *device = comm(c)->device;
  return kSuccess;
}
SIMGPU_API int ncclCommGetAsyncError(void*, int* error) {
  if (!error) return kInvalidArgument;
  *error = kSuccess;
  return kSuccess;
}
SIMGPU_API const char* ncclGetErrorString(int result) {
  switch (result) {
    case 0:
      return "no error";
    case 4:
      return "invalid argument";
    case 5:
      return "invalid usage";
    default:
      return "unhandled error";
  }
}
SIMGPU_API const char* ncclGetLastError(void*) {
  return "";
}
// Note [NCCL's memory through the driver]
// ncclMemAlloc hands out device memory for user buffers (torch.cuda.MemPool on
// ProcessGroupNCCL's mem_allocator, to register with communicators): on a card NCCL makes it
// with CUDA's virtual memory calls, from NCCL's own library (ncclCuMemAlloc: cuMemCreate of the
// size rounded up to the recommended granularity, cuMemAddressReserve, cuMemMap,
// cuMemSetAccess), and frees it with cuMemRetainAllocationHandle, cuMemRelease,
// cuMemGetAddressRange, cuMemUnmap, cuMemRelease, cuMemAddressFree. The simulated library
// makes the same calls to the driver's exported functions, by their names, as NCCL's
// resolved entry points are: so an interposer (memtrace's hooks) sees what it sees on a card
// (Note [NCCL's memory beneath PyTorch's allocator] in allocator/virtual_memory_hooks.cpp).
namespace {

CUresult mapNew(void** pointer, size_t size) {
  CUdevice device;
  if (CUresult error = cuDeviceGet(&device, currentDevice())) return error;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  if (CUresult error =
          cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return error;
  size = (size + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle;
  if (CUresult error = cuMemCreate(&handle, size, &prop, 0)) return error;
  CUdeviceptr address = 0;
  CUresult result = cuMemAddressReserve(&address, size, granularity, 0, 0);
  if (result == CUDA_SUCCESS) {
    result = cuMemMap(address, size, 0, handle, 0);
    if (result != CUDA_SUCCESS) cuMemAddressFree(address, size);
  }
  if (result != CUDA_SUCCESS) {
    cuMemRelease(handle);
    return result;
  }
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cuMemSetAccess(address, size, &access, 1);
  *pointer = reinterpret_cast<void*>(address);
  return CUDA_SUCCESS;
}

CUresult unmap(void* pointer) {
  CUmemGenericAllocationHandle handle;
  if (CUresult error = cuMemRetainAllocationHandle(&handle, pointer)) return error;
  cuMemRelease(handle);  // the reference just taken
  size_t size = 0;
  CUdeviceptr address = reinterpret_cast<CUdeviceptr>(pointer);
  if (CUresult error = cuMemGetAddressRange(nullptr, &size, address)) return error;
  if (CUresult error = cuMemUnmap(address, size)) return error;
  cuMemRelease(handle);  // cuMemCreate's
  return cuMemAddressFree(address, size);
}

}  // namespace

SIMGPU_API int ncclMemAlloc(void** pointer, size_t size) {
  if (!pointer) return kInvalidArgument;
  if (size == 0) {
    *pointer = nullptr;
    return kSuccess;
  }
  return mapNew(pointer, size) == CUDA_SUCCESS ? kSuccess : 1;
}
SIMGPU_API int ncclMemFree(void* pointer) {
  if (!pointer) return kSuccess;
  return unmap(pointer) == CUDA_SUCCESS ? kSuccess : kInvalidArgument;
}
SIMGPU_API int ncclCommRegister(void*, void*, size_t, void** handle) {
  static char registered;
  if (handle) *handle = &registered;
  return kSuccess;
}
SIMGPU_API int ncclCommWindowRegister(void*, void*, size_t, void** window, int) {
  static char registered;
  if (window) *window = &registered;
  return kSuccess;
}
SIMGPU_API int ncclRedOpCreatePreMulSum(int* op, void*, int, int, void*) {
  if (!op) return kInvalidArgument;
  *op = 5;  // the first user-defined reduction (ncclNumOps)
  return kSuccess;
}
// ---- Collectives (Note [Collectives]) ---------------------------------------------------------

SIMGPU_API int ncclAllReduce(const void* send, void* recv, size_t count, int type, int op, void* c,
                             void* stream) {
  if (int error = check(c, type)) return error;
  launched(stream, 0);
  size_t bytes = count * elementSize(type);
  if (!moves(bytes)) return kSuccess;
  copy(recv, send, bytes);
  reduceEqual(recv, count, type, op, comm(c)->ranks);
  return kSuccess;
}
SIMGPU_API int ncclReduce(const void* send, void* recv, size_t count, int type, int op, int root,
                          void* c, void* stream) {
  if (int error = check(c, type)) return error;
  if (comm(c)->rank != root) {
    launched(stream, 0);
    return kSuccess;
  }
  return ncclAllReduce(send, recv, count, type, op, c, stream);
}
SIMGPU_API int ncclBroadcast(const void* send, void* recv, size_t count, int type, int, void* c,
                             void* stream) {
  if (int error = check(c, type)) return error;
  launched(stream, 0);
  size_t bytes = count * elementSize(type);
  if (moves(bytes)) copy(recv, send, bytes);
  return kSuccess;
}
SIMGPU_API int ncclBcast(void* buffer, size_t count, int type, int root, void* c, void* stream) {
  return ncclBroadcast(buffer, buffer, count, type, root, c, stream);
}
SIMGPU_API int ncclAllGather(const void* send, void* recv, size_t count, int type, void* c,
                             void* stream) {
  if (int error = check(c, type)) return error;
  launched(stream, 0);
  size_t bytes = count * elementSize(type);
  if (!moves(bytes * static_cast<size_t>(comm(c)->ranks))) return kSuccess;
  for (int r = 0; r < comm(c)->ranks; ++r) copy(static_cast<char*>(recv) + r * bytes, send, bytes);
  return kSuccess;
}
SIMGPU_API int ncclReduceScatter(const void* send, void* recv, size_t count, int type, int op,
                                 void* c, void* stream) {
  if (int error = check(c, type)) return error;
  launched(stream, 0);
  size_t bytes = count * elementSize(type);
  if (!moves(bytes * static_cast<size_t>(comm(c)->ranks))) return kSuccess;
  copy(recv, static_cast<const char*>(send) + comm(c)->rank * bytes, bytes);
  reduceEqual(recv, count, type, op, comm(c)->ranks);
  return kSuccess;
}
SIMGPU_API int ncclAlltoAll(const void* send, void* recv, size_t count, int type, void* c,
                            void* stream) {
  if (int error = check(c, type)) return error;
  launched(stream, 0);
  size_t bytes = count * elementSize(type);
  if (!moves(bytes * static_cast<size_t>(comm(c)->ranks))) return kSuccess;
  // Every rank sends this rank what this rank's input holds for it.
  const char* mine = static_cast<const char*>(send) + comm(c)->rank * bytes;
  for (int r = 0; r < comm(c)->ranks; ++r) copy(static_cast<char*>(recv) + r * bytes, mine, bytes);
  return kSuccess;
}
SIMGPU_API int ncclGather(const void* send, void* recv, size_t count, int type, int root, void* c,
                          void* stream) {
  if (int error = check(c, type)) return error;
  if (comm(c)->rank != root) {
    launched(stream, 0);
    return kSuccess;
  }
  return ncclAllGather(send, recv, count, type, c, stream);
}
SIMGPU_API int ncclScatter(const void* send, void* recv, size_t count, int type, int, void* c,
                           void* stream) {
  if (int error = check(c, type)) return error;
  launched(stream, 0);
  size_t bytes = count * elementSize(type);
  if (moves(bytes)) copy(recv, static_cast<const char*>(send) + comm(c)->rank * bytes, bytes);
  return kSuccess;
}

SIMGPU_API int ncclCommMemStats(void*, int, uint64_t* value) {
  if (value) *value = 0;
  return kSuccess;
}
