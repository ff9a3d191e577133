// Internal to recorder/: the Python stacks lent to threads that run autograd's backward for
// another (Note [Stacks lent to threads without Python], lent_stacks.cpp). The record path
// (recorder.cpp) borrows them; the C API and the engine's entry points (allocator/) lend them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "tracer/recorder/thread_state.h"

namespace memtrace::detail {

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
