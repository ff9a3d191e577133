// The ways a program finds CUDA's allocation functions other than by linking them: dlsym and
// dlvsym of a library's handle (ctypes, plugin loaders; JAX/XLA, NCCL and CUDA Python open
// libcuda.so.1 that way), cuGetProcAddress (how CUDA's runtime reaches the driver since CUDA
// 11.4) and cudaGetDriverEntryPoint(ByVersion) (how PyTorch finds cuMemCreate and kin). Each
// asks the real lookup first; where its answer is exactly a function memtrace hooks, the hook
// is handed back instead, and everything else is the real answer, untouched.
//
// Note [Interposing dlsym]
// dlsym runs for every symbol a program or its libraries look up (every Python extension
// module's PyInit_*), so its hook costs one compare for a name that does not start with "cu",
// and it changes nothing it was not asked to:
//   - RTLD_DEFAULT and RTLD_NEXT are answered by glibc relative to the caller (its return
//     address), so dlsym_entry.S jumps to the real dlsym for them with the caller's frame in
//     place, and hands back its answer as it is: in those scopes memtrace's own exported hooks
//     already come first wherever they should (LD_PRELOAD put them there);
//   - a real handle is asked of the real dlsym here, and the answer is replaced only when it
//     is the very function a hook stands in front of (the hook's real function, found as the
//     hooks find it): another copy of the same library (two CUDA runtimes in one process)
//     keeps its own functions, and so does anything memtrace does not know;
//   - the lookups memtrace makes to decide may fail and set dlerror(); they are not the
//     program's, so the error is cleared before returning a found symbol (glibc clears it
//     at every successful dl call, which the program may rely on).
// The real dlsym itself is found without dlsym (Note [Finding the real dlsym]).
//
// Note [Substituting driver entry points]
// cuGetProcAddress answers a base name ("cuMemAlloc") at a CUDA version and with stream flags,
// and a name's function changes across versions (cuMemAlloc was 32-bit before 3.2,
// cuGetProcAddress took 4 arguments before 12.0), so the answer is not compared with one
// exported function. For each variant memtrace hooks (the newest first) the real
// cuGetProcAddress is asked again at the version that variant came with, with the caller's
// flags: the variant whose function is the caller's answer is the one the caller holds, and
// its hook (its per-thread-default-stream hook when the flags ask for those) is handed back.
// An answer that is none of them (a variant newer than these headers, CUDA 13.0) is handed
// back untouched, with a warning: those calls are not traced. cudaGetDriverEntryPoint answers
// the same way, at the runtime's own version; an answer that is already a hook (the runtime
// asked its cuGetProcAddress, which memtrace's dlsym had made the hook) stays. The hooks call
// the driver's exported function of the same variant, which has the caller's function's
// signature and behavior.
#include <dlfcn.h>
#include <string.h>

#include <atomic>

#include "allocator/hook_support.h"
#include "allocator/real_functions.h"
#include "tracer/recorder/config.h"
#include "tracer/recorder/memtrace.h"

// cudaGetDriverEntryPoint is deprecated in CUDA 13's headers, not in the runtimes programs
// call it in: memtrace still hooks it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using memtrace::cuda::Library;

const void* address(auto function) {
  return reinterpret_cast<const void*>(function);
}

// A hooked function, by the name a library exports it under (dlsym's name).
struct ExportedHook {
  const char* name;
  Library library;
  const void* hook;
};

// Every function memtrace hooks, as `name` and its hook.
#define MEMTRACE_HOOK(library, name)        \
  ExportedHook {                            \
#name, Library::library, address(&name) \
  }

