#include "allocator/real_functions.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

// Note [Finding the real CUDA functions]
// libmemtrace.so links no CUDA library: a preloaded library that needed libcudart.so.13
// would make every program on a machine without it fail to start, and the right libcudart
// is the one the program loaded (PyTorch wheels bring their own). So the real functions
// are found at run time:
//   1. dlsym(RTLD_NEXT): the next definition after ours in the global scope; the usual
//      answer under LD_PRELOAD.
//   2. The CUDA library the process has loaded, found by name among the loaded objects and
//      opened with RTLD_NOLOAD: when libcudart came in through an RTLD_LOCAL dlopen (a
//      Python extension's dependency), RTLD_NEXT cannot see it, although the program's calls
//      still reach our hook; and when libmemtrace.so itself was loaded by dlopen (the
//      pluggable allocator), RTLD_NEXT has nothing after it.
// A failed lookup is not cached: the library may be loaded later.

namespace memtrace::cuda {
namespace {

struct Search {
  const char* prefix;  // "libcudart.so" or "libcuda.so"
  char path[4096];
};

int findLoaded(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  if (!info->dlpi_name || !*info->dlpi_name) return 0;
  const char* base = strrchr(info->dlpi_name, '/');
  base = base ? base + 1 : info->dlpi_name;
  if (strncmp(base, search->prefix, strlen(search->prefix)) != 0) return 0;
  strncpy(search->path, info->dlpi_name, sizeof(search->path) - 1);
  return 1;
}

}  // namespace

void* findRealFunction(const char* name, Library library, const void* self) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn && fn != self) return fn;
  Search search{library == Library::kRuntime ? "libcudart.so" : "libcuda.so", {}};
  if (!dl_iterate_phdr(findLoaded, &search)) return nullptr;
  // RTLD_NOLOAD: only a handle to what is already there; nothing new is loaded.
  void* handle = dlopen(search.path, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return nullptr;
  fn = dlsym(handle, name);
  dlclose(handle);  // drops the reference NOLOAD took; the library stays loaded
  return fn && fn != self ? fn : nullptr;
}

}  // namespace memtrace::cuda
