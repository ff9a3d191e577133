// The runtime's devices, errors and memory: cudaMalloc and its kin, pools, copies, memsets.
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simulator/core/attributes.h"
#include "simulator/core/pools.h"
#include "simulator/core/testing.h"
#include "simulator/core/work.h"
#include "simulator/runtime/runtime.h"

namespace simgpu::runtime {
namespace {
thread_local cudaError_t t_last_error = cudaSuccess;
}

cudaError_t fail(cudaError_t error) {
  if (error != cudaSuccess && error != cudaErrorNotReady) t_last_error = error;
  return error;
}

cudaError_t fromStatus(Status status) {
  switch (status) {
    case Status::kSuccess:
      return cudaSuccess;
    case Status::kOutOfMemory:
      return fail(cudaErrorMemoryAllocation);
    case Status::kInvalidDevice:
      return fail(cudaErrorInvalidDevice);
    default:
      return fail(cudaErrorInvalidValue);
  }
}

cudaError_t ready() {
  if (profile()) return cudaSuccess;
  static bool said = [] {
    fprintf(stderr, "memtrace simulated GPU: %s\n", profileError().c_str());
    return true;
  }();
  (void)said;
  return fail(cudaErrorNoDevice);
}

cudaError_t context() {
  if (cudaError_t error = ready()) return error;
  activate(currentDevice());
  return cudaSuccess;
}

cudaError_t refused(const char* function, const char* why) {
  return fail(
      static_cast<cudaError_t>(refuse("the CUDA runtime", function, cudaErrorNotSupported, why)));
}

}  // namespace simgpu::runtime

using namespace simgpu;
using namespace simgpu::runtime;

// ---- Versions, devices, errors ------------------------------------------------------------

// The CUDA release PyTorch's wheels are built against (13.0).
#define SIMGPU_CUDA_VERSION 13000

SIMGPU_API cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue);
  *version = SIMGPU_CUDA_VERSION;
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue);
  *version = profile() ? SIMGPU_CUDA_VERSION : 0;
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = 0;
  if (cudaError_t error = ready()) return error;
  *count = deviceCount();
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = ready()) return error;
  *device = currentDevice();
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaSetDevice(int device) {
  if (cudaError_t error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return fail(cudaErrorInvalidDevice);
  setCurrentDevice(device);
  activate(device);  // since CUDA 12.0, cudaSetDevice initializes the device's primary context
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  return cudaSetDevice(device);
}

SIMGPU_API cudaError_t cudaSetDeviceFlags(unsigned int) {
  return ready();
}

SIMGPU_API cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (!flags) return fail(cudaErrorInvalidValue);
  *flags = cudaDeviceMapHost;
  return ready();
}

SIMGPU_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return fail(cudaErrorInvalidDevice);
  if (deviceAttribute(attribute, device, value)) return cudaSuccess;
  char why[64];
  snprintf(why, sizeof(why), "attribute %d is not known", static_cast<int>(attribute));
  return refused("cudaDeviceGetAttribute", why);
}

SIMGPU_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (!properties) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return fail(cudaErrorInvalidDevice);
  deviceProperties(properties, device);
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (!bus_id || length <= 0) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= deviceCount()) return fail(cudaErrorInvalidDevice);
  snprintf(bus_id, static_cast<size_t>(length), "00000000:%02X:00.0", 0x10 + device);
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* bus_id) {
  unsigned domain = 0, bus = 0;
  if (!device || !bus_id || sscanf(bus_id, "%x:%x", &domain, &bus) != 2)
    return fail(cudaErrorInvalidValue);
  if (static_cast<int>(bus) - 0x10 < 0 || static_cast<int>(bus) - 0x10 >= deviceCount())
    return fail(cudaErrorInvalidDevice);
  *device = static_cast<int>(bus) - 0x10;
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  // Priorities 0 (lowest) to -5 on compute capability 8.0 and later.
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return ready();
}

