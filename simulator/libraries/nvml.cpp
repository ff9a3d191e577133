// NVML (libnvidia-ml.so.1), the management library NVIDIA's driver ships: PyTorch opens it for
// peer access and fabric handles (expandable segments ask whether the device has fabric
// access: c10/cuda's get_fabric_access), and for the processes it names in an out-of-memory
// message. The simulated card is one process's: the process running on it is the only one,
// using what the simulated device counts as used. Utilization, temperature, power and clocks
// are not simulated: those calls are refused in one line (NVML_ERROR_NOT_SUPPORTED).
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "simulator/core/attributes.h"
#include "simulator/libraries/library.h"

using namespace simgpu;

namespace {

// nvmlReturn_t.
enum : int {
  kSuccess = 0,
  kUninitialized = 1,
  kInvalidArgument = 2,
  kNotSupported = 3,
  kNotFound = 6,
  kInsufficientSize = 7,
};

// A device handle is the address of its entry here.
char g_devices[64];

int deviceOf(void* handle) {
  auto* entry = static_cast<char*>(handle);
  if (entry < g_devices || entry >= g_devices + deviceCount()) return -1;
  return static_cast<int>(entry - g_devices);
}

// nvmlMemory_t and nvmlProcessInfo_v1_t (the unversioned API PyTorch asks for).
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfo {
  unsigned int pid;
  unsigned long long used;
};

}  // namespace

SIMGPU_API int nvmlInit_v2(void) {
  return profile() ? kSuccess : kUninitialized;
}
SIMGPU_API int nvmlInit(void) {
  return nvmlInit_v2();
}
SIMGPU_API int nvmlInitWithFlags(unsigned int) {
  return nvmlInit_v2();
}
SIMGPU_API int nvmlShutdown(void) {
  return kSuccess;
}
SIMGPU_API const char* nvmlErrorString(int result) {
  switch (result) {
    case kSuccess:
      return "Success";
    case kUninitialized:
      return "Uninitialized";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case kNotFound:
      return "Not Found";
    case kInsufficientSize:
      return "Insufficient Size";
    default:
      return "Unknown Error";
  }
}
SIMGPU_API int nvmlSystemGetCudaDriverVersion(int* version) {
  if (!version) return kInvalidArgument;
  *version = 13000;
  return kSuccess;
}
SIMGPU_API int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return nvmlSystemGetCudaDriverVersion(version);
}
SIMGPU_API int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!version || length == 0) return kInvalidArgument;
  snprintf(version, length, "memtrace-simulated");
  return kSuccess;
}
SIMGPU_API int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!count) return kInvalidArgument;
  *count = static_cast<unsigned>(deviceCount());
  return kSuccess;
}
SIMGPU_API int nvmlDeviceGetCount(unsigned int* count) {
  return nvmlDeviceGetCount_v2(count);
}
SIMGPU_API int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (!device) return kInvalidArgument;
  if (index >= static_cast<unsigned>(deviceCount())) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
SIMGPU_API int nvmlDeviceGetHandleByIndex(unsigned int index, void** device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}
// The bus ids the simulated runtime gives its devices: 00000000:1X:00.0 (cudaDeviceGetPCIBusId).
SIMGPU_API int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  unsigned domain = 0, bus = 0;
  if (!bus_id || !device || sscanf(bus_id, "%x:%x", &domain, &bus) != 2) return kInvalidArgument;
  int index = static_cast<int>(bus) - 0x10;
  if (index < 0 || index >= deviceCount()) return kNotFound;
  *device = &g_devices[index];
  return kSuccess;
}
SIMGPU_API int nvmlDeviceGetHandleByPciBusId(const char* bus_id, void** device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}
SIMGPU_API int nvmlDeviceGetIndex(void* handle, unsigned int* index) {
  int device = deviceOf(handle);
  if (device < 0 || !index) return kInvalidArgument;
  *index = static_cast<unsigned>(device);
  return kSuccess;
}
SIMGPU_API int nvmlDeviceGetName(void* handle, char* name, unsigned int length) {
  if (deviceOf(handle) < 0 || !name || length == 0) return kInvalidArgument;
  snprintf(name, length, "%s", profile()->device_name.c_str());
  return kSuccess;
}
// "GPU-" and the UUID cudaGetDeviceProperties gives, as NVML writes it.
SIMGPU_API int nvmlDeviceGetUUID(void* handle, char* uuid, unsigned int length) {
  int device = deviceOf(handle);
  if (device < 0 || !uuid || length < 41) return kInvalidArgument;
  unsigned char bytes[16];
  deviceUuid(bytes, device);
  snprintf(uuid, length, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
           bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return kSuccess;
}
SIMGPU_API int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  if (!uuid || !device) return kInvalidArgument;
  for (int index = 0; index < deviceCount(); ++index) {
    char text[96];
    nvmlDeviceGetUUID(&g_devices[index], text, sizeof(text));
    if (strcmp(text, uuid) == 0) {
      *device = &g_devices[index];
      return kSuccess;
    }
  }
  return kNotFound;
}
SIMGPU_API int nvmlDeviceGetMemoryInfo(void* handle, Memory* memory) {
  int device = deviceOf(handle);
  if (device < 0 || !memory) return kInvalidArgument;
  memory->total = totalBytes(device);
  memory->used = usedBytes(device);
  memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
  return kSuccess;
}
SIMGPU_API int nvmlDeviceGetCudaComputeCapability(void* handle, int* major, int* minor) {
  if (deviceOf(handle) < 0 || !major || !minor) return kInvalidArgument;
  *major = profile()->major;
  *minor = profile()->minor;
  return kSuccess;
}
// The one process on the simulated card: this one, with what the device counts as used.
SIMGPU_API int nvmlDeviceGetComputeRunningProcesses(void* handle, unsigned int* count,
                                                    ProcessInfo* infos) {
  int device = deviceOf(handle);
  if (device < 0 || !count) return kInvalidArgument;
  uint64_t used = usedBytes(device);
  unsigned wanted = used ? 1 : 0;
  if (*count < wanted || (wanted && !infos)) {
    *count = wanted;
    return kInsufficientSize;
  }
  *count = wanted;
  if (wanted) infos[0] = ProcessInfo{static_cast<unsigned>(getpid()), used};
  return kSuccess;
}
// Fabric (multi-node NVLink) is not simulated: answered as a card outside an NVLink fabric
// answers, success with the state "not supported" (0), so that PyTorch makes expandable
// segments' memory with POSIX file descriptor handles. The structure's first field is its
// version, whose low 24 bits are the structure's size (NVML_STRUCT_VERSION): everything after
// it is zero (cluster UUID, status, clique, state, health).
SIMGPU_API int nvmlDeviceGetGpuFabricInfoV(void* handle, void* info) {
  if (deviceOf(handle) < 0 || !info) return kInvalidArgument;
  unsigned version;
  memcpy(&version, info, sizeof(version));
  size_t size = version & 0xFFFFFF;
  if (size < sizeof(version) || size > 4096) return kInvalidArgument;
  memset(static_cast<char*>(info) + sizeof(version), 0, size - sizeof(version));
  return kSuccess;
}
SIMGPU_API int nvmlDeviceGetGpuFabricInfo(void*, void*) {
  return kNotSupported;
}
SIMGPU_API int nvmlDeviceGetNvLinkRemotePciInfo_v2(void*, unsigned int, void*) {
  return kNotSupported;
}
SIMGPU_API int nvmlDeviceGetNvLinkRemoteDeviceType(void*, unsigned int, int*) {
  return kNotSupported;
}
