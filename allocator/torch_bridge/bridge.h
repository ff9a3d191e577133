/* The door between libmemtrace.so and a bridge to PyTorch's caching allocator
 * (libmemtrace-torch-<release>.so, built from tracker.cpp against one torch release's headers):
 * plain C, so that neither side depends on the other's C++ runtime or on torch's ABI.
 * Note [PyTorch's own allocator] in tracer/format/records.h says what is recorded and why.
 *
 * libmemtrace.so dlopens the bridge built for the torch release the process runs (never another:
 * torch has no stable C++ ABI), and calls memtrace_torch_attach once, from the thread that is
 * about to make PyTorch's allocator's first segment. The bridge calls the sink's functions from
 * PyTorch's trace tracker: on the allocating thread, with that device's allocator lock held. */
#ifndef MEMTRACE_ALLOCATOR_TORCH_BRIDGE_BRIDGE_H_
#define MEMTRACE_ALLOCATOR_TORCH_BRIDGE_BRIDGE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when the sink's layout or meaning changes: a bridge refuses a sink of another. */
#define MEMTRACE_TORCH_SINK_VERSION 1

/* What the tracker says, as libmemtrace.so records it. Actions of segments are
 * memtrace::format::SegmentAction's numbers (alloc 0, free 1, map 2, unmap 3). */
struct MemtraceTorchSink {
  int version;
  /* A tensor: the size the program asked for (PyTorch's requested bytes). */
  void (*tensor_alloc)(int device, uint64_t stream, uint64_t address, uint64_t size);
  /* Its free, once it is complete (after the streams that used it are done with it). */
  void (*tensor_free)(int device, uint64_t stream, uint64_t address);
  void (*segment)(int action, int device, uint64_t address, uint64_t size, uint64_t graph_pool,
                  uint64_t user_pool);
  /* PyTorch's allocator raised OutOfMemoryError for `size` bytes, the device having `free`. */
  void (*out_of_memory)(int device, uint64_t stream, uint64_t size, uint64_t free);
};

/* Attaches the sink to PyTorch's caching allocator, found in the loaded libc10_cuda.so
 * (`c10_cuda`, a dlopen handle of it). 0 on success; otherwise a negative value and one line
 * in `error` saying why (the allocator is not PyTorch's native one, not initialized, ...). */
typedef int (*MemtraceTorchAttach)(void* c10_cuda, const struct MemtraceTorchSink* sink,
                                   char* error, size_t error_size);
#define MEMTRACE_TORCH_ATTACH "memtrace_torch_attach"

/* Whether memtrace_torch_attach would attach: every check it makes, without attaching (no lock
 * of PyTorch's is taken). Same arguments and answers. */
#define MEMTRACE_TORCH_CHECK "memtrace_torch_check"

/* What PyTorch's caching allocator holds now, as its own snapshot says (Note [Tensors made
 * while the tracker attaches] in allocator/torch_allocator.cpp): each segment, then each of its
 * live blocks (allocated, or freed and waiting for its streams), with the size the program asked
 * for. Called after the snapshot is taken: no lock of PyTorch's is held. `expandable`: an
 * expandable segment's mapped range. */
struct MemtraceTorchHeld {
  void* context;
  void (*segment)(void* context, int device, uint64_t address, uint64_t size, int expandable,
                  uint64_t graph_pool, uint64_t user_pool);
  void (*tensor)(void* context, int device, uint64_t stream, uint64_t address, uint64_t size);
};
typedef int (*MemtraceTorchSnapshot)(void* c10_cuda, const struct MemtraceTorchHeld* held,
                                     char* error, size_t error_size);
#define MEMTRACE_TORCH_SNAPSHOT "memtrace_torch_snapshot"

#ifdef __cplusplus
}
#endif

#endif /* MEMTRACE_ALLOCATOR_TORCH_BRIDGE_BRIDGE_H_ */
