#include "tracer/recorder/native_stack.h"

#include <dlfcn.h>
#include <elf.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tracer/recorder/arena.h"
#include "tracer/recorder/recorder_state.h"

namespace memtrace::native {
namespace {

// Note [libunwind is never linked]
// A library that links libunwind.so.8 makes it the process's provider of _Unwind_*: every
// C++ exception of the host (all of PyTorch's) would then unwind through it. So it is
// loaded with dlopen(RTLD_LOCAL) and only unw_backtrace is looked up. Debian's libunwind.a
// is not position-independent, so static linking is not an option either.
using UnwBacktrace = NativeState::UnwBacktrace;
using Range = NativeState::Range;
constexpr size_t kMaxLoadedObjects = NativeState::kMaxLoadedObjects;

// The native side's state is the recorder's (Recorder::native; Note [One recorder state]).
inline NativeState& state() {
  return detail::g_recorder.native;
}

void readBuildId(const dl_phdr_info* info, LoadedObject* object) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_NOTE) continue;
    auto* note = reinterpret_cast<const uint8_t*>(info->dlpi_addr + header.p_vaddr);
    const uint8_t* end = note + header.p_memsz;
    while (note + sizeof(ElfW(Nhdr)) <= end) {
      auto* nhdr = reinterpret_cast<const ElfW(Nhdr)*>(note);
      const uint8_t* name = note + sizeof(ElfW(Nhdr));
      const uint8_t* desc = name + ((nhdr->n_namesz + 3) & ~3u);
      const uint8_t* next = desc + ((nhdr->n_descsz + 3) & ~3u);
      if (next > end) break;
      if (nhdr->n_type == NT_GNU_BUILD_ID && nhdr->n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0 && nhdr->n_descsz <= sizeof(object->build_id)) {
        std::memcpy(object->build_id, desc, nhdr->n_descsz);
        object->build_id_size = nhdr->n_descsz;
        return;
      }
      note = next;
    }
  }
}

bool sameObject(const LoadedObject& object, const dl_phdr_info* info, const char* path) {
  return object.bias == info->dlpi_addr && std::strcmp(object.path, path) == 0;
}

// Called by dl_iterate_phdr with the loader's lock held: adds objects not seen before.
int addObject(dl_phdr_info* info, size_t, void*) {
  const char* path = info->dlpi_name;
  char exe[4096];
  if (!path || !*path) {  // the main program
    ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (length <= 0) return 0;
    exe[length] = '\0';
    path = exe;
  }
  for (size_t i = 0; i < state().object_count; ++i)
    if (sameObject(state().objects[i], info, path)) return 0;
  if (state().object_count == kMaxLoadedObjects) return 1;

  LoadedObject object{};
  object.bias = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum && object.segment_count < kMaxSegments; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type == PT_LOAD && (header.p_flags & PF_X))
      object.segments[object.segment_count++] = {info->dlpi_addr + header.p_vaddr, header.p_memsz};
  }
  if (object.segment_count == 0) return 0;
  object.path = state().object_arena.copyString(path, std::strlen(path));
  if (!object.path) return 1;
  readBuildId(info, &object);
  state().objects[state().object_count++] = object;
  return 0;
}

void rebuildRanges() {
  state().range_count = 0;
  for (size_t i = 0; i < state().object_count; ++i)
    for (uint32_t s = 0;
         s < state().objects[i].segment_count && state().range_count < kMaxLoadedObjects; ++s) {
      const Segment& segment = state().objects[i].segments[s];
      state().ranges[state().range_count++] = {segment.start, segment.start + segment.size};
    }
  std::sort(state().ranges, state().ranges + state().range_count,
            [](const Range& a, const Range& b) { return a.start < b.start; });
}

int findSelf(dl_phdr_info* info, size_t, void* self) {
  auto address = reinterpret_cast<uintptr_t>(self);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + header.p_vaddr;
    if (header.p_type == PT_LOAD && (header.p_flags & PF_X) && address >= start &&
        address < start + header.p_memsz) {
      state().self_start = start;
      state().self_end = start + header.p_memsz;
      return 1;
    }
  }
  return 0;
}

}  // namespace

