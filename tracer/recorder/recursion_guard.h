// Note [Recursion guard]
// Every hook holds a RecursionGuard from its first line to its last, the real CUDA call
// included. A hooked function entered while the thread already holds one passes straight
// through to the real function, unrecorded. That covers the two ways we can be re-entered:
//   - a real CUDA function calling another hooked one (a runtime that reaches the driver
//     through the PLT, or the pluggable allocator's cudaMallocAsync under LD_PRELOAD):
//     the outer call is the one the program made, so it is the one recorded;
//   - our own recording code: it calls nothing that allocates CUDA memory. Python code can
//     only run inside it through the garbage collector finalizing a tensor, which is why
//     the Python stack walk disables the collector (Note [No Python code runs in a hook]).
// Functions that need the guard held take it as a parameter, so the compiler proves it.
#pragma once

namespace memtrace {

struct ThreadState;

// What the recorder keeps in each thread's TLS: whether the thread is inside a hook, and its
// ThreadState (thread_state.h), found by every event without a call. initial-exec: a TLS access
// is one instruction, and it never calls __tls_get_addr (which can allocate) from inside a
// hook. The variable is two words, well within the static TLS surplus glibc keeps for
// libraries loaded with dlopen.
struct ThreadLocals {
  bool inside_memtrace;
  ThreadState* state;  // nullptr until the thread's first event (currentThreadState)
};
extern thread_local constinit ThreadLocals t_memtrace __attribute__((tls_model("initial-exec")));

class RecursionGuard {
 public:
  static bool active() { return t_memtrace.inside_memtrace; }
  RecursionGuard() : previous_(t_memtrace.inside_memtrace) { t_memtrace.inside_memtrace = true; }
  ~RecursionGuard() { t_memtrace.inside_memtrace = previous_; }
  RecursionGuard(const RecursionGuard&) = delete;
  RecursionGuard& operator=(const RecursionGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace memtrace
