// What the programs of tests/preload print about themselves, so that a test can compare the
// trace with the program's own account line by line (memtrace_testing.program_account):
//   alloc <api> <address> <size>   an allocation memtrace should record
//   free <api> <address>           a free of one (physical memory: when it is really freed)
//   oom <size> [api]               an allocation refused for lack of memory (cudaMalloc)
//   untraced <address> <size>      an allocation memtrace must not see (said why in the program)
//   lookup <name> <object> <symbol>  what a lookup handed out: the object and symbol dladdr
//                                  names (memtrace's hook: libmemtrace.so)
//   driver-live <bytes>            the simulated GPU's own count of device bytes in use
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace account {

inline void alloc(const char* api, const void* address, size_t size) {
  std::printf("alloc %s %p %zu\n", api, address, size);
}
inline void alloc(const char* api, uint64_t address, size_t size) {
  alloc(api, reinterpret_cast<const void*>(static_cast<uintptr_t>(address)), size);
}
inline void free(const char* api, const void* address) {
  std::printf("free %s %p\n", api, address);
}
inline void free(const char* api, uint64_t address) {
  free(api, reinterpret_cast<const void*>(static_cast<uintptr_t>(address)));
}

// Stops the program when a CUDA call it needs failed: the test then fails on its exit status.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "failed: %s\n", what);
  std::exit(70);
}

inline const char* fileName(const char* path) {
  const char* slash = path ? std::strrchr(path, '/') : nullptr;
  return slash ? slash + 1 : path ? path : "?";
}

// Prints which object and symbol a looked-up function is.
inline void lookup(const char* name, const void* function) {
  Dl_info info{};
  require(function && dladdr(function, &info), name);
  std::printf("lookup %s %s %s\n", name, fileName(info.dli_fname),
              info.dli_sname ? info.dli_sname : "?");
}

// `name` from a library's handle, as a function of type Fn. dlerror() stays clear after a
// lookup that succeeded, as programs that tell a NULL symbol from a missing one rely on.
template <typename Fn>
Fn symbol(void* library, const char* name) {
  dlerror();
  Fn function = reinterpret_cast<Fn>(dlsym(library, name));
  const char* error = dlerror();
  if (error) std::fprintf(stderr, "dlerror after dlsym(%s): %s\n", name, error);
  require(function != nullptr && !error, name);
  lookup(name, reinterpret_cast<const void*>(function));
  return function;
}

inline void* open(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) std::fprintf(stderr, "%s\n", dlerror());
  require(library != nullptr, path);
  return library;
}

}  // namespace account
