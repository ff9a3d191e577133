#include "allocator/real_functions.h"

#include <dlfcn.h>
#include <elf.h>
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
// A failed lookup is not cached: the library may be loaded later. Both lookups call the
// real dlsym (Note [Finding the real dlsym]), never `dlsym`, which in this library is
// memtrace's own: its lookup hooks call this function.

// Note [Finding the real dlsym]
// libmemtrace.so defines dlsym and dlvsym (allocator/dlsym_entry.S) and links with
// -Bsymbolic, so inside it those names are its own. The C library's are found without
// calling either:
//   1. dlvsym is read from the ELF dynamic symbol table of the loaded libc.so.6 (glibc 2.34
//      and later, where libdl's functions moved) or libdl.so.2 (older glibc), found in the
//      dynamic linker's list of loaded objects: the default version of the symbol, the one a
//      program linked today binds to.
//   2. dlsym is that dlvsym's answer for RTLD_NEXT at GLIBC_2.34, else at x86-64's first
//      version GLIBC_2.2.5 (libdl.so.2 before 2.34): the next definition after
//      libmemtrace.so, so that an interposer preloaded after memtrace stays in the chain.
//      If neither version answers, the symbol table's dlsym.
// Why it is safe: nothing in either step can come back into memtrace's dlsym or dlvsym (no
// recursion); nothing allocates or calls a function the sanitizers intercept, so it works
// from the first dlsym of the process, before any constructor ran (Note [The real dlsym is
// found before anything is initialized]); and it holds on every glibc since 2.2.5 (Debian 12
// has 2.36): the symbol tables are the ELF ABI's, GLIBC_2.2.5 has named dlsym on x86-64
// since glibc's first x86-64 release and GLIBC_2.34 since libdl moved into libc. Some glibc
// versions relocate the addresses of the dynamic section in place and others do not: an
// address below the object's load address is an offset from it.

