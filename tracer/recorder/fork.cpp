// fork(): the child must not inherit a lock held by a thread that does not exist in it,
// nor write into its parent's file.
#include <pthread.h>

#include "tracer/recorder/flight.h"
#include "tracer/recorder/lent_stacks.h"
#include "tracer/recorder/native_stack.h"
#include "tracer/recorder/recorder_state.h"
#include "tracer/recorder/thread_state.h"

namespace memtrace::detail {

// Both locks are taken in their order (Note [Lock order]) and held across fork(), so the
// child starts with the recorder's state and the object table consistent.
void Recorder::lockForFork() {
  mutex_.lock();
  native::LoadedObject* ignored;
  native::lockObjects(&ignored);
}

void Recorder::unlockInParent() {
  native::unlockObjects();
  mutex_.unlock();
}

// The reset after a fork, in the child (Note [One recorder state]).
void Recorder::afterForkInChild() {
  native::unlockObjects();
  mutex_.reset();
  // The parent's buffer and file are the parent's: drop them unwritten. The child traces
  // into a file of its own, opened at its first event.
  file.abandon();
  flightForget();
  flusher_running = false;
  write_failed = false;
  open_phases = 0;
  // The child's flusher does not run until its file opens, and children often end with
  // _exit(): every record it makes is written at once (Note [When records reach the file]).
  write_through = true;
  write_through_until_ns = UINT64_MAX;
  resetThreadIdAfterFork();
  // The threads that lent their stacks are not in the child (Note [Stacks lent to threads
  // without Python]), unless it is the one that forked.
  keepOnlyLendsOf(currentThreadState());
}

void installForkHandlers() {
  pthread_atfork([] { g_recorder.lockForFork(); }, [] { g_recorder.unlockInParent(); },
                 [] { g_recorder.afterForkInChild(); });
}

}  // namespace memtrace::detail
