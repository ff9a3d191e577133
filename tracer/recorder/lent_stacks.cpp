// Stacks lent by the threads that wait for autograd's backward to the threads that run it
// (Note [Stacks lent to threads without Python]).
#include "tracer/recorder/lent_stacks.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "tracer/recorder/python_stack.h"
#include "tracer/recorder/recorder.h"
#include "tracer/recorder/recorder_state.h"

namespace memtrace {

using namespace detail;

namespace {

// Note [Stacks lent to threads without Python]
// Autograd's engine runs a GPU's backward on a thread of its own that never ran Python, while
// the thread that called backward (loss.backward(), torch.autograd.grad) waits in the engine
// with the GIL released: what the user can act on for those allocations is that waiting
// thread's line. So the waiting thread lends its stack: it is walked, and resolved, on the
// lending thread itself (its own frames, alive while it waits: nothing of another thread's
// interpreter is ever read), and an allocation of a thread that runs backward for it borrows
// it. Who lends:
//   - under LD_PRELOAD, the engine's own entry (allocator/autograd_hooks.cpp): the thread that
//     starts a graph task (Engine::execute_with_graph_task) lends for it, with no Python of
//     ours in the program; every node the engine evaluates (Engine::evaluate_function) tells
//     which graph task it belongs to;
//   - the package (python/mem_tracer/_backward.py), which wraps the engine's run_backward
//     where the library was not preloaded (switch_allocator()): it lends before the engine
//     starts, and a pre-hook on the root's node tells the graph task when backward reaches it
//     (memtrace_bind_lent_python_stack). Where both run, the engine's entry adopts the
//     package's lend instead of making a second one.
// Backward nests and interleaves: a re-entrant checkpoint's backward (or a grad() in a custom
// Function's backward) starts a graph task from inside a node of another, on the device's own
// thread; two Python threads may run backward at once on one device thread. So each lend is
// known by the graph task it was made for (torch's get_current_graph_task_id, a thread-local
// the engine sets around every node), and by its parent: the lend of the graph task its
// lender was running when it lent. An event on a thread running graph task g is named by its
// own frames, if it has any, then the frames of g's lend and of each ancestor, innermost
// first, each thread's frames once (a lend's lender still waits inside it: its frames are the
// outer part of that thread's own stack, and of any later lend of the same thread). So a
// re-entrant checkpoint's recomputation reads the block's forward line, then the checkpoint,
// then the outer loss.backward() line; its inner backward, the checkpoint then loss.backward();
// and the rest of the outer backward, loss.backward() again once the inner lend ended. A lend
// ends when its engine call returns, or unwinds (an exception inside backward).
// Without torch's getter (no torch, or a torch without it), or for a thread that runs no graph
// task and has no Python frame: the lend, if exactly one is open (a stand-in for autograd's
// thread, tests/preload/scripts/lend.py); with several, none (never a guess).
// A forked child keeps only the lends of the thread that forked (keepOnlyLendsOf).
// Cost per event: a load of the open lends' count when nothing is lent; otherwise the getter (a
// thread-local of torch's, read through __tls_get_addr: on a thread's first call it can
// allocate its block, so it is called only while a stack is lent) and a copy of the lent
// frames for the events that borrow them. Guarded by the recorder's lock.
// The lends are the recorder's (Recorder::lent_stacks; Note [One recorder state]).
inline LentStacks& lent() {
  return g_recorder.lent_stacks;
}
constexpr size_t kMaxLends = LentStacks::kMaxLends;
using Lend = LentStacks::Lend;
using GraphTaskGetter = LentStacks::GraphTaskGetter;

// torch::autograd::get_current_graph_task_id(), from libtorch_cpu.so, which Python loads
// RTLD_LOCAL: found through its handle. Takes the loader's lock: never with the recorder's lock
// held.
void lookUpGraphTaskGetter() {
  if (lent().graph_task_getter.load(std::memory_order_acquire)) return;
  const char* name = "_ZN5torch8autograd25get_current_graph_task_idEv";
  void* found = dlsym(RTLD_DEFAULT, name);
  if (!found) {
    if (void* torch = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD)) {
      found = dlsym(torch, name);
      dlclose(torch);  // RTLD_NOLOAD took a reference of a library that stays loaded
    }
  }
  if (found) lent().graph_task_getter.store(reinterpret_cast<GraphTaskGetter>(found));
  lent().getter_looked_up.store(true, std::memory_order_release);
}

Lend* lendWithId(int id) {
  if (id <= 0) return nullptr;
  for (Lend& lend : lent().lends)
    if (lend.id == id) return &lend;
  return nullptr;
}

Lend* lendForGraphTask(int64_t graph_task) {
  if (graph_task < 0) return nullptr;
  for (Lend& lend : lent().lends)
    if (lend.id && lend.graph_task == graph_task) return &lend;
  return nullptr;
}

// The calling thread's most recent open lend.
Lend* innermostLendOf(ThreadState* thread) {
  Lend* found = nullptr;
  for (Lend& lend : lent().lends)
    if (lend.id && lend.lender == thread && (!found || lend.id > found->id)) found = &lend;
  return found;
}

// The one open lend (whose graph task is not known yet, if `unbound`), or nullptr.
Lend* onlyOpenLend(bool unbound) {
  Lend* found = nullptr;
  for (Lend& lend : lent().lends) {
    if (!lend.id || (unbound && lend.graph_task >= 0)) continue;
    if (found) return nullptr;
    found = &lend;
  }
  return found;
}

// The lend learns the id of the graph task it was lent for.
void setGraphTask(Lend* lend, int64_t graph_task) {
  if (!lend || lend->graph_task >= 0) return;
  if (lend->graph_task_object) lent().without_id.fetch_sub(1, std::memory_order_relaxed);
  lend->graph_task = graph_task;
}

void release(Lend* lend) {
  if (!lend || !lend->id) return;
  if (lend->graph_task < 0 && lend->graph_task_object)
    lent().without_id.fetch_sub(1, std::memory_order_relaxed);
  lend->id = 0;
  lent().open.fetch_sub(1, std::memory_order_relaxed);
}

// Makes a lend of the calling thread's stack less its `skip` innermost frames (the recorder's lock
// not held; takes it). Returns its id, 0 when none could be made.
int makeLend(size_t skip, const void* graph_task_object) {
  ensureRecorderInitialized();
  if (!lent().getter_looked_up.load(std::memory_order_acquire)) lookUpGraphTaskGetter();
  ThreadState* thread = currentThreadState();
  bool holds_gil = false;
  if (!thread || !python::canWalk(&holds_gil)) return 0;
  python::GcPause gc_pause(holds_gil);
  size_t count = python::captureStack(thread->python_frames, g_recorder.config.python_depth,
                                      &thread->python_walk);
  python::fillReusedTail(thread->python_frames, &thread->python_walk);  // copied into the lend
  size_t kept = count > skip ? count - skip : 0;
  int64_t running = currentGraphTask();
  RecorderLock lock;
  Lend* free_slot = nullptr;
  for (Lend& lend : lent().lends)
    if (!lend.id) {
      free_slot = &lend;
      break;
    }
  if (!free_slot) return 0;
  Lend& lend = *free_slot;
  lend.id = ++lent().last_id;
  if (lend.id <= 0) lend.id = lent().last_id = 1;  // wrapped (2^31 lends)
  lend.lender = thread;
  lend.graph_task = -1;
  lend.graph_task_object = graph_task_object;
  Lend* parent = lendForGraphTask(running);
  lend.parent = parent ? parent->id : 0;
  lend.adopted = false;
  // Resolved now, while the lender's frames are alive; a frame that cannot be resolved (out of
  // memory) stays unknown: resolveFrame never calls the interpreter for it later, on a thread
  // without the GIL.
  for (size_t i = 0; i < kept; ++i)
    python::resolveFrame(thread->python_frames[skip + i], holds_gil);
  std::memcpy(lend.frames, thread->python_frames + skip, kept * sizeof(lend.frames[0]));
  lend.count = kept;
  if (graph_task_object) lent().without_id.fetch_add(1, std::memory_order_relaxed);
  lent().open.fetch_add(1, std::memory_order_relaxed);
  return lend.id;
}

// Appends `lend`'s frames to the thread's, up to its capacity.
void append(ThreadState& thread, const Lend& lend) {
  // The writer will read the whole buffer (frames_serial 0 below).
  python::fillReusedTail(thread.python_frames, &thread.python_walk);
  size_t room = kMaxPythonDepth - thread.python_count;
  size_t count = lend.count < room ? lend.count : room;
  std::memcpy(thread.python_frames + thread.python_count, lend.frames,
              count * sizeof(lend.frames[0]));
  thread.python_count += count;
  thread.python_walk.frames_serial = 0;  // no longer a walk's output alone
}

}  // namespace