const ExportedHook kExportedHooks[] = {
    MEMTRACE_HOOK(kRuntime, cudaMalloc),
    MEMTRACE_HOOK(kRuntime, cudaFree),
    MEMTRACE_HOOK(kRuntime, cudaMallocManaged),
    MEMTRACE_HOOK(kRuntime, cudaMallocAsync),
    MEMTRACE_HOOK(kRuntime, cudaMallocAsync_ptsz),
    MEMTRACE_HOOK(kRuntime, cudaMallocFromPoolAsync),
    MEMTRACE_HOOK(kRuntime, cudaMallocFromPoolAsync_ptsz),
    MEMTRACE_HOOK(kRuntime, cudaFreeAsync),
    MEMTRACE_HOOK(kRuntime, cudaFreeAsync_ptsz),
    MEMTRACE_HOOK(kRuntime, cudaGetDriverEntryPoint),
    MEMTRACE_HOOK(kRuntime, cudaGetDriverEntryPoint_ptsz),
    MEMTRACE_HOOK(kRuntime, cudaGetDriverEntryPointByVersion),
    MEMTRACE_HOOK(kRuntime, cudaGetDriverEntryPointByVersion_ptsz),
    MEMTRACE_HOOK(kDriver, cuMemAlloc_v2),
    MEMTRACE_HOOK(kDriver, cuMemAllocManaged),
    MEMTRACE_HOOK(kDriver, cuMemFree_v2),
    MEMTRACE_HOOK(kDriver, cuMemAllocAsync),
    MEMTRACE_HOOK(kDriver, cuMemAllocAsync_ptsz),
    MEMTRACE_HOOK(kDriver, cuMemAllocFromPoolAsync),
    MEMTRACE_HOOK(kDriver, cuMemAllocFromPoolAsync_ptsz),
    MEMTRACE_HOOK(kDriver, cuMemFreeAsync),
    MEMTRACE_HOOK(kDriver, cuMemFreeAsync_ptsz),
    MEMTRACE_HOOK(kDriver, cuMemCreate),
    MEMTRACE_HOOK(kDriver, cuMemRetainAllocationHandle),
    MEMTRACE_HOOK(kDriver, cuMemRelease),
    MEMTRACE_HOOK(kDriver, cuMemMap),
    MEMTRACE_HOOK(kDriver, cuMemUnmap),
    MEMTRACE_HOOK(kDriver, cuMemAddressReserve),
    MEMTRACE_HOOK(kDriver, cuMemAddressFree),
    MEMTRACE_HOOK(kDriver, cuGetProcAddress),
    MEMTRACE_HOOK(kDriver, cuGetProcAddress_v2),
};

// One variant of a driver function, as cuGetProcAddress knows it (cudaTypedefs.h's
// PFN_<name>_v<since>).
struct DriverVariant {
  int since;               // the CUDA version it came with
  const void* hook;        // memtrace's hook of it (legacy default stream)
  const void* per_thread;  // of its per-thread-default-stream form, if it has one
};

struct DriverEntry {
  const char* base_name;      // what cuGetProcAddress is asked for
  DriverVariant variants[2];  // newest first; a hook of nullptr ends the list
};

const DriverEntry kDriverEntries[] = {
    {"cuMemAlloc", {{3020, address(&cuMemAlloc_v2), nullptr}}},
    {"cuMemFree", {{3020, address(&cuMemFree_v2), nullptr}}},
    {"cuMemAllocManaged", {{6000, address(&cuMemAllocManaged), nullptr}}},
    {"cuMemAllocAsync", {{11020, address(&cuMemAllocAsync), address(&cuMemAllocAsync_ptsz)}}},
    {"cuMemAllocFromPoolAsync",
     {{11020, address(&cuMemAllocFromPoolAsync), address(&cuMemAllocFromPoolAsync_ptsz)}}},
    {"cuMemFreeAsync", {{11020, address(&cuMemFreeAsync), address(&cuMemFreeAsync_ptsz)}}},
    {"cuMemCreate", {{10020, address(&cuMemCreate), nullptr}}},
    {"cuMemRetainAllocationHandle", {{11000, address(&cuMemRetainAllocationHandle), nullptr}}},
    {"cuMemRelease", {{10020, address(&cuMemRelease), nullptr}}},
    {"cuMemMap", {{10020, address(&cuMemMap), nullptr}}},
    {"cuMemUnmap", {{10020, address(&cuMemUnmap), nullptr}}},
    {"cuMemAddressReserve", {{10020, address(&cuMemAddressReserve), nullptr}}},
    {"cuMemAddressFree", {{10020, address(&cuMemAddressFree), nullptr}}},
    {"cuGetProcAddress",
     {{12000, address(&cuGetProcAddress_v2), nullptr},
      {11030, address(&cuGetProcAddress), nullptr}}},
};

// Every hooked name starts with "cu" (cuda*, cu*): the one compare most lookups cost.
bool mayBeHooked(const char* name) {
  return name && name[0] == 'c' && name[1] == 'u';
}

// Note [Interposing dlsym]: the hook for `name` when `found` is exactly its real function.
void* substituteExported(const char* name, void* found) {
  if (!found || !mayBeHooked(name)) return found;
  for (const ExportedHook& hook : kExportedHooks) {
    if (strcmp(hook.name, name) != 0) continue;
    void* real = memtrace::cuda::findRealFunction(hook.name, hook.library, hook.hook);
    dlerror();  // our lookups' errors are not the program's
    return real == found ? const_cast<void*>(hook.hook) : found;
  }
  return found;
}

// The real driver's answer for `symbol` at `version` with `flags`, or nullptr.
void* askDriver(const char* symbol, int version, cuuint64_t flags) {
  void* function = nullptr;
  if (auto lookup = MEMTRACE_CUDA(kDriver, cuGetProcAddress_v2)) {
    CUdriverProcAddressQueryResult status;
    return lookup(symbol, &function, version, flags, &status) == CUDA_SUCCESS ? function : nullptr;
  }
  if (auto lookup = MEMTRACE_CUDA(kDriver, cuGetProcAddress))
    return lookup(symbol, &function, version, flags) == CUDA_SUCCESS ? function : nullptr;
  return nullptr;
}

