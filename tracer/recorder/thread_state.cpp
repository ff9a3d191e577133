#include "tracer/recorder/thread_state.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tracer/common/flat_map.h"
#include "tracer/recorder/recursion_guard.h"

namespace memtrace {

constinit thread_local ThreadLocals t_memtrace
    __attribute__((tls_model("initial-exec"))) = {false, nullptr};

namespace {

pthread_key_t g_state_key;
pthread_once_t g_state_key_once = PTHREAD_ONCE_INIT;

void releaseState(void* state) {
  // Runs at thread exit. A CUDA free in a later thread-exit destructor makes a new state,
  // which is released on the destructors' next round.
  if (t_memtrace.state == state) t_memtrace.state = nullptr;
  unmapPages(state, sizeof(ThreadState));
}

void createKey() {
  pthread_key_create(&g_state_key, releaseState);
}

}  // namespace

ThreadState* createThreadState() {
  if (t_memtrace.state) return t_memtrace.state;
  auto* state = static_cast<ThreadState*>(mapPages(sizeof(ThreadState)));
  if (!state) return nullptr;
  state->thread_id = static_cast<pid_t>(syscall(SYS_gettid));
  pthread_once(&g_state_key_once, createKey);
  pthread_setspecific(g_state_key, state);
  t_memtrace.state = state;
  return state;
}

void resetThreadIdAfterFork() {
  if (t_memtrace.state) t_memtrace.state->thread_id = static_cast<pid_t>(syscall(SYS_gettid));
}

}  // namespace memtrace
