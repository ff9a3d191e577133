// The recorder: what the hooks in allocator/ call, and what the C API (memtrace.h) drives.
// It owns the live table and the counters, the trace file and its tables, the flusher
// thread and the fork handlers. One lock guards all of it (Note [Lock order] in
// recorder_state.h, which lists the files each part lives in).
//
// The record path has four steps: guard (the caller's RecursionGuard), capture (stacks,
// outside the lock), lock, write.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tracer/format/records.h"
#include "tracer/recorder/recursion_guard.h"

namespace memtrace {

// Where an event comes from.
struct EventSource {
  format::Api api;
  format::Level level;
  int device;       // CUDA device index; -1 when unknown
  uint64_t stream;  // the cudaStream_t value (0: the legacy default stream)
  // The hook's return address (__builtin_return_address(0) in the hook): native stacks
  // start at this frame, so memtrace's own frames are left out exactly. nullptr: unknown.
  const void* caller;
};

// An allocation succeeded: record it (after the real call).
void recordAlloc(const RecursionGuard& guard, const EventSource& source, const void* address,
                 uint64_t size);
// An allocation is about to be freed: record it before the real call, so that the address
// cannot be handed out again before its free is in the trace. Unknown addresses (never
// seen allocated) are ignored.
void recordFree(const RecursionGuard& guard, const EventSource& source, const void* address);
// A tensor of PyTorch's caching allocator made or freed, as its trace tracker tells it (the
// sink of allocator/torch_bridge/bridge.h): recordAlloc and recordFree with the source the
// tracker's (api kTorchAllocator, level kTensor), in one call (Note [One call from PyTorch's
// tracker] in recorder.cpp). They hold the recursion guard themselves, count the call on its
// device (trackerEventCounts) and expect the recorder initialized (the tracker is attached only
// after it is). `caller`: the sink's return address, where native stacks start.
void recordTrackerAlloc(int device, uint64_t stream, uint64_t address, uint64_t size,
                        const void* caller);
void recordTrackerFree(int device, uint64_t stream, uint64_t address, const void* caller);
// An allocation failed for lack of memory.
void recordFailedAlloc(const RecursionGuard& guard, const EventSource& source, uint64_t size);

// A segment of PyTorch's caching allocator changed (Note [PyTorch's own allocator] in
// tracer/format/records.h): what its trace tracker said, through the bridge.
struct SegmentChange {
  format::SegmentAction action;
  int device;
  uintptr_t address;
  uint64_t size;
  uint64_t graph_pool;  // a CUDA graph's private pool (0: none)
  uint64_t user_pool;   // a torch.cuda.MemPool (0: none)
};
void recordSegment(const RecursionGuard& guard, const SegmentChange& change);

// How many of the tracker's calls that change a device's memory (recordTrackerAlloc,
// recordTrackerFree, recordSegment) each device has had, counted under the recorder's lock
// (Note [Tensors made while the tracker attaches] in allocator/torch_allocator.cpp): all
// kMaxDevices of them into `counts`, taking the lock; or one, from a HeldCheck, where the
// recorder's lock is held (0 for a device past kMaxDevices, which is never counted).
void trackerEventCounts(uint64_t* counts);
uint64_t trackerEventsLocked(int device);

// What PyTorch's caching allocator held before its tracker reached the device, told from its
// snapshot (Note [Tensors made while the tracker attaches] in allocator/torch_allocator.cpp).
// Each is recorded only while `unchanged(context, device)` holds, asked under the recorder's
// lock, and only where the recorder knows nothing at the address yet (a live allocation there,
// or a segment over the range): no thread's stacks are its, so it carries none (thread 0).
struct HeldCheck {
  bool (*unchanged)(const void* context, int device);
  const void* context;
};
enum class HeldOutcome { kRecorded, kKnown, kStale };
HeldOutcome recordHeldAlloc(const RecursionGuard& guard, const EventSource& source,
                            const void* address, uint64_t size, const HeldCheck& check);
HeldOutcome recordHeldSegment(const RecursionGuard& guard, const SegmentChange& change,
                              const HeldCheck& check);

// Virtual memory management (tracer/format/records.h, Note [Virtual memory management]).
// Physical memory made by cuMemCreate is recorded with recordAlloc, its handle as the address
// (source.api kCuMemCreate). These say what happens to it afterwards; each is a no-op for a
// handle or an address the recorder has not seen made or mapped.
// cuMemRetainAllocationHandle gave out one more reference to `handle`.
void recordPhysicalRetain(const RecursionGuard& guard, uint64_t handle);
// cuMemRelease is about to drop a reference: the free is recorded if it is the last one and
// nothing maps the memory.
void recordPhysicalRelease(const RecursionGuard& guard, const EventSource& source, uint64_t handle);
// cuMemMap mapped [address, address + size) to `handle`'s memory from `offset`.
void recordMemoryMap(const RecursionGuard& guard, uintptr_t address, uint64_t size, uint64_t offset,
                     uint64_t handle);
// cuMemUnmap is about to unmap [address, address + size): frees the physical memory whose
// last mapping and last reference end there.
void recordMemoryUnmap(const RecursionGuard& guard, const EventSource& source, uintptr_t address,
                       uint64_t size);
// cuMemAddressReserve reserved a range (`reserved`), or cuMemAddressFree is about to give
// one back.
void recordAddressRange(const RecursionGuard& guard, bool reserved, uintptr_t address,
                        uint64_t size);

// How the shim reads the memory of the device of the calling thread's current context
// (cuMemGetInfo; Note [Device memory readings] in tracer/format/records.h). Returns false
// when it cannot (no driver, no context); never makes a context current.
using DeviceMemoryReader = bool (*)(int* device, uint64_t* free_bytes, uint64_t* total_bytes);
void setDeviceMemoryReader(DeviceMemoryReader reader);
// Reads the device memory now and writes it to the open file, if there is one. Called
// without the recorder's lock: the driver call happens before the lock is taken.
void recordDeviceMemory();

// How the shim tells the recorder a device's name and memory (queried once per device,
// outside the lock). Returns false when it cannot.
using DeviceDescriber = bool (*)(int device, char* name, size_t name_size, uint64_t* total_bytes);
void setDeviceDescriber(DeviceDescriber describer);

// The simulated GPU the process runs on (Note [The simulated device] in
// tracer/format/records.h), as the shim found it. The recorder copies it and writes it to every
// file it opens from then on, and at once to the file already open, if any.
struct SimulatedDevice {
  const char* profile_name;
  const char* profile_file;
  uint64_t memory_bytes;  // each device's
  bool memory_set_by_user;
  int device_count;
};
void setSimulatedDevice(const SimulatedDevice& device);
// A copy from device memory to the host on the simulated device (its read observer): the
// thread's stacks and `bytes`, with the path of an allocation (guard, capture, lock, write).
void recordDeviceRead(const RecursionGuard& guard, const EventSource& source, uint64_t bytes);
// A size a simulated library answered without knowing it (its size observer; Note [Sizes in the
// trace] in tracer/format/records.h), with the thread's stacks, as a read is recorded.
struct SimulatedSize {
  const char* question;  // JSON: {"library", "call", "shapes"}
  uint64_t bytes;
  uint64_t at_most;  // UINT64_MAX: no bound
  format::Certainty certainty;
  const void* address;  // the buffer the program handed the library; nullptr: none yet
};
void recordSimulatedSize(const RecursionGuard& guard, const EventSource& source,
                         const SimulatedSize& size);
// A value the simulated run did not know, where it decided the path (the package's dispatch
// mode: Note [Values where they decide the path]): the thread's stacks and what was assumed,
// recorded as a read is.
void recordAssumedValue(const RecursionGuard& guard, const EventSource& source,
                        const char* assumed);

// Initializes the recorder once (config, fork and exit handlers, autostart). Called by the
// library's constructor and, in case a hook runs before it, by every record function.
void ensureRecorderInitialized();

// Note [Stacks lent to threads without Python] (lent_stacks.cpp). The package's side: the
// calling thread's Python stack, less its `skip` innermost frames, is lent to the backward it is
// about to run, until its matching endLentPythonStack (the calling thread's latest lend ends).
// Returns the lend's id (> 0), or 0 when no Python stack can be walked here or too many are
// lent. bindLentPythonStack(id), from a pre-hook of the backward's root node, tells the lend
// which graph task it is for (the one the calling thread runs).
int lendPythonStack(size_t skip);
void endLentPythonStack();
void bindLentPythonStack(int id);
// The engine's side (allocator/autograd_hooks.cpp): a thread starts `graph_task` (a GraphTask*)
// and waits for it; returns the id to end it with (0: none made, or the package's adopted).
int lendForGraphTaskStart(const void* graph_task);
void endLendForGraphTask(int id);
// A node of `graph_task` is evaluated on the calling thread (the engine's current graph task
// is it): lends for it learn its id.
void graphTaskEvaluates(const void* graph_task);

// Sets what memtrace_last_error() says (one line).
void setLastError(const char* message);

// Whether this library was loaded through LD_PRELOAD (then tracing starts at load).
bool loadedByPreload();

}  // namespace memtrace
