// The simulated driver (libcuda.so.1): initialization, devices, contexts, errors and
// cuGetProcAddress. Its memory is in memory.cpp, its work (modules, launches, streams,
// events, graphs) in work.cpp.
#include "simulator/driver/driver.h"

#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "simulator/core/attributes.h"
#include "simulator/core/device.h"
#include "simulator/driver/driver_internal.h"
#include "simulator/driver/proc_table.h"

// cuda.h names the 5-argument lookup cuGetProcAddress; the library exports it as
// cuGetProcAddress_v2.
#undef cuGetProcAddress

using namespace simgpu;

namespace simgpu::driver {

CUresult fromStatus(Status status) {
  switch (status) {
    case Status::kSuccess:
      return CUDA_SUCCESS;
    case Status::kOutOfMemory:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case Status::kInvalidDevice:
      return CUDA_ERROR_INVALID_DEVICE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult ready() {
  if (profile()) return CUDA_SUCCESS;
  static bool said = [] {
    fprintf(stderr, "memtrace simulated GPU: %s\n", profileError().c_str());
    return true;
  }();
  (void)said;
  return CUDA_ERROR_NO_DEVICE;
}

CUresult refused(const char* function, const char* why) {
  return static_cast<CUresult>(refuse("the CUDA driver", function, CUDA_ERROR_NOT_SUPPORTED, why));
}

// A context is its device: the address of an entry of this array.
CUcontext context(int device) {
  static char contexts[64];
  return reinterpret_cast<CUcontext>(&contexts[device]);
}

int contextDevice(CUcontext ctx) {
  static char* base = reinterpret_cast<char*>(context(0));
  return static_cast<int>(reinterpret_cast<char*>(ctx) - base);
}

thread_local bool t_has_context = false;

}  // namespace simgpu::driver

using namespace simgpu::driver;

SIMGPU_API CUresult cuInit(unsigned int) {
  return ready();
}

SIMGPU_API CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = 0;
  if (CUresult error = ready()) return error;
  *count = deviceCount();
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  if (ordinal < 0 || ordinal >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  if (!name || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, static_cast<size_t>(length), "%s", profile()->device_name.c_str());
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice device) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  deviceUuid(reinterpret_cast<unsigned char*>(uuid->bytes), device);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = totalBytes(device);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute,
                                         CUdevice device) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  if (deviceAttribute(attribute, device, value)) return CUDA_SUCCESS;
  char why[64];
  snprintf(why, sizeof(why), "attribute %d is not known", static_cast<int>(attribute));
  return refused("cuDeviceGetAttribute", why);
}

SIMGPU_API CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice device) {
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  *major = profile()->major;
  *minor = profile()->minor;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice device) {
  if (!bus_id || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(bus_id, static_cast<size_t>(length), "00000000:%02X:00.0", 0x10 + device);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceCanAccessPeer(int* can, CUdevice device, CUdevice peer) {
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  *can = device != peer;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute, CUdevice, CUdevice) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  *value = 1;
  return CUDA_SUCCESS;
}

// ---- Contexts: one primary context a device (Note [Contexts]) ---------------------------------

// Note [Contexts]
// The simulated driver has the primary contexts only, one a device, made active by the
// runtime's first call that needs one or by cuDevicePrimaryCtxRetain, and current on a thread
// once that thread used the device. PyTorch asks whether a device's primary context is active
// (c10::cuda::hasPrimaryContext) before it touches a device it has not used.

SIMGPU_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  activate(device);
  *ctx = context(device);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice, unsigned int) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags,
                                               int* is_active) {
  if (!flags || !is_active) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *is_active = active(device);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  int device = currentDevice();
  *ctx = active(device) ? context(device) : nullptr;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (!ctx) return CUDA_SUCCESS;
  int device = contextDevice(ctx);
  if (device < 0 || device >= deviceCount()) return CUDA_ERROR_INVALID_CONTEXT;
  activate(device);
  setCurrentDevice(device);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  return cuCtxSetCurrent(ctx);
}

SIMGPU_API CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (ctx) *ctx = context(currentDevice());
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  if (!active(currentDevice())) return CUDA_ERROR_INVALID_CONTEXT;
  *device = currentDevice();
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) return cuCtxGetDevice(device);
  *device = contextDevice(ctx);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams*, unsigned int,
                                   CUdevice device) {
  return cuDevicePrimaryCtxRetain(ctx, device);
}

SIMGPU_API CUresult cuCtxDestroy_v2(CUcontext) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxSynchronize(void) {
  return ready();
}

