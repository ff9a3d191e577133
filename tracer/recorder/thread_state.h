// What the recorder keeps per thread: its id, the buffers stacks are captured into (so
// capturing allocates nothing), and the last stack it recorded with that stack's trie node
// ids, so that a stack sharing its outer frames with the previous one (the common case: a
// loop, a model's forward) is interned by comparing arrays instead of hashing every frame.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "tracer/recorder/python_stack.h"
#include "tracer/recorder/recursion_guard.h"

namespace memtrace {

inline constexpr size_t kMaxPythonDepth = python::kMaxFrames;
inline constexpr size_t kMaxNativeDepth = 256;
inline constexpr size_t kMaxModuleDepth = 64;
inline constexpr size_t kMaxModulePath = 256;

struct ThreadState {
  pid_t thread_id;

  // Captured for the event being recorded, innermost first.
  python::RawFrame python_frames[kMaxPythonDepth];
  size_t python_count;
  bool python_holds_gil;  // this thread held the GIL when they were captured (canWalk)
  // The last direct walk's chain (Note [Python stacks flat in depth]).
  python::WalkCache python_walk;
  uintptr_t native_ips[kMaxNativeDepth];
  size_t native_count;

  // The last stack interned, outermost first, and node[i] = the trie node of frames [0, i].
  // Valid for the trace file of generation `cache_generation` only.
  uint32_t cache_generation;
  python::RawFrame cached_python[kMaxPythonDepth];
  uint32_t cached_python_nodes[kMaxPythonDepth];
  size_t cached_python_count;
  uint64_t cached_python_walk;  // the walk (WalkCache::serial) cached_python is, 0: unknown
  uintptr_t cached_native[kMaxNativeDepth];
  uint32_t cached_native_nodes[kMaxNativeDepth];
  size_t cached_native_count;

  // The nn.Module stack of this thread (memtrace_module_enter/exit): full paths, the top is
  // the running module. module_depth counts entries past kMaxModuleDepth too.
  size_t module_depth;
  char module_paths[kMaxModuleDepth][kMaxModulePath];
  uint32_t module_lengths[kMaxModuleDepth];
  // Bumped by every enter/exit, so the writer knows when to write a new scope record.
  uint64_t module_version;
  // What the trace file of generation `module_generation` last says for this thread.
  uint32_t written_module_generation;
  uint64_t written_module_version;
  uint32_t written_module_id;  // the module's string id it said (0: none)

  // The per-thread fast path (Note [One opening per event] in recorder.cpp): the writer's
  // prelude epoch when this thread's last event left the file saying all its prelude (0: never,
  // or the thread's nn.Module changed since),
  // and that event's stream and other fields of its context (RecordWriter::preludeKey).
  uint64_t prelude_epoch;
  uint64_t prelude_stream;
  uint64_t prelude_key;
};

// The calling thread's state, created on first use from mmap'd memory and released when
// the thread exits. nullptr only when no memory could be mapped.
ThreadState* createThreadState();
inline ThreadState* currentThreadState() {
  ThreadState* state = t_memtrace.state;
  return state ? state : createThreadState();
}

// In the child after fork(): the surviving thread has a new thread id.
void resetThreadIdAfterFork();

}  // namespace memtrace