namespace memtrace::cuda {
namespace {

struct Search {
  const char* prefix;  // "libcudart.so" or "libcuda.so"
  char path[4096];
};

const char* baseName(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

int findLoaded(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  if (!info->dlpi_name || !*info->dlpi_name) return 0;
  if (strncmp(baseName(info->dlpi_name), search->prefix, strlen(search->prefix)) != 0) return 0;
  strncpy(search->path, info->dlpi_name, sizeof(search->path) - 1);
  return 1;
}

}  // namespace

void* findRealFunction(const char* name, Library library, const void* self) {
  dl::DlsymFunction real_dlsym = dl::realDlsym();
  if (!real_dlsym) return nullptr;
  void* fn = real_dlsym(RTLD_NEXT, name);
  if (fn && fn != self) return fn;
  Search search{library == Library::kRuntime ? "libcudart.so" : "libcuda.so", {}};
  if (!dl_iterate_phdr(findLoaded, &search)) return nullptr;
  // RTLD_NOLOAD: only a handle to what is already there; nothing new is loaded.
  void* handle = dlopen(search.path, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return nullptr;
  fn = real_dlsym(handle, name);
  dlclose(handle);  // drops the reference NOLOAD took; the library stays loaded
  return fn && fn != self ? fn : nullptr;
}

}  // namespace memtrace::cuda

namespace memtrace::dl {
namespace {

// Note [The real dlsym is found before anything is initialized]
// The first dlsym of a process can come before any constructor ran, ours included: the
// sanitizer runtimes, loaded after libmemtrace.so in the sanitizer build, find their real
// functions with dlsym(RTLD_NEXT) while they initialize. So finding the real dlsym calls no C
// library function the sanitizers intercept (strcmp, dl_iterate_phdr: their interceptors are
// not set up yet) and is not instrumented (nor is any function it calls: no library
// template's member either): the loaded objects are walked through the dynamic linker's own
// list (_r_debug, the debugger interface glibc has always exported), and names are compared
// here.
#define MEMTRACE_BEFORE_INIT __attribute__((no_sanitize("address", "undefined")))

MEMTRACE_BEFORE_INIT bool sameString(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

// Whether the file name of `path` (after its last '/') is `name`.
MEMTRACE_BEFORE_INIT bool fileNameIs(const char* path, const char* name) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') base = p + 1;
  return sameString(base, name);
}

// An address from the dynamic section (Note [Finding the real dlsym]).
template <typename T>
MEMTRACE_BEFORE_INIT const T* dynamicAddress(ElfW(Addr) base, ElfW(Addr) value) {
  return reinterpret_cast<const T*>(value < base ? base + value : value);
}

// GNU hash of a symbol name (the ELF gABI extension glibc has written since 2006).
MEMTRACE_BEFORE_INIT uint32_t gnuHash(const char* name) {
  uint32_t hash = 5381;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p; ++p)
    hash = hash * 33 + *p;
  return hash;
}

// The symbol tables of one loaded object.
struct SymbolTables {
  const ElfW(Sym) * symbols = nullptr;
  const char* strings = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;  // DT_HASH: nbucket, nchain (the symbol count), ...
  const ElfW(Half) * versions = nullptr;
};

// Whether symbol `index` is a defined function named `name` and the default version.
MEMTRACE_BEFORE_INIT bool isDefaultDefinition(const SymbolTables& tables, uint32_t index,
                                              const char* name) {
  const ElfW(Sym)& symbol = tables.symbols[index];
  if (symbol.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(symbol.st_info) != STT_FUNC) return false;
  if (!sameString(tables.strings + symbol.st_name, name)) return false;
  // Bit 15 of a version index hides it: a compatibility version (dlsym@GLIBC_2.2.5 beside
  // dlsym@@GLIBC_2.34), which only old binaries bind to.
  return !tables.versions || !(tables.versions[index] & 0x8000);
}

// The index of the default definition of `name`, or 0 (the null symbol).
MEMTRACE_BEFORE_INIT uint32_t findSymbol(const SymbolTables& tables, const char* name) {
  if (tables.gnu_hash) {
    const uint32_t* header = tables.gnu_hash;
    uint32_t bucket_count = header[0], first_symbol = header[1], bloom_words = header[2];
    if (bucket_count == 0) return 0;
    const uint32_t* buckets = reinterpret_cast<const uint32_t*>(
        reinterpret_cast<const ElfW(Addr)*>(header + 4) + bloom_words);
    const uint32_t* chain = buckets + bucket_count;
    uint32_t hash = gnuHash(name);
    for (uint32_t index = buckets[hash % bucket_count]; index != 0 && index >= first_symbol;
         ++index) {
      uint32_t entry = chain[index - first_symbol];
      if ((entry | 1) == (hash | 1) && isDefaultDefinition(tables, index, name)) return index;
      if (entry & 1) break;  // the end of this bucket's chain
    }
    return 0;
  }
  if (tables.sysv_hash) {
    for (uint32_t index = 1; index < tables.sysv_hash[1]; ++index)
      if (isDefaultDefinition(tables, index, name)) return index;
  }
  return 0;
}

// `name` in one loaded object, or nullptr.
MEMTRACE_BEFORE_INIT void* objectSymbol(const link_map* object, const char* name) {
  SymbolTables tables;
  for (const ElfW(Dyn)* entry = object->l_ld; entry && entry->d_tag != DT_NULL; ++entry) {
    switch (entry->d_tag) {
      case DT_SYMTAB:
        tables.symbols = dynamicAddress<ElfW(Sym)>(object->l_addr, entry->d_un.d_ptr);
        break;
      case DT_STRTAB:
        tables.strings = dynamicAddress<char>(object->l_addr, entry->d_un.d_ptr);
        break;
      case DT_GNU_HASH:
        tables.gnu_hash = dynamicAddress<uint32_t>(object->l_addr, entry->d_un.d_ptr);
        break;
      case DT_HASH:
        tables.sysv_hash = dynamicAddress<uint32_t>(object->l_addr, entry->d_un.d_ptr);
        break;
      case DT_VERSYM:
        tables.versions = dynamicAddress<ElfW(Half)>(object->l_addr, entry->d_un.d_ptr);
        break;
      default:
        break;
    }
  }
  if (!tables.symbols || !tables.strings) return nullptr;
  uint32_t index = findSymbol(tables, name);
  return index ? reinterpret_cast<void*>(object->l_addr + tables.symbols[index].st_value) : nullptr;
}

// `name` in libc.so.6, else libdl.so.2 (glibc before 2.34). Plain arrays, not
// initializer lists: their member functions are not MEMTRACE_BEFORE_INIT.
MEMTRACE_BEFORE_INIT void* cLibrarySymbol(const char* name) {
  static const char* const kLibraries[] = {"libc.so.6", "libdl.so.2"};
  for (const char* library : kLibraries)
    for (const link_map* object = _r_debug.r_map; object; object = object->l_next)
      if (object->l_name && fileNameIs(object->l_name, library))
        if (void* found = objectSymbol(object, name)) return found;
  return nullptr;
}

}  // namespace
}  // namespace memtrace::dl

// The real functions once found, read by the entry stubs of allocator/dlsym_entry.S (hidden:
// they load them PC-relative). Two threads may find them at once: they find the same.
extern "C" {
__attribute__((visibility("hidden"))) void* memtrace_real_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* memtrace_real_dlvsym = nullptr;
}

namespace memtrace::dl {

MEMTRACE_BEFORE_INIT DlvsymFunction realDlvsym() {
  void* fn = __atomic_load_n(&memtrace_real_dlvsym, __ATOMIC_ACQUIRE);
  if (!fn) {
    fn = cLibrarySymbol("dlvsym");
    __atomic_store_n(&memtrace_real_dlvsym, fn, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<DlvsymFunction>(fn);
}

MEMTRACE_BEFORE_INIT DlsymFunction realDlsym() {
  auto fn =
      reinterpret_cast<DlsymFunction>(__atomic_load_n(&memtrace_real_dlsym, __ATOMIC_ACQUIRE));
  if (fn) return fn;
  if (DlvsymFunction dlvsym_function = realDlvsym()) {
    static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5"};
    for (const char* version : kVersions) {
      fn = reinterpret_cast<DlsymFunction>(dlvsym_function(RTLD_NEXT, "dlsym", version));
      if (fn) break;
    }
  }
  if (!fn) fn = reinterpret_cast<DlsymFunction>(cLibrarySymbol("dlsym"));
  __atomic_store_n(&memtrace_real_dlsym, reinterpret_cast<void*>(fn), __ATOMIC_RELEASE);
  return fn;
}

}  // namespace memtrace::dl

// The entry stubs' slow path (dlsym_entry.S): the real function, found now.
extern "C" {
__attribute__((visibility("hidden"))) MEMTRACE_BEFORE_INIT void* memtrace_resolve_dlsym() {
  return reinterpret_cast<void*>(memtrace::dl::realDlsym());
}
__attribute__((visibility("hidden"))) MEMTRACE_BEFORE_INIT void* memtrace_resolve_dlvsym() {
  return reinterpret_cast<void*>(memtrace::dl::realDlvsym());
}
}