SIMGPU_API CUresult cuCtxGetApiVersion(CUcontext, unsigned int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;  // what every context of CUDA 3.2 and later answers
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetFlags(unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = 0;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  *id = static_cast<unsigned long long>(ctx ? contextDevice(ctx) : currentDevice()) + 1;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxSetLimit(CUlimit, size_t) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetLimit(size_t* value, CUlimit) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  *value = 0;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxSetCacheConfig(CUfunc_cache) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxEnablePeerAccess(CUcontext, unsigned int) {
  return CUDA_SUCCESS;
}

// ---- Errors -------------------------------------------------------------------------------

namespace {

struct ErrorText {
  CUresult error;
  const char* name;
  const char* text;
};

constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
};

}  // namespace

SIMGPU_API CUresult cuGetErrorString(CUresult error, const char** text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& known : kErrors)
    if (known.error == error) {
      *text = known.text;
      return CUDA_SUCCESS;
    }
  *text = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_API CUresult cuGetErrorName(CUresult error, const char** name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& known : kErrors)
    if (known.error == error) {
      *name = known.name;
      return CUDA_SUCCESS;
    }
  *name = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

// The runtime of a CUDA library linked statically (NVIDIA's cuBLAS, cuDNN, ...) asks the
// driver for tables of private functions by UUID; the simulated driver has none, and says so.
SIMGPU_API CUresult cuGetExportTable(const void** table, const CUuuid*) {
  if (table) *table = nullptr;
  return refused("cuGetExportTable",
                 "a CUDA library other than the simulated ones asked for the driver's private "
                 "tables (load it through memtrace's simulated GPU libraries instead)");
}

// The driver's log: nothing is ever logged here, so a callback is registered and never called.
SIMGPU_API CUresult cuLogsRegisterCallback(CUlogsCallback, void*, CUlogsCallbackHandle* handle) {
  static char registered;
  if (handle) *handle = reinterpret_cast<CUlogsCallbackHandle>(&registered);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle) {
  return CUDA_SUCCESS;
}

// ---- cuGetProcAddress ------------------------------------------------------------------------

// Note [A variant from the future]
// A program built against a CUDA newer than memtrace asks cuGetProcAddress for a form of a
// function memtrace has never seen; memtrace must hand out the driver's own, untraced, and say so
// (allocator/lookup_hooks.cpp). No CUDA release is newer than every test, so the simulated driver
// answers cuMemAlloc asked at version 99000 or later with a form of its own: the same allocation
// under a name memtrace does not know. No program built against a real toolkit asks that version.
SIMGPU_API CUresult simgpu_testing_cuMemAlloc_future(CUdeviceptr* pointer, size_t size) {
  return cuMemAlloc_v2(pointer, size);
}

SIMGPU_API CUresult cuGetProcAddress(const char* symbol, void** function, int version,
                                     cuuint64_t flags);

namespace {

// Forms the generated table (simulator/exports/cuda.exports) leaves out, since it keeps each
// function's newest form only: a program built against an older CUDA asks for the form of its
// release, and the driver answers with that one (its ABI), as libcuda.so.1 does.
struct Form {
  const char* name;
  int since;  // the first version it answers
  int until;  // the first version it no longer answers (0: none)
  void* function;
};

const Form kOtherForms[] = {
    // cuCtxGetDevice of every release before CUDA 13 (without the context argument).
    {"cuCtxGetDevice", 2000, 13000, reinterpret_cast<void*>(&cuCtxGetDevice)},
    // CUDA 11.3's cuGetProcAddress, without the status.
    {"cuGetProcAddress", 11030, 12000, reinterpret_cast<void*>(&cuGetProcAddress)},
    {"cuMemAlloc", 99000, 0, reinterpret_cast<void*>(&simgpu_testing_cuMemAlloc_future)},
};

}  // namespace

extern "C" int simgpu_driver_proc_address(const char* symbol, void** function, int version,
                                          unsigned long long flags, int* found) {
  *function = nullptr;
  for (const Form& form : kOtherForms) {
    if (strcmp(form.name, symbol) != 0 || version < form.since ||
        (form.until && version >= form.until))
      continue;
    *function = form.function;
    if (found) *found = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  for (size_t i = 0; i < simgpu_proc_count; ++i) {
    const SimgpuProc& proc = simgpu_procs[i];
    if (strcmp(proc.name, symbol) != 0) continue;
    if (proc.since > version) {
      if (found) *found = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    }
    bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    *function = per_thread ? proc.per_thread : proc.legacy;
    if (found) *found = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (found) *found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

SIMGPU_API CUresult cuGetProcAddress_v2(const char* symbol, void** function, int version,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (!symbol || !function) return CUDA_ERROR_INVALID_VALUE;
  int found = 0;
  auto result =
      static_cast<CUresult>(simgpu_driver_proc_address(symbol, function, version, flags, &found));
  if (status) *status = static_cast<CUdriverProcAddressQueryResult>(found);
  return result;
}

SIMGPU_API CUresult cuGetProcAddress(const char* symbol, void** function, int version,
                                     cuuint64_t flags) {
  if (!symbol || !function) return CUDA_ERROR_INVALID_VALUE;
  return static_cast<CUresult>(
      simgpu_driver_proc_address(symbol, function, version, flags, nullptr));
}