SIMGPU_API cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!can) return fail(cudaErrorInvalidValue);
  *can =
      device != peer && device >= 0 && peer >= 0 && device < deviceCount() && peer < deviceCount();
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceEnablePeerAccess(int, unsigned int) {
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceDisablePeerAccess(int) {
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) {
  return ready();
}

SIMGPU_API cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  if (!value) return fail(cudaErrorInvalidValue);
  switch (limit) {
    case cudaLimitStackSize:
      *value = 1024;
      break;
    case cudaLimitPrintfFifoSize:
      *value = 1 << 20;
      break;
    case cudaLimitMallocHeapSize:
      *value = 8 << 20;
      break;
    default:
      *value = 0;
      break;
  }
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) {
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceSynchronize(void) {
  if (cudaError_t error = context()) return error;
  poolsSynchronized(currentDevice());
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceReset(void) {
  return ready();
}

SIMGPU_API cudaError_t cudaGetLastError(void) {
  cudaError_t error = t_last_error;
  t_last_error = cudaSuccess;
  return error;
}

SIMGPU_API cudaError_t cudaPeekAtLastError(void) {
  return t_last_error;
}

namespace {

struct ErrorText {
  cudaError_t error;
  const char* name;
  const char* text;
};

// The errors the simulated runtime returns, with CUDA's own wording.
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice",
     "no kernel image is available for execution on the device"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorIllegalState, "cudaErrorIllegalState",
     "the operation cannot be performed in the present state"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled",
     "peer access is already enabled"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
};

}  // namespace

SIMGPU_API const char* cudaGetErrorName(cudaError_t error) {
  for (const ErrorText& known : kErrors)
    if (known.error == error) return known.name;
  return "cudaErrorUnknown";
}

SIMGPU_API const char* cudaGetErrorString(cudaError_t error) {
  for (const ErrorText& known : kErrors)
    if (known.error == error) return known.text;
  return "unknown error";
}

SIMGPU_API cudaError_t cudaProfilerStart(void) {
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaProfilerStop(void) {
  return cudaSuccess;
}

// ---- Memory -------------------------------------------------------------------------------

// Note [The runtime over the driver]
// By default the simulated runtime allocates in the one state itself: a call of the runtime
// is one call of the card, whoever interposes on the driver. CUDA's runtime is built over the
// driver instead, and memtrace must not count an allocation twice when its hooks see both the
// runtime's call and the driver's call the runtime makes. MEMTRACE_GPU_RUNTIME_DRIVER makes the
// simulated runtime's memory calls (cudaMalloc, cudaFree, cudaMallocAsync and its pool form,
// cudaFreeAsync, cudaMemGetInfo) the driver's (cuMemAlloc_v2, cuMemFree_v2, cuMemAllocAsync,
// cuMemAllocFromPoolAsync, cuMemFreeAsync, cuMemGetInfo_v2), reached the two ways CUDA's
// runtime has: "proc-address", as since CUDA 11.4 (dlopen of libcuda.so.1, dlsym of
// cuGetProcAddress_v2, every function asked of it), or "link", as up to 11.3 (ordinary calls
// through the PLT). memtrace's tests run both (tests/preload/test_preload.py).
namespace {

struct Driver {
  decltype(&cuMemAlloc_v2) mem_alloc;
  decltype(&cuMemFree_v2) mem_free;
  decltype(&cuMemAllocAsync) mem_alloc_async;
  decltype(&cuMemAllocFromPoolAsync) mem_alloc_from_pool_async;
  decltype(&cuMemFreeAsync) mem_free_async;
  decltype(&cuMemGetInfo_v2) mem_get_info;
};

template <typename Fn>
bool ask(decltype(&cuGetProcAddress_v2) get_proc_address, const char* name, Fn* out) {
  void* function = nullptr;
  CUdriverProcAddressQueryResult status;
  if (get_proc_address(name, &function, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
      CUDA_SUCCESS)
    return false;
  *out = reinterpret_cast<Fn>(function);
  return true;
}

// nullptr: the runtime allocates in the state itself (MEMTRACE_GPU_RUNTIME_DRIVER unset).
const Driver* driver() {
  static const Driver* found = []() -> const Driver* {
    static Driver calls{};
    const char* way = getenv("MEMTRACE_GPU_RUNTIME_DRIVER");
    if (!way || !*way) return nullptr;
    if (strcmp(way, "link") == 0) {
      calls = {&cuMemAlloc_v2,           &cuMemFree_v2,   &cuMemAllocAsync,
               &cuMemAllocFromPoolAsync, &cuMemFreeAsync, &cuMemGetInfo_v2};
      return &calls;
    }
    void* library =
        strcmp(way, "proc-address") == 0 ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) : nullptr;
    auto get_proc_address = library ? reinterpret_cast<decltype(&cuGetProcAddress_v2)>(
                                          dlsym(library, "cuGetProcAddress_v2"))
                                    : nullptr;
    if (!get_proc_address || !ask(get_proc_address, "cuMemAlloc", &calls.mem_alloc) ||
        !ask(get_proc_address, "cuMemFree", &calls.mem_free) ||
        !ask(get_proc_address, "cuMemAllocAsync", &calls.mem_alloc_async) ||
        !ask(get_proc_address, "cuMemAllocFromPoolAsync", &calls.mem_alloc_from_pool_async) ||
        !ask(get_proc_address, "cuMemFreeAsync", &calls.mem_free_async) ||
        !ask(get_proc_address, "cuMemGetInfo", &calls.mem_get_info)) {
      fprintf(stderr, "memtrace simulated GPU: MEMTRACE_GPU_RUNTIME_DRIVER=%s: %s\n", way,
              get_proc_address ? "the driver lacks a memory function"
                               : "neither \"link\" nor \"proc-address\" to libcuda.so.1");
      abort();
    }
    return &calls;
  }();
  return found;
}

cudaError_t fromDriver(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return fail(cudaErrorMemoryAllocation);
    case CUDA_ERROR_INVALID_DEVICE:
      return fail(cudaErrorInvalidDevice);
    case CUDA_ERROR_NO_DEVICE:
      return fail(cudaErrorNoDevice);
    default:
      return fail(cudaErrorInvalidValue);
  }
}

}  // namespace

SIMGPU_API cudaError_t cudaMalloc(void** pointer, size_t size) {
  if (cudaError_t error = context()) return error;
  if (const Driver* calls = driver()) {
    if (!pointer) return fail(cudaErrorInvalidValue);
    CUdeviceptr memory = 0;
    cudaError_t result = fromDriver(calls->mem_alloc(&memory, size));
    *pointer = reinterpret_cast<void*>(memory);
    return result;
  }
  return fromStatus(allocate(pointer, size, currentDevice(), MemoryKind::kDevice));
}

SIMGPU_API cudaError_t cudaFree(void* pointer) {
  if (cudaError_t error = context()) return error;
  if (!pointer) return cudaSuccess;  // cudaFree(0): make the context, nothing more
  if (const Driver* calls = driver())
    return fromDriver(calls->mem_free(reinterpret_cast<CUdeviceptr>(pointer)));
  if (poolFree(pointer)) return cudaSuccess;
  return fromStatus(release(pointer));
}

SIMGPU_API cudaError_t cudaMallocManaged(void** pointer, size_t size, unsigned int) {
  if (cudaError_t error = context()) return error;
  return fromStatus(allocate(pointer, size, currentDevice(), MemoryKind::kManaged));
}

SIMGPU_API cudaError_t cudaMallocPitch(void** pointer, size_t* pitch, size_t width, size_t height) {
  if (!pitch) return fail(cudaErrorInvalidValue);
  *pitch = (width + 511) & ~size_t{511};  // the texture alignment
  return cudaMalloc(pointer, *pitch * height);
}

SIMGPU_API cudaError_t cudaMallocHost(void** pointer, size_t size) {
  return fromStatus(allocate(pointer, size, currentDevice(), MemoryKind::kHost));
}

SIMGPU_API cudaError_t cudaHostAlloc(void** pointer, size_t size, unsigned int) {
  return cudaMallocHost(pointer, size);
}

SIMGPU_API cudaError_t cudaFreeHost(void* pointer) {
  return fromStatus(release(pointer));
}

SIMGPU_API cudaError_t cudaHostRegister(void*, size_t, unsigned int) {
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaHostUnregister(void*) {
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaHostGetDevicePointer(void** device_pointer, void* host, unsigned int) {
  if (!device_pointer) return fail(cudaErrorInvalidValue);
  *device_pointer = host;  // unified addressing: the same address
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaHostGetFlags(unsigned int* flags, void*) {
  if (!flags) return fail(cudaErrorInvalidValue);
  *flags = cudaHostAllocDefault;
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = context()) return error;
  if (const Driver* calls = driver())
    return fromDriver(calls->mem_get_info(free_bytes, total_bytes));
  testing::noteMemoryInfo();
  int device = currentDevice();
  uint64_t total = totalBytes(device), used = usedBytes(device);
  *total_bytes = total;
  *free_bytes = used < total ? total - used : 0;
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes,
                                                const void* pointer) {
  if (!attributes) return fail(cudaErrorInvalidValue);
  memset(attributes, 0, sizeof(*attributes));
  Pointer found = find(pointer);
  if (!found.found) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    attributes->hostPointer = const_cast<void*>(pointer);
    return cudaSuccess;
  }
  switch (found.kind) {
    case MemoryKind::kDevice:
      attributes->type = cudaMemoryTypeDevice;
      break;
    case MemoryKind::kManaged:
      attributes->type = cudaMemoryTypeManaged;
      break;
    case MemoryKind::kHost:
      attributes->type = cudaMemoryTypeHost;
      break;
  }
  attributes->device = found.kind == MemoryKind::kHost ? currentDevice() : found.device;
  attributes->devicePointer = const_cast<void*>(pointer);
  if (found.kind != MemoryKind::kDevice) attributes->hostPointer = const_cast<void*>(pointer);
  return cudaSuccess;
}

// Stream-ordered allocation (Note [Pools] in simulator/core/pools.cpp).
namespace {

cudaError_t mallocFromPool(void** pointer, size_t size, Pool* pool, cudaStream_t stream) {
  if (cudaError_t error = context()) return error;
  if (!pool) return fail(cudaErrorInvalidValue);
  if (const Driver* calls = driver()) {
    if (!pointer) return fail(cudaErrorInvalidValue);
    CUdeviceptr memory = 0;
    auto cu_stream = reinterpret_cast<CUstream>(stream);
    cudaError_t result =
        fromDriver(pool == defaultPool(currentDevice())
                       ? calls->mem_alloc_async(&memory, size, cu_stream)
                       : calls->mem_alloc_from_pool_async(
                             &memory, size, reinterpret_cast<CUmemoryPool>(pool), cu_stream));
    *pointer = reinterpret_cast<void*>(memory);
    return result;
  }
  launched(stream, cudaGraphNodeTypeMemAlloc);
  return fromStatus(poolAllocate(pool, pointer, size));
}

cudaError_t freeAsync(void* pointer, cudaStream_t stream) {
  if (!pointer) return cudaSuccess;
  if (const Driver* calls = driver())
    return fromDriver(calls->mem_free_async(reinterpret_cast<CUdeviceptr>(pointer),
                                            reinterpret_cast<CUstream>(stream)));
  launched(stream, cudaGraphNodeTypeMemFree);
  if (poolFree(pointer)) return cudaSuccess;
  return fromStatus(release(pointer));
}

}  // namespace

SIMGPU_API cudaError_t cudaMallocAsync(void** pointer, size_t size, cudaStream_t stream) {
  return mallocFromPool(pointer, size, defaultPool(currentDevice()), stream);
}
SIMGPU_API cudaError_t cudaMallocAsync_ptsz(void** pointer, size_t size, cudaStream_t stream) {
  return cudaMallocAsync(pointer, size, stream);
}
SIMGPU_API cudaError_t cudaMallocFromPoolAsync(void** pointer, size_t size, cudaMemPool_t pool,
                                               cudaStream_t stream) {
  return mallocFromPool(pointer, size, reinterpret_cast<Pool*>(pool), stream);
}
SIMGPU_API cudaError_t cudaMallocFromPoolAsync_ptsz(void** pointer, size_t size, cudaMemPool_t pool,
                                                    cudaStream_t stream) {
  return cudaMallocFromPoolAsync(pointer, size, pool, stream);
}
SIMGPU_API cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  return freeAsync(pointer, stream);
}
SIMGPU_API cudaError_t cudaFreeAsync_ptsz(void* pointer, cudaStream_t stream) {
  return freeAsync(pointer, stream);
}

SIMGPU_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (!pool) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = ready()) return error;
  if (device < 0 || device >= deviceCount()) return fail(cudaErrorInvalidDevice);
  *pool = reinterpret_cast<cudaMemPool_t>(defaultPool(device));
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return cudaDeviceGetDefaultMemPool(pool, device);
}