namespace detail {

bool anyStackLent() {
  return lent().open.load(std::memory_order_relaxed) > 0;
}

int64_t currentGraphTask() {
  GraphTaskGetter getter = lent().graph_task_getter.load(std::memory_order_acquire);
  return getter ? getter() : -1;
}

bool borrowLentStacks(ThreadState& thread, int64_t graph_task) {
  bool own = thread.python_count > 0;
  Lend* lend = lendForGraphTask(graph_task);
  // A graph task no lend is known for yet (the package's, before its root's pre-hook ran), or
  // a thread that runs none: the one lend that can be meant, if there is one.
  if (!lend && !own) lend = onlyOpenLend(/*unbound=*/graph_task >= 0);
  // Each thread's frames once: the borrower's own, then each lender's innermost lend.
  ThreadState* included[kMaxLends + 1];
  size_t included_count = 0;
  if (own) included[included_count++] = &thread;
  for (size_t steps = 0; lend && steps < kMaxLends; ++steps, lend = lendWithId(lend->parent)) {
    bool seen = false;
    for (size_t i = 0; i < included_count; ++i) seen = seen || included[i] == lend->lender;
    if (seen) continue;
    included[included_count++] = lend->lender;
    append(thread, *lend);
  }
  return thread.python_count > 0;
}

void keepOnlyLendsOf(ThreadState* survivor) {
  for (Lend& lend : lent().lends)
    if (lend.id && lend.lender != survivor) release(&lend);
}

}  // namespace detail

