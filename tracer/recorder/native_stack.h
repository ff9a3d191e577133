// Native stacks: raw instruction pointers from libunwind (loaded with dlopen, never linked:
// Note [libunwind is never linked]), and the map of loaded objects that the report needs
// to symbolize them offline. The recorder never symbolizes.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tracer/recorder/arena.h"

namespace memtrace::native {

inline constexpr size_t kMaxSegments = 8;

struct Segment {
  uintptr_t start;
  uintptr_t size;
};

// An ELF object the dynamic loader mapped (the executable, a shared library, the vDSO): what
// native instruction pointers resolve against. (A "module" is always an nn.Module.)
struct LoadedObject {
  const char* path;
  uintptr_t bias;  // dlpi_addr: what the ELF's virtual addresses are shifted by
  uint8_t build_id[32];
  uint32_t build_id_size;
  uint32_t segment_count;
  Segment segments[kMaxSegments];  // executable PT_LOAD segments, as loaded
  uint32_t written_generation;     // the trace file generation it was last written to
};

// The native side's state, a part of the recorder's (Recorder::native; Note [One recorder
// state]): the unwinder, memtrace's own code, and the loaded objects, which have a lock of their
// own (objects_mutex), taken after the recorder's and the dynamic loader's, never before either
// (Note [Lock order]).
struct NativeState {
  static constexpr size_t kMaxLoadedObjects = 4096;
  using UnwBacktrace = int (*)(void**, int);
  struct Range {
    uintptr_t start;
    uintptr_t end;
  };

  std::atomic<UnwBacktrace> unw_backtrace;
  std::atomic<int> unwinder;  // 0 not loaded, 1 libunwind, 2 glibc backtrace, 3 none
  // memtrace's own executable range: frames inside it (the hook, the recorder) are skipped.
  uintptr_t self_start;
  uintptr_t self_end;

  pthread_mutex_t objects_mutex = PTHREAD_MUTEX_INITIALIZER;
  // Guarded by objects_mutex.
  LoadedObject objects[kMaxLoadedObjects];
  size_t object_count;
  Arena object_arena;               // the objects' paths
  Range ranges[kMaxLoadedObjects];  // executable ranges of objects, sorted by start
  size_t range_count;
};

// Loads the unwinder. Returns whether native stacks can be captured (libunwind, or glibc's
// slower backtrace() when libunwind.so.8 is missing). Idempotent.
bool loadUnwinder();

// The calling thread's native stack, innermost first, from the frame of `caller` (a
// return address into the program, see EventSource::caller) outward; without it, from the
// first frame outside libmemtrace.so.
size_t captureStack(uintptr_t* ips, size_t max, const void* caller);

// Which unwinder captureStack uses ("libunwind", "glibc-backtrace" or "none").
const char* unwinderName();

// The loaded objects. covers() and forEachUnwritten() may be called under the recorder's
// lock; refresh() must not be (it takes the dynamic loader's lock).
bool objectTableCovers(uintptr_t ip);
void refreshObjectTable();
// Calls fn(const LoadedObject&) for every object not yet written to `generation`'s file, and
// marks it written.
template <typename Fn>
void forEachUnwrittenObject(uint32_t generation, Fn&& fn);

// Implementation detail of forEachUnwrittenObject.
size_t lockObjects(LoadedObject** objects);
void unlockObjects();

template <typename Fn>
void forEachUnwrittenObject(uint32_t generation, Fn&& fn) {
  LoadedObject* objects = nullptr;
  size_t count = lockObjects(&objects);
  for (size_t i = 0; i < count; ++i) {
    if (objects[i].written_generation == generation) continue;
    objects[i].written_generation = generation;
    fn(static_cast<const LoadedObject&>(objects[i]));
  }
  unlockObjects();
}

}  // namespace memtrace::native
