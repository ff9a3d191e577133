// PyTorch's caching allocator, seen from the hooks (Note [PyTorch's own allocator] in
// tracer/format/records.h): which CUDA calls are its, and the bridge that records its tensors.
#pragma once

#include "tracer/format/records.h"

namespace memtrace::hooks {

// Who made a CUDA memory call, for the hooks (Note [Every hook reads the same way]).
enum class Caller {
  kOther,         // the program, a library, NCCL: recorded as today
  kTorchTracked,  // PyTorch's caching allocator, whose tracker records it: the hook records nothing
  kTorchUntracked  // PyTorch's caching allocator without a tracker: recorded as a segment
};

// `caller` is the hook's return address. The first call from PyTorch's allocator attaches the
// bridge (once per process; Note [Attaching to PyTorch's allocator] in torch_allocator.cpp).
Caller callerOf(const void* caller);

// callerOf for a call that makes or frees memory: a call made beneath PyTorch's caching
// allocator (libc10_cuda.so on the native stack: a MemPool's own allocator, NCCL's
// ncclMemAlloc) is its, too (Note [NCCL's memory beneath PyTorch's allocator] in
// torch_allocator.cpp).
Caller memoryCallerOf(const void* caller);

// The level of a synchronous allocation (cudaMalloc, cuMemCreate and kin) made by `caller`.
inline format::Level levelOf(Caller caller) {
  return caller == Caller::kTorchUntracked ? format::Level::kSegment : format::Level::kTensor;
}

}  // namespace memtrace::hooks
