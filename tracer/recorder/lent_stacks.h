// Internal to recorder/: the Python stacks lent to threads that run autograd's backward for
// another (Note [Stacks lent to threads without Python], lent_stacks.cpp). The record path
// (recorder.cpp) borrows them; the C API and the engine's entry points (allocator/) lend them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tracer/recorder/thread_state.h"

namespace memtrace::detail {

// The lends open now, a part of the recorder's state (Recorder::lent_stacks; Note [One recorder
// state]). Guarded by the recorder's lock, except the two counts, read without it by every event
// (atomics), and the getter, looked up once without it.
struct LentStacks {
  static constexpr size_t kMaxLends = 32;  // nested or interleaved at once; more are not lent

  struct Lend {
    int id;  // 0: a free slot
    ThreadState* lender;
    int64_t graph_task;  // the engine's id of the graph task it was lent for; -1: not known yet
    const void* graph_task_object;  // the GraphTask* the engine's entry saw, to learn its id
    int parent;    // the lend of the graph task the lender ran when it lent; 0: none
    bool adopted;  // the engine's entry found the package's lend and took it as its own
    size_t count;
    python::RawFrame frames[kMaxPythonDepth];
  };

  Lend lends[kMaxLends];
  int last_id;
  std::atomic<int> open;        // lends open now
  std::atomic<int> without_id;  // lends whose graph task's id the engine will tell

  // torch::autograd::get_current_graph_task_id, once looked up (lookUpGraphTaskGetter).
  using GraphTaskGetter = int (*)();
  std::atomic<GraphTaskGetter> graph_task_getter;
  std::atomic<bool> getter_looked_up;
};

// Whether any stack is lent now (read without the lock: the record path's only cost when none
// is).
bool anyStackLent();

// The id of the graph task autograd's engine runs on the calling thread (torch's
// get_current_graph_task_id), or -1: none, or no torch in the process (Note [Stacks lent to
// threads without Python]). Outside the recorder's lock or in it; never takes a lock.
int64_t currentGraphTask();

// With the recorder's lock held, for the event `thread` is recording: appends to its Python frames
// (its own, thread.python_count of them, possibly none) the stacks lent to the graph task it runs
// (`graph_task`, from currentGraphTask() in the capture step) and to the ones that task was
// started for. Returns whether the thread has a Python stack after it.
bool borrowLentStacks(ThreadState& thread, int64_t graph_task);

// After fork(), in the child (the recorder's lock reinitialized): only the lends of the thread that
// forked survive (the others' lenders are not in the child).
void keepOnlyLendsOf(ThreadState* survivor);

}  // namespace memtrace::detail
