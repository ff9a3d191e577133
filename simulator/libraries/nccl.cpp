// NCCL (libnccl.so.2): communicators that know their rank, size and device, and collectives
// that move nothing (each rank runs on its own simulated device; Note [Collectives]).
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "simulator/libraries/library.h"

// Note [Collectives]
// A job of N ranks runs as N processes, each with its own simulated device. A collective
// reads and writes only device memory, which holds no values here (Note [Device memory]), so
// it has nothing to move and no rank waits for another: each rank runs at its own pace, as
// if every collective had completed when it was issued. What NCCL itself keeps on the device
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
// Memory NCCL hands out for user buffers (ncclMemAlloc): device memory, counted.
SIMGPU_API int ncclMemAlloc(void** pointer, size_t size) {
  return allocate(pointer, size, currentDevice(), MemoryKind::kDevice) == Status::kSuccess
             ? kSuccess
             : 1;
}
SIMGPU_API int ncclMemFree(void* pointer) {
  release(pointer);
  return kSuccess;
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
SIMGPU_API int ncclCommMemStats(void*, int, uint64_t* value) {
  if (value) *value = 0;
  return kSuccess;
}
