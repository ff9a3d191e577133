// The real functions behind the hooks: CUDA's (each lookup done on first use and cached,
// except a failed one, which is tried again on the next call: a library loaded later can
// provide it), and the dynamic linker's own dlsym and dlvsym, which libmemtrace.so interposes
// too (Note [Interposing dlsym] in lookup_hooks.cpp).
#pragma once

#include <atomic>

namespace memtrace::cuda {

enum class Library { kRuntime, kDriver };

// The real definition of `name` (never memtrace's own, `self`), or nullptr. Never goes
// through memtrace's dlsym: the lookup hooks call it.
void* findRealFunction(const char* name, Library library, const void* self);

// A cached lookup: REAL(cudaMalloc) is the real cudaMalloc with the hook's type.
template <typename Fn>
Fn realFunction(std::atomic<Fn>& cache, const char* name, Library library, Fn self) {
  Fn fn = cache.load(std::memory_order_acquire);
  if (fn) return fn;
  fn = reinterpret_cast<Fn>(findRealFunction(name, library, reinterpret_cast<const void*>(self)));
  if (fn) cache.store(fn, std::memory_order_release);
  return fn;
}

}  // namespace memtrace::cuda

namespace memtrace::dl {

using DlsymFunction = void* (*)(void*, const char*);
using DlvsymFunction = void* (*)(void*, const char*, const char*);

// The C library's dlsym and dlvsym (or the next interposer's dlsym after memtrace's), found
// without calling either (Note [Finding the real dlsym]); nullptr only if the C library has
// neither, which a glibc never lacks.
DlsymFunction realDlsym();
DlvsymFunction realDlvsym();

}  // namespace memtrace::dl

// In a hook's body: the real function the hook stands in front of.
#define MEMTRACE_REAL(library, name)                                                        \
  ([]() {                                                                                   \
    static std::atomic<decltype(&name)> cache{nullptr};                                     \
    return ::memtrace::cuda::realFunction(cache, #name, ::memtrace::cuda::Library::library, \
                                          &name);                                           \
  }())

// A CUDA function memtrace calls but does not hook (cudaGetDevice, ...). decltype only
// reads its declaration: the library gets no link-time reference to CUDA.
#define MEMTRACE_CUDA(library, name)                                \
  ([]() {                                                           \
    static std::atomic<decltype(&name)> cache{nullptr};             \
    return ::memtrace::cuda::realFunction<decltype(&name)>(         \
        cache, #name, ::memtrace::cuda::Library::library, nullptr); \
  }())