int lendPythonStack(size_t skip) {
  return makeLend(skip, nullptr);
}

void endLentPythonStack() {
  ThreadState* thread = currentThreadState();
  RecorderLock lock;
  release(innermostLendOf(thread));
}

void bindLentPythonStack(int id) {
  int64_t graph_task = currentGraphTask();
  if (graph_task < 0) return;
  RecorderLock lock;
  setGraphTask(lendWithId(id), graph_task);
}

int lendForGraphTaskStart(const void* graph_task_object) {
  // The package lent already for this call (its run_backward wrapper): the engine's entry
  // adopts that lend, whose frames leave the wrapper out, and tells it the graph task.
  ThreadState* thread = currentThreadState();
  {
    RecorderLock lock;
    Lend* lend = innermostLendOf(thread);
    if (lend && !lend->adopted && !lend->graph_task_object && lend->graph_task < 0) {
      lend->adopted = true;
      lend->graph_task_object = graph_task_object;
      lent().without_id.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
  }
  return makeLend(0, graph_task_object);
}

void endLendForGraphTask(int id) {
  if (id <= 0) return;
  RecorderLock lock;
  release(lendWithId(id));
}

void graphTaskEvaluates(const void* graph_task_object) {
  if (lent().without_id.load(std::memory_order_relaxed) == 0) return;
  // Inside the node's evaluation the engine's current graph task is this one.
  int64_t graph_task = currentGraphTask();
  if (graph_task < 0) return;
  RecorderLock lock;
  for (Lend& lend : lent().lends)
    if (lend.id && lend.graph_task_object == graph_task_object) setGraphTask(&lend, graph_task);
}

}  // namespace memtrace
