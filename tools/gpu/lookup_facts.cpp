// What the real driver answers (tools/gpu/frameworks_check.py): for each function memtrace
// hooks, whether cuGetProcAddress hands out the same function as dlsym of its exported name
// (Note [Substituting driver entry points] does not rely on it; this says whether it could).
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  void* driver = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) return 2;
  using Lookup =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto lookup = reinterpret_cast<Lookup>(dlsym(driver, "cuGetProcAddress_v2"));
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(driver, "cuInit"));
  if (!lookup || !init || init(0) != CUDA_SUCCESS) return 3;
  struct Name {
    const char* base;
    int version;
    cuuint64_t flags;
    const char* exported;
  } names[] = {{"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
               {"cuMemFree", 13000, 0, "cuMemFree_v2"},
               {"cuMemAllocAsync", 13000, 0, "cuMemAllocAsync"},
               {"cuMemAllocAsync", 13000, 2, "cuMemAllocAsync_ptsz"},
               {"cuMemCreate", 13000, 0, "cuMemCreate"},
               {"cuMemMap", 13000, 0, "cuMemMap"},
               {"cuMemRelease", 13000, 0, "cuMemRelease"},
               {"cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2"},
               {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"}};
  for (const Name& name : names) {
    void* found = nullptr;
    CUdriverProcAddressQueryResult status;
    CUresult result = lookup(name.base, &found, name.version, name.flags, &status);
    std::printf("fact %s@%d/%llu same-as-dlsym-%s %d\n", name.base, name.version,
                static_cast<unsigned long long>(name.flags), name.exported,
                result == CUDA_SUCCESS && found == dlsym(driver, name.exported) ? 1 : 0);
  }
  return 0;
}
