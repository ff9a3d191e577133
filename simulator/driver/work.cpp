// The simulated driver's work: modules and their functions (what Triton, NVRTC-compiled
// kernels and PyTorch's jiterator load), launches, occupancy, linking, streams, events and
// stream capture, over the objects the runtime shares (simulator/core/work.h).
#include "simulator/core/work.h"

#include <cuda.h>
#include <string.h>

#include <algorithm>
#include <cstdlib>

#include "simulator/core/attributes.h"
#include "simulator/core/device.h"
#include "simulator/core/pools.h"
#include "simulator/driver/driver_internal.h"

using namespace simgpu;
using namespace simgpu::driver;

// ---- Modules, libraries, functions ----------------------------------------------------------

SIMGPU_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  *module = reinterpret_cast<CUmodule>(loadModule());
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int,
                                       CUjit_option*, void**) {
  return cuModuleLoadData(module, image);
}
SIMGPU_API CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  return cuModuleLoadData(module, image);
}
SIMGPU_API CUresult cuModuleLoad(CUmodule* module, const char* path) {
  return cuModuleLoadData(module, path);
}
SIMGPU_API CUresult cuModuleUnload(CUmodule module) {
  delete reinterpret_cast<Module*>(module);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (!function || !module || !name) return CUDA_ERROR_INVALID_VALUE;
  *function = reinterpret_cast<CUfunction>(moduleFunction(reinterpret_cast<Module*>(module), name));
  return CUDA_SUCCESS;
}
// A module's global: device memory of the size asked for at first use; its size is unknown to
// the simulated driver (it does not read images), so a size query answers 8 bytes.
SIMGPU_API CUresult cuModuleGetGlobal_v2(CUdeviceptr* pointer, size_t* size, CUmodule,
                                         const char*) {
  static void* global = [] {
    void* memory = nullptr;
    allocate(&memory, 4096, 0, MemoryKind::kDevice, false);
    return memory;
  }();
  if (pointer) *pointer = reinterpret_cast<CUdeviceptr>(global);
  if (size) *size = 8;
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**,
                                      unsigned int, CUlibraryOption*, void**, unsigned int) {
  if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
  *library = reinterpret_cast<CUlibrary>(loadModule());
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLibraryUnload(CUlibrary library) {
  delete reinterpret_cast<Module*>(library);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  if (!kernel || !library) return CUDA_ERROR_INVALID_VALUE;
  *kernel = reinterpret_cast<CUkernel>(moduleFunction(reinterpret_cast<Module*>(library), name));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  if (!module) return CUDA_ERROR_INVALID_VALUE;
  *module = reinterpret_cast<CUmodule>(library);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  if (!function) return CUDA_ERROR_INVALID_VALUE;
  *function = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuKernelSetAttribute(CUfunction_attribute, int, CUkernel, CUdevice) {
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuFuncGetName(const char** name, CUfunction function) {
  if (!name || !function) return CUDA_ERROR_INVALID_VALUE;
  *name = reinterpret_cast<Function*>(function)->name.c_str();
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuFuncGetModule(CUmodule* module, CUfunction function) {
  if (!module || !function) return CUDA_ERROR_INVALID_VALUE;
  *module = reinterpret_cast<CUmodule>(reinterpret_cast<Function*>(function)->module);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction) {
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuFuncLoad(CUfunction) {
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attribute,
                                       CUfunction function) {
  if (!value || !function) return CUDA_ERROR_INVALID_VALUE;
  const Profile* card = profile();
  int sm = card ? card->major * 10 + card->minor : 0;
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = 0;
      break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
      *value = 0;
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *value = 0;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = kRegistersPerThread;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
      *value = sm;
      break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *value = sm;
      break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
      *value = 0;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = reinterpret_cast<Function*>(function)->max_dynamic_shared_bytes;
      if (*value == 0) *value = 49152;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *value = -1;
      break;
    default:
      *value = 0;
      break;
  }
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute,
                                       int value) {
  if (!function) return CUDA_ERROR_INVALID_VALUE;
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    const Profile* card = profile();
    if (card && value > card->shared_memory_per_block_optin) return CUDA_ERROR_INVALID_VALUE;
    reinterpret_cast<Function*>(function)->max_dynamic_shared_bytes = value;
  }
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuFuncSetCacheConfig(CUfunction, CUfunc_cache) {
  return CUDA_SUCCESS;
}

// ---- Launches ---------------------------------------------------------------------------

SIMGPU_API CUresult cuLaunchKernel(CUfunction function, unsigned int, unsigned int, unsigned int,
                                   unsigned int, unsigned int, unsigned int, unsigned int,
                                   CUstream stream, void**, void**) {
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  launched(stream, CU_GRAPH_NODE_TYPE_KERNEL);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLaunchKernel_ptsz(CUfunction function, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared, CUstream stream,
                                        void** params, void** extra) {
  return cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}
SIMGPU_API CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction function, void**,
                                     void**) {
  if (!config || !function) return CUDA_ERROR_INVALID_VALUE;
  launched(config->hStream, CU_GRAPH_NODE_TYPE_KERNEL);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction function,
                                          void** params, void** extra) {
  return cuLaunchKernelEx(config, function, params, extra);
}
SIMGPU_API CUresult cuLaunchCooperativeKernel(CUfunction function, unsigned int, unsigned int,
                                              unsigned int, unsigned int, unsigned int,
                                              unsigned int, unsigned int, CUstream stream, void**) {
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  launched(stream, CU_GRAPH_NODE_TYPE_KERNEL);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLaunchHostFunc(CUstream stream, CUhostFn function, void* data) {
  if (!function) return CUDA_ERROR_INVALID_VALUE;
  if (captureGraph(stream)) {
    launched(stream, CU_GRAPH_NODE_TYPE_HOST);
    return CUDA_SUCCESS;
  }
  function(data);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction,
                                                                         int block_size,
                                                                         size_t dynamic_shared,
                                                                         unsigned int) {
  if (!blocks || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  *blocks = activeBlocksPerMultiprocessor(block_size, dynamic_shared);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction function,
                                                                int block_size,
                                                                size_t dynamic_shared) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, block_size,
                                                              dynamic_shared, 0);
}
SIMGPU_API CUresult cuOccupancyMaxActiveClusters(int* clusters, CUfunction, const CUlaunchConfig*) {
  if (!clusters) return CUDA_ERROR_INVALID_VALUE;
  const Profile* card = profile();
  *clusters = card ? card->multiprocessors / std::max(1, card->max_cluster_size) : 0;
  return CUDA_SUCCESS;
}

// Tensor maps (Hopper's TMA descriptors, which Triton makes): an opaque 128-byte value the
// kernel reads; nothing reads it here.
SIMGPU_API CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType, cuuint32_t, void*,
                                           const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                           const cuuint32_t*, CUtensorMapInterleave,
                                           CUtensorMapSwizzle, CUtensorMapL2promotion,
                                           CUtensorMapFloatOOBfill) {
  if (!map) return CUDA_ERROR_INVALID_VALUE;
  memset(map, 0, sizeof(*map));
  return CUDA_SUCCESS;
}

// ---- Linking (NVRTC's output, Triton) --------------------------------------------------------

namespace {
// What a link produces: an image nobody reads (launches do nothing).
constexpr char kLinkedImage[] = "memtrace simulated GPU: linked image";
}  // namespace

SIMGPU_API CUresult cuLinkCreate_v2(unsigned int, CUjit_option*, void**, CUlinkState* state) {
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  *state = reinterpret_cast<CUlinkState>(new int(0));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLinkAddData_v2(CUlinkState, CUjitInputType, void*, size_t, const char*,
                                     unsigned int, CUjit_option*, void**) {
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLinkAddFile_v2(CUlinkState, CUjitInputType, const char*, unsigned int,
                                     CUjit_option*, void**) {
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLinkComplete(CUlinkState, void** image, size_t* size) {
  if (image) *image = const_cast<char*>(kLinkedImage);
  if (size) *size = sizeof(kLinkedImage);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuLinkDestroy(CUlinkState state) {
  delete reinterpret_cast<int*>(state);
  return CUDA_SUCCESS;
}

// ---- Streams, events, capture: the runtime's objects (simulator/core/work.h) ------------------

SIMGPU_API CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  if (!stream) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult error = ready()) return error;
  *stream = reinterpret_cast<CUstream>(createStream(flags, priority));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return cuStreamCreateWithPriority(stream, flags, 0);
}
SIMGPU_API CUresult cuStreamDestroy_v2(CUstream stream) {
  if (reinterpret_cast<uintptr_t>(stream) > 2) destroyStream(resolve(stream));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamSynchronize(CUstream stream) {
  poolsSynchronized(resolve(stream)->device);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamQuery(CUstream) {
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamWaitEvent(CUstream stream, CUevent, unsigned int) {
  launched(stream, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamGetPriority(CUstream stream, int* priority) {
  if (!priority) return CUDA_ERROR_INVALID_VALUE;
  *priority = resolve(stream)->priority;
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamGetFlags(CUstream stream, unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = resolve(stream)->flags;
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamGetDevice(CUstream stream, CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = resolve(stream)->device;
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamGetCtx(CUstream stream, CUcontext* ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = context(resolve(stream)->device);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamGetId(CUstream stream, unsigned long long* id) {
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  *id = reinterpret_cast<uintptr_t>(resolve(stream));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  *status = static_cast<CUstreamCaptureStatus>(resolve(stream)->capture);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  if (reinterpret_cast<uintptr_t>(stream) <= 2) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return beginCapture(resolve(stream), mode) ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}
SIMGPU_API CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  Graph* captured = endCapture(resolve(stream));
  if (!captured) return CUDA_ERROR_ILLEGAL_STATE;
  *graph = reinterpret_cast<CUgraph>(captured);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = static_cast<CUstreamCaptureMode>(exchangeCaptureMode(*mode));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr, cuuint32_t,
                                            unsigned int) {
  launched(stream, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr, cuuint32_t, unsigned int) {
  launched(stream, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr, cuuint64_t,
                                            unsigned int) {
  launched(stream, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr, cuuint64_t, unsigned int) {
  launched(stream, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  *event = reinterpret_cast<CUevent>(createEvent(flags));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuEventDestroy_v2(CUevent event) {
  destroyEvent(reinterpret_cast<Event*>(event));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  launched(stream, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  recordEvent(reinterpret_cast<Event*>(event));
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int) {
  return cuEventRecord(event, stream);
}
SIMGPU_API CUresult cuEventQuery(CUevent event) {
  return event ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
SIMGPU_API CUresult cuEventSynchronize(CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  poolsSynchronized(reinterpret_cast<Event*>(event)->device);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (!ms || !start || !end) return CUDA_ERROR_INVALID_VALUE;
  auto* first = reinterpret_cast<Event*>(start);
  auto* last = reinterpret_cast<Event*>(end);
  if (first->recorded_ms < 0 || last->recorded_ms < 0) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>(last->recorded_ms - first->recorded_ms);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                unsigned long long) {
  if (!exec || !graph) return CUDA_ERROR_INVALID_VALUE;
  *exec = reinterpret_cast<CUgraphExec>(new GraphExec{reinterpret_cast<Graph*>(graph)});
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  launched(stream, CU_GRAPH_NODE_TYPE_GRAPH);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuGraphExecDestroy(CUgraphExec exec) {
  delete reinterpret_cast<GraphExec*>(exec);
  return CUDA_SUCCESS;
}
SIMGPU_API CUresult cuGraphDestroy(CUgraph graph) {
  delete reinterpret_cast<Graph*>(graph);
  return CUDA_SUCCESS;
}