SIMGPU_API cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (!pool || !props) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = ready()) return error;
  if (props->location.type != cudaMemLocationTypeDevice)
    return refused("cudaMemPoolCreate", "pools of host memory");
  *pool = reinterpret_cast<cudaMemPool_t>(createPool(props->location.id));
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  destroyPool(reinterpret_cast<Pool*>(pool));
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute,
                                               void* value) {
  if (!pool || !value) return fail(cudaErrorInvalidValue);
  if (poolSetAttribute(reinterpret_cast<Pool*>(pool), attribute, value)) return cudaSuccess;
  return fail(cudaErrorInvalidValue);
}

SIMGPU_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute,
                                               void* value) {
  if (!pool || !value) return fail(cudaErrorInvalidValue);
  if (poolGetAttribute(reinterpret_cast<Pool*>(pool), attribute, value)) return cudaSuccess;
  return fail(cudaErrorInvalidValue);
}

SIMGPU_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  if (!pool) return fail(cudaErrorInvalidValue);
  poolTrim(reinterpret_cast<Pool*>(pool), keep);
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t, const cudaMemAccessDesc*, size_t) {
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceGetGraphMemAttribute(int, cudaGraphMemAttributeType, void* value) {
  if (!value) return fail(cudaErrorInvalidValue);
  *static_cast<uint64_t*>(value) = 0;  // graphs' memory nodes are not simulated apart
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceSetGraphMemAttribute(int, cudaGraphMemAttributeType, void*) {
  return cudaSuccess;
}

SIMGPU_API cudaError_t cudaDeviceGraphMemTrim(int) {
  return cudaSuccess;
}

// ---- Copies and memsets (Note [Work that does nothing], Note [Reads of device values]) -----

namespace {

// A copy as the simulated device makes it (Note [Values on the simulated device]).
cudaError_t copy(void* dst, const void* src, size_t bytes, cudaStream_t stream, bool) {
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  launched(stream, cudaGraphNodeTypeMemcpy);
  return simgpu::copy(dst, src, bytes) ? cudaSuccess : fail(cudaErrorNotPermitted);
}

cudaError_t copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                   size_t height, cudaStream_t stream) {
  if (height == 0 || width == 0) return cudaSuccess;
  if (!dst || !src || width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  launched(stream, cudaGraphNodeTypeMemcpy);
  for (size_t row = 0; row < height; ++row)
    if (!simgpu::copy(static_cast<char*>(dst) + row * dpitch,
                      static_cast<const char*>(src) + row * spitch, width))
      return fail(cudaErrorNotPermitted);
  return cudaSuccess;
}

cudaError_t fill(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!dst) return fail(cudaErrorInvalidValue);
  launched(stream, cudaGraphNodeTypeMemset);
  simgpu::fill(dst, value, bytes);
  return cudaSuccess;
}

}  // namespace

SIMGPU_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  return copy(dst, src, bytes, nullptr, false);
}
SIMGPU_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                                       cudaStream_t stream) {
  return copy(dst, src, bytes, stream, true);
}
SIMGPU_API cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t bytes,
                                            cudaMemcpyKind kind, cudaStream_t stream) {
  return cudaMemcpyAsync(dst, src, bytes, kind, stream);
}
SIMGPU_API cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t bytes,
                                       cudaMemcpyKind kind) {
  return cudaMemcpy(dst, src, bytes, kind);
}
SIMGPU_API cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, size_t bytes) {
  return copy(dst, src, bytes, nullptr, false);
}
SIMGPU_API cudaError_t cudaMemcpyPeerAsync(void* dst, int, const void* src, int, size_t bytes,
                                           cudaStream_t stream) {
  return copy(dst, src, bytes, stream, true);
}
SIMGPU_API cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                    size_t width, size_t height, cudaMemcpyKind) {
  return copy2D(dst, dpitch, src, spitch, width, height, nullptr);
}
SIMGPU_API cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                         size_t width, size_t height, cudaMemcpyKind,
                                         cudaStream_t stream) {
  return copy2D(dst, dpitch, src, spitch, width, height, stream);
}
SIMGPU_API cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src,
                                              size_t spitch, size_t width, size_t height,
                                              cudaMemcpyKind kind, cudaStream_t stream) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream);
}
SIMGPU_API cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  return fill(dst, value, bytes, nullptr);
}
SIMGPU_API cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  return fill(dst, value, bytes, stream);
}
SIMGPU_API cudaError_t cudaMemsetAsync_ptsz(void* dst, int value, size_t bytes,
                                            cudaStream_t stream) {
  return fill(dst, value, bytes, stream);
}
SIMGPU_API cudaError_t cudaMemset2DAsync(void* dst, size_t pitch, int value, size_t width,
                                         size_t height, cudaStream_t stream) {
  return fill(dst, value, height ? pitch * (height - 1) + width : 0, stream);
}
SIMGPU_API cudaError_t cudaMemPrefetchAsync(const void*, size_t, cudaMemLocation, unsigned int,
                                            cudaStream_t) {
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaMemAdvise(const void*, size_t, cudaMemoryAdvise, cudaMemLocation) {
  return cudaSuccess;
}

// ---- IPC: not simulated (each process has its own simulated device) ---------------------------

SIMGPU_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*) {
  return refused("cudaIpcGetMemHandle",
                 "memory shared between processes (CUDA IPC) is not simulated");
}
SIMGPU_API cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned int) {
  return refused("cudaIpcOpenMemHandle",
                 "memory shared between processes (CUDA IPC) is not simulated");
}
SIMGPU_API cudaError_t cudaIpcCloseMemHandle(void*) {
  return refused("cudaIpcCloseMemHandle",
                 "memory shared between processes (CUDA IPC) is not simulated");
}
SIMGPU_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t*, cudaEvent_t) {
  return refused("cudaIpcGetEventHandle",
                 "events shared between processes (CUDA IPC) are not simulated");
}
SIMGPU_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t*, cudaIpcEventHandle_t) {
  return refused("cudaIpcOpenEventHandle",
                 "events shared between processes (CUDA IPC) are not simulated");
}

// ---- Arrays and textures: not simulated, but the one value-returning helper answers --------

SIMGPU_API cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                       cudaChannelFormatKind kind) {
  return cudaChannelFormatDesc{x, y, z, w, kind};
}
