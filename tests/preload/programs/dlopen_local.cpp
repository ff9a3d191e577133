// Loads a library with RTLD_LOCAL and calls one of its functions: `workload` unless another
// is named. Usage: dlopen_local LIBRARY [FUNCTION]
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 65;
  }
  const char* name = argc > 2 ? argv[2] : "workload";
  auto function = reinterpret_cast<int (*)()>(dlsym(library, name));
  if (!function) return 66;
  int result = function();
  std::printf("%s %d\n", name, result);
  return result;
}
