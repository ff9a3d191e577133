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
// An allocation failed for lack of memory.
void recordFailedAlloc(const RecursionGuard& guard, const EventSource& source, uint64_t size);

// How the shim tells the recorder a device's name and memory (queried once per device,
// outside the lock). Returns false when it cannot.
using DeviceDescriber = bool (*)(int device, char* name, size_t name_size, uint64_t* total_bytes);
void setDeviceDescriber(DeviceDescriber describer);

// Initializes the recorder once (config, fork and exit handlers, autostart). Called by the
// library's constructor and, in case a hook runs before it, by every record function.
void ensureRecorderInitialized();

// Note [Stacks lent to threads without Python] (recorder.cpp): the calling thread's Python
// stack, less its `skip` innermost frames, names the allocations of threads that have no
// Python frame, until the matching endLentPythonStack. Returns 1, or 0 when no Python stack
// can be walked here.
int lendPythonStack(size_t skip);
void endLentPythonStack();

// Whether this library was loaded through LD_PRELOAD (then tracing starts at load).
bool loadedByPreload();

}  // namespace memtrace
