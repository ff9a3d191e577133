// fork(): the child traces into its own file and the parent's stays valid.
//   parent: A (1 MiB), fork, [child: B (2 MiB), free B, C (3 MiB), exit], wait, D (4 MiB)
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

static void* allocate(size_t size) {
  void* pointer = nullptr;
  cudaMalloc(&pointer, size);
  return pointer;
}

int main() {
  void* a = allocate(1 << 20);
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    void* b = allocate(2 << 20);
    cudaFree(b);
    allocate(3 << 20);
    std::printf("child %d\n", getpid());
    return 0;
  }
  int status = 0;
  waitpid(child, &status, 0);
  allocate(4 << 20);
  std::printf("parent %d child %d status %d\n", getpid(), child, WEXITSTATUS(status));
  (void)a;
  return 0;
}
