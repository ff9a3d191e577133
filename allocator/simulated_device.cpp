// The simulated GPU, seen from the shim (Note [The simulated device] in
// tracer/format/records.h): whether the process runs on it, which card, and the reads of device
// values it reports. Nothing here links the simulated core (libmemtrace-simgpu.so): its C API
// (simulator/core/simgpu_api.h) is found by the real dlsym, as the CUDA functions are.
#include "allocator/simulated_device.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include <atomic>

#include "allocator/hook_support.h"
#include "allocator/real_functions.h"
#include "simulator/core/simgpu_api.h"
#include "tracer/recorder/config.h"

namespace memtrace::hooks {
namespace {

// Note [Finding the simulated GPU]
// The simulated core exports simgpu_* from libmemtrace-simgpu.so, which the simulated
// libcuda.so.1 and libcudart.so.13 need. Three ways it can be in the process:
//   1. preloaded after libmemtrace.so (mem_tracer.simulated_gpu appends its libraries to
//      LD_PRELOAD): every preloaded object and its dependencies are mapped before any
//      constructor runs, so the global scope has it when ours runs (dlsym(RTLD_DEFAULT));
//      calling it then is safe whichever constructor runs first: its state is a
//      function-local static and its globals are constant-initialized;
//   2. already there when libmemtrace.so is dlopened late (mem_tracer.switch_allocator());
//      the same lookup, or, when it came in through an RTLD_LOCAL dlopen, by its file name
//      among the loaded objects (as real_functions.cpp finds libcudart);
//   3. loaded after libmemtrace.so's constructor (the simulated libcuda.so.1 found on
//      LD_LIBRARY_PATH by a program that dlopens CUDA): not there at init; looked for again
//      each time the recorder describes a new device (before that device's first event is
//      written), so that the record comes before the events on the simulated card.
// A process without it looks at most once per device, and finds nothing.

struct Api {
  decltype(&simgpu_profile_name) profile_name;
  decltype(&simgpu_profile_file) profile_file;
  decltype(&simgpu_memory_bytes) memory_bytes;
  decltype(&simgpu_memory_overridden) memory_overridden;
  decltype(&simgpu_device_count) device_count;
  decltype(&simgpu_set_read_observer) set_read_observer;
};

std::atomic<bool> g_found{false};

struct Search {
  char path[4096];
};

int findCore(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  if (!info->dlpi_name || !*info->dlpi_name) return 0;
  const char* slash = strrchr(info->dlpi_name, '/');
  const char* name = slash ? slash + 1 : info->dlpi_name;
  if (strncmp(name, "libmemtrace-simgpu.so", 21) != 0) return 0;
  strncpy(search->path, info->dlpi_name, sizeof(search->path) - 1);
  return 1;
}

// `name` in the simulated core, or nullptr (Note [Finding the simulated GPU]).
void* coreSymbol(const char* name) {
  dl::DlsymFunction real_dlsym = dl::realDlsym();
  if (!real_dlsym) return nullptr;
  if (void* found = real_dlsym(RTLD_DEFAULT, name)) return found;
  Search search{};
  if (!dl_iterate_phdr(findCore, &search)) return nullptr;
  // RTLD_NOLOAD: a handle to what is already there; nothing new is loaded.
  void* handle = dlopen(search.path, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return nullptr;
  void* found = real_dlsym(handle, name);
  dlclose(handle);  // drops the reference NOLOAD took; the library stays loaded
  return found;
}

bool findApi(Api* api) {
  api->profile_name =
      reinterpret_cast<decltype(api->profile_name)>(coreSymbol("simgpu_profile_name"));
  if (!api->profile_name) return false;
  api->profile_file =
      reinterpret_cast<decltype(api->profile_file)>(coreSymbol("simgpu_profile_file"));
  api->memory_bytes =
      reinterpret_cast<decltype(api->memory_bytes)>(coreSymbol("simgpu_memory_bytes"));
  api->memory_overridden =
      reinterpret_cast<decltype(api->memory_overridden)>(coreSymbol("simgpu_memory_overridden"));
  api->device_count =
      reinterpret_cast<decltype(api->device_count)>(coreSymbol("simgpu_device_count"));
  api->set_read_observer =
      reinterpret_cast<decltype(api->set_read_observer)>(coreSymbol("simgpu_set_read_observer"));
  return api->profile_file && api->memory_bytes && api->memory_overridden && api->device_count &&
         api->set_read_observer;
}

// The simulated core's read observer (simgpu_api.h): on the reading thread, for each copy
// from device memory to the host. The copy's device is the calling thread's current one (the
// simulated runtime's). A read made inside memtrace (none today) is not the program's.
void onDeviceRead(const void*, size_t bytes) {
  if (RecursionGuard::active()) return;
  RecursionGuard guard;
  recordDeviceRead(guard,
                   EventSource{format::Api::kDeviceRead, format::Level::kTensor, runtimeDevice(), 0,
                               MEMTRACE_CALLER},
                   bytes);
}

// The simulated core's size observer (simgpu_api.h; Note [Sizes in the trace] in
// tracer/format/records.h): on the asking thread, for each size a simulated library answered
// without knowing it.
void onSimulatedSize(const char* question, uint64_t bytes, uint64_t at_most, int certainty,
                     const void* address) {
  if (RecursionGuard::active() || !question) return;
  RecursionGuard guard;
  int known = certainty >= 0 && certainty < static_cast<int>(format::Certainty::kCount)
                  ? certainty
                  : static_cast<int>(format::Certainty::kEstimated);
  recordSimulatedSize(
      guard,
      EventSource{format::Api::kSimulatedSize, format::Level::kTensor, runtimeDevice(), 0,
                  MEMTRACE_CALLER},
      SimulatedSize{question, bytes, at_most, static_cast<format::Certainty>(known), address});
}

}  // namespace

void findSimulatedDevice() {
  if (g_found.load(std::memory_order_acquire)) return;
  Api api;
  if (!findApi(&api)) {
    if (api.profile_name) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        warn(
            "the simulated GPU's library lacks part of its C API (simgpu_api.h): it is older "
            "than memtrace's; its runs are not marked simulated");
    }
    return;
  }
  // Without a profile the simulated libraries refuse to run anything (they say why).
  const char* name = api.profile_name();
  if (!name || g_found.exchange(true)) return;
  const char* file = api.profile_file();
  setSimulatedDevice(SimulatedDevice{name, file ? file : "", api.memory_bytes(),
                                     api.memory_overridden() != 0, api.device_count()});
  api.set_read_observer(onDeviceRead);
  // A simulated core older than this memtrace has no size observer: its sizes go unrecorded.
  using SetSizeObserver = decltype(&simgpu_set_size_observer);
  if (auto set_size_observer =
          reinterpret_cast<SetSizeObserver>(coreSymbol("simgpu_set_size_observer")))
    set_size_observer(onSimulatedSize);
}

}  // namespace memtrace::hooks
