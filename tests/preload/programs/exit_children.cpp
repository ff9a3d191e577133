// Forked children of several lifetimes that end without exit() (issue 12, row 3): with
// _exit(), as multiprocessing's forked workers do, or killed by a signal they raise.
// Each child says what it did before it ends: "child <pid> <allocations> <frees> <how>".
// The parent ends normally after waiting for all of them: "status <pid> <raw wait status>".
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>

namespace {

void sleepMs(long ms) {
  timespec pause{ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&pause, nullptr);
}

// `events` allocations spread over `lifetime_ms`, every other one freed again.
[[noreturn]] void child(int events, long lifetime_ms, bool by_signal) {
  int allocations = 0, frees = 0;
  for (int i = 0; i < events; ++i) {
    void* pointer = nullptr;
    if (cudaMalloc(&pointer, 1000 + i) == cudaSuccess) ++allocations;
    if (i % 2 && cudaFree(pointer) == cudaSuccess) ++frees;
    if (events > 1) sleepMs(lifetime_ms / events);
  }
  std::printf("child %d %d %d %s\n", getpid(), allocations, frees, by_signal ? "signal" : "_exit");
  std::fflush(stdout);
  if (by_signal) raise(SIGTERM);
  _exit(7);
}

}  // namespace

int main() {
  struct Plan {
    int events;
    long lifetime_ms;
    bool by_signal;
  };
  const Plan plans[] = {{1, 0, false},    {3, 1, false},    {40, 20, false}, {200, 60, false},
                        {50, 250, false}, {5000, 0, false}, {30, 30, true}};
  void* before = nullptr;
  cudaMalloc(&before, 1 << 20);  // the parent traces too; its children inherit this
  for (const Plan& plan : plans) {
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) child(plan.events, plan.lifetime_ms, plan.by_signal);
    int status = 0;
    waitpid(pid, &status, 0);
    std::printf("status %d %d\n", pid, status);
  }
  cudaFree(before);
  return 0;
}
