#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 65;
  }
  auto workload = reinterpret_cast<int (*)()>(dlsym(library, "workload"));
  int result = workload();
  std::printf("workload %d\n", result);
  return result;
}