// Note [Substituting driver entry points]: the hook for the driver's answer `found`.
void* substituteDriverEntry(const char* symbol, void* found, cuuint64_t flags) {
  if (!found || !mayBeHooked(symbol)) return found;
  for (const DriverEntry& entry : kDriverEntries) {
    if (strcmp(entry.base_name, symbol) != 0) continue;
    // Already a hook: the runtime's cudaGetDriverEntryPoint answers through its
    // cuGetProcAddress, which memtrace's dlsym made the hook.
    for (const DriverVariant& variant : entry.variants)
      if (variant.hook && (found == variant.hook || found == variant.per_thread)) return found;
    for (const DriverVariant& variant : entry.variants) {
      if (!variant.hook) break;
      if (askDriver(symbol, variant.since, flags) != found) continue;
      bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
      return const_cast<void*>(per_thread && variant.per_thread ? variant.per_thread
                                                                : variant.hook);
    }
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      memtrace::warn(
          "the CUDA driver answered a lookup with a version of a function memtrace does not "
          "know (newer than CUDA 13.0?); its calls are not traced: ",
          symbol);
    return found;
  }
  return found;
}

// cudaGetDriverEntryPoint's flags are cuGetProcAddress's (cudaEnableLegacyStream = 1,
// cudaEnablePerThreadDefaultStream = 2); its _ptsz form reads "default" as per-thread.
cuuint64_t driverFlags(unsigned long long flags, bool per_thread_default) {
  constexpr unsigned long long kStreamBits =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (per_thread_default && !(flags & kStreamBits))
    flags |= CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  return flags;
}

// A cudaGetDriverEntryPoint hook's answer: the real one's, substituted.
cudaError_t entryPointAnswer(cudaError_t result, const char* symbol, void** function,
                             unsigned long long flags, bool per_thread_default) {
  if (result == cudaSuccess && function)
    *function = substituteDriverEntry(symbol, *function, driverFlags(flags, per_thread_default));
  return result;
}

}  // namespace

extern "C" {

// The entry stubs' C++ half (dlsym_entry.S): a lookup in a real handle.
__attribute__((visibility("hidden"))) void* memtrace_dlsym_with_handle(void* handle,
                                                                       const char* name) {
  memtrace::dl::DlsymFunction real = memtrace::dl::realDlsym();
  return real ? substituteExported(name, real(handle, name)) : nullptr;
}

__attribute__((visibility("hidden"))) void* memtrace_dlvsym_with_handle(void* handle,
                                                                        const char* name,
                                                                        const char* version) {
  memtrace::dl::DlvsymFunction real = memtrace::dl::realDlvsym();
  return real ? substituteExported(name, real(handle, name, version)) : nullptr;
}

MEMTRACE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** function, int version,
                                             cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* status) {
  auto real = MEMTRACE_REAL(kDriver, cuGetProcAddress_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult result = real(symbol, function, version, flags, status);
  if (result == CUDA_SUCCESS && function)
    *function = substituteDriverEntry(symbol, *function, flags);
  return result;
}

MEMTRACE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** function, int version,
                                          cuuint64_t flags) {
  auto real = MEMTRACE_REAL(kDriver, cuGetProcAddress);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult result = real(symbol, function, version, flags);
  if (result == CUDA_SUCCESS && function)
    *function = substituteDriverEntry(symbol, *function, flags);
  return result;
}

MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** function,
                                                    unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult* status) {
  auto real = MEMTRACE_REAL(kRuntime, cudaGetDriverEntryPoint);
  if (!real) return cudaErrorInitializationError;
  return entryPointAnswer(real(symbol, function, flags, status), symbol, function, flags, false);
}

MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** function,
                                                         unsigned long long flags,
                                                         cudaDriverEntryPointQueryResult* status) {
  auto real = MEMTRACE_REAL(kRuntime, cudaGetDriverEntryPoint_ptsz);
  if (!real) return cudaErrorInitializationError;
  return entryPointAnswer(real(symbol, function, flags, status), symbol, function, flags, true);
}

MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** function, unsigned int version, unsigned long long flags,
    cudaDriverEntryPointQueryResult* status) {
  auto real = MEMTRACE_REAL(kRuntime, cudaGetDriverEntryPointByVersion);
  if (!real) return cudaErrorInitializationError;
  return entryPointAnswer(real(symbol, function, version, flags, status), symbol, function, flags,
                          false);
}

MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** function, unsigned int version, unsigned long long flags,
    cudaDriverEntryPointQueryResult* status) {
  auto real = MEMTRACE_REAL(kRuntime, cudaGetDriverEntryPointByVersion_ptsz);
  if (!real) return cudaErrorInitializationError;
  return entryPointAnswer(real(symbol, function, version, flags, status), symbol, function, flags,
                          true);
}

}  // extern "C"