bool loadUnwinder() {
  int unwinder = state().unwinder.load(std::memory_order_acquire);
  if (unwinder != 0) return unwinder != 3;
  dl_iterate_phdr(findSelf, reinterpret_cast<void*>(&captureStack));
  void* handle = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (handle) {
    auto fn = reinterpret_cast<UnwBacktrace>(dlsym(handle, "unw_backtrace"));
    if (fn) {
      state().unw_backtrace.store(fn, std::memory_order_release);
      unwinder = 1;
    }
  }
  if (unwinder == 0) {
    // glibc's backtrace() loads libgcc_s on its first call: do that now, not in a hook.
    void* warm[4];
    unwinder = backtrace(warm, 4) > 0 ? 2 : 3;
  }
  refreshObjectTable();
  state().unwinder.store(unwinder, std::memory_order_release);
  return unwinder != 3;
}

const char* unwinderName() {
  switch (state().unwinder.load(std::memory_order_acquire)) {
    case 1:
      return "libunwind";
    case 2:
      return "glibc-backtrace";
    default:
      return "none";
  }
}

// Note [Native stacks walked whole]
// Python stacks stop at the first frame met again (Note [Python stacks flat in depth],
// python_stack.cpp); native ones are unwound whole, for want of anything to stop at. What a
// native frame is made of, its return address, is found only by unwinding to it: the unwinder
// reads each frame's CFI to learn where the caller's address and frame lie, so comparing the
// rest of a stack with the last one costs the unwind it would save. Frame pointers would make
// the chain a list to compare as Python's is, but the host's libraries are built without them
// (Debian's libpython, PyTorch's wheels: -fomit-frame-pointer), and a frame pointer chain
// through such a library is garbage. A stack address met again proves nothing either: the same
// slot holds the same return address after a return and another call from the same line, with
// another caller above it. And the need is smaller: CPython (3.11 on) runs a call from Python
// to Python inside the same C call of its interpreter loop, so the native stack does not grow
// with the Python depth (docs/performance.md, the depth table: 0.0 instructions a Python frame).
size_t captureStack(uintptr_t* ips, size_t max, const void* caller) {
  // Room for memtrace's own frames (hook, recorder, capture) on top of `max`.
  constexpr int kOwnFramesMargin = 8;
  void* buffer[256 + kOwnFramesMargin];
  int want = static_cast<int>(std::min<size_t>(max, 256)) + kOwnFramesMargin;
  int count = 0;
  switch (state().unwinder.load(std::memory_order_acquire)) {
    case 1:
      count = state().unw_backtrace.load(std::memory_order_relaxed)(buffer, want);
      break;
    case 2:
      count = backtrace(buffer, want);
      break;
    default:
      return 0;
  }
  int first = 0;
  if (caller) {
    while (first < count && buffer[first] != caller) ++first;
    if (first == count) first = 0;  // not found (an unwinder that gave up early)
  }
  if (first == 0) {
    while (first < count) {
      auto ip = reinterpret_cast<uintptr_t>(buffer[first]);
      if (ip < state().self_start || ip >= state().self_end) break;
      ++first;
    }
  }
  size_t kept = 0;
  for (int i = first; i < count && kept < max; ++i)
    ips[kept++] = reinterpret_cast<uintptr_t>(buffer[i]);
  return kept;
}

bool objectTableCovers(uintptr_t ip) {
  pthread_mutex_lock(&state().objects_mutex);
  // The last range starting at or before ip.
  const Range* it =
      std::upper_bound(state().ranges, state().ranges + state().range_count, ip,
                       [](uintptr_t value, const Range& r) { return value < r.start; });
  bool covered = it != state().ranges && ip < (it - 1)->end;
  pthread_mutex_unlock(&state().objects_mutex);
  return covered;
}

void refreshObjectTable() {
  // dl_iterate_phdr holds the loader's lock while it calls back; the callback takes only
  // state().objects_mutex, which is never held while taking the loader's lock, so the order is
  // always loader -> objects (Note [Lock order] in recorder_state.h).
  struct Guard {
    Guard() { pthread_mutex_lock(&state().objects_mutex); }
    ~Guard() { pthread_mutex_unlock(&state().objects_mutex); }
  };
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        Guard guard;
        return addObject(info, size, data);
      },
      nullptr);
  Guard guard;
  rebuildRanges();
}

size_t lockObjects(LoadedObject** objects) {
  pthread_mutex_lock(&state().objects_mutex);
  *objects = state().objects;
  return state().object_count;
}

void unlockObjects() {
  pthread_mutex_unlock(&state().objects_mutex);
}

}  // namespace memtrace::native
