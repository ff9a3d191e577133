// Storage for the recorder's global state that is constructed once and never destroyed.
#pragma once

#include <utility>

namespace memtrace {

// Note [The recorder's state outlives every thread]
// The hooks can run on any thread at any time until the process is gone: a thread that
// allocates while another calls exit() (static destructors run on the exiting thread while
// the others go on), a thread-exit destructor that frees CUDA memory, a forked child, an
// atexit handler registered before ours. So nothing the recorder owns is ever destroyed:
// every global with a destructor (the live table, the trace file and its writer, the frame
// and module caches) lives in an Immortal, whose destructor does nothing. Its memory (mmap)
// goes back to the system with the process. The exit path (onExit) only switches writing
// to write-through; it frees nothing, so a record made after it is written like any other.
template <typename T>
union Immortal {
  template <typename... Args>
  constexpr explicit Immortal(Args&&... args) : value(std::forward<Args>(args)...) {}
  ~Immortal() {}
  Immortal(const Immortal&) = delete;
  Immortal& operator=(const Immortal&) = delete;

  T value;
};

}  // namespace memtrace
