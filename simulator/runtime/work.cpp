// The runtime's work: streams, events, stream capture and graphs, the kernels a program
// registers and launches (Note [Work that does nothing] in simulator/core/work.cpp), and the
// driver's entry points.
#include "simulator/core/work.h"

#include <cuda.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "simulator/core/attributes.h"
#include "simulator/core/fatbinary.h"
#include "simulator/core/pools.h"
#include "simulator/core/testing.h"
#include "simulator/driver/driver.h"
#include "simulator/runtime/runtime.h"

using namespace simgpu;
using namespace simgpu::runtime;

namespace {

Stream* stream(cudaStream_t handle) {
  return resolve(handle);
}

Event* event(cudaEvent_t handle) {
  return reinterpret_cast<Event*>(handle);
}

}  // namespace

// ---- Streams --------------------------------------------------------------------------------

SIMGPU_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* out, unsigned int flags,
                                                    int priority) {
  if (!out) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = context()) return error;
  *out = reinterpret_cast<cudaStream_t>(createStream(flags, priority));
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned int flags) {
  return cudaStreamCreateWithPriority(out, flags, 0);
}
SIMGPU_API cudaError_t cudaStreamCreate(cudaStream_t* out) {
  return cudaStreamCreateWithPriority(out, cudaStreamDefault, 0);
}
SIMGPU_API cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  destroyStream(reinterpret_cast<uintptr_t>(handle) <= 2 ? nullptr : stream(handle));
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  if (cudaError_t error = ready()) return error;
  if (stream(handle)->capture == CaptureStatus::kActive)
    return fail(cudaErrorStreamCaptureUnsupported);
  poolsSynchronized(stream(handle)->device);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t handle) {
  return cudaStreamSynchronize(handle);
}
SIMGPU_API cudaError_t cudaStreamQuery(cudaStream_t handle) {
  return ready();
}
SIMGPU_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t handle) {
  return ready();
}
SIMGPU_API cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t, unsigned int) {
  launched(handle, cudaGraphNodeTypeWaitEvent);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t handle, cudaEvent_t e,
                                                unsigned int flags) {
  return cudaStreamWaitEvent(handle, e, flags);
}
SIMGPU_API cudaError_t cudaStreamGetPriority(cudaStream_t handle, int* priority) {
  if (!priority) return fail(cudaErrorInvalidValue);
  *priority = stream(handle)->priority;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamGetFlags(cudaStream_t handle, unsigned int* flags) {
  if (!flags) return fail(cudaErrorInvalidValue);
  *flags = stream(handle)->flags;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamGetDevice(cudaStream_t handle, int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = stream(handle)->device;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamGetId(cudaStream_t handle, unsigned long long* id) {
  if (!id) return fail(cudaErrorInvalidValue);
  *id = reinterpret_cast<uintptr_t>(stream(handle));
  return cudaSuccess;
}

// Host functions run at once, on the calling thread: nothing is ever pending on a stream.
SIMGPU_API cudaError_t cudaLaunchHostFunc(cudaStream_t handle, cudaHostFn_t function, void* data) {
  if (!function) return fail(cudaErrorInvalidValue);
  if (captureGraph(handle)) {
    launched(handle, cudaGraphNodeTypeHost);
    return cudaSuccess;
  }
  function(data);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t handle, cudaHostFn_t function,
                                               void* data) {
  return cudaLaunchHostFunc(handle, function, data);
}
SIMGPU_API cudaError_t cudaStreamAddCallback(cudaStream_t handle, cudaStreamCallback_t callback,
                                             void* data, unsigned int) {
  if (!callback) return fail(cudaErrorInvalidValue);
  callback(handle, cudaSuccess, data);
  return cudaSuccess;
}

// ---- Stream capture -----------------------------------------------------------------------

SIMGPU_API cudaError_t cudaStreamBeginCapture(cudaStream_t handle, cudaStreamCaptureMode mode) {
  if (reinterpret_cast<uintptr_t>(handle) <= 2) return fail(cudaErrorStreamCaptureUnsupported);
  if (!beginCapture(stream(handle), mode)) return fail(cudaErrorIllegalState);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t handle,
                                                   cudaStreamCaptureMode mode) {
  return cudaStreamBeginCapture(handle, mode);
}
SIMGPU_API cudaError_t cudaStreamEndCapture(cudaStream_t handle, cudaGraph_t* graph) {
  if (!graph) return fail(cudaErrorInvalidValue);
  Graph* captured = endCapture(stream(handle));
  if (!captured) return fail(cudaErrorIllegalState);
  *graph = reinterpret_cast<cudaGraph_t>(captured);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t handle, cudaGraph_t* graph) {
  return cudaStreamEndCapture(handle, graph);
}
SIMGPU_API cudaError_t cudaStreamIsCapturing(cudaStream_t handle, cudaStreamCaptureStatus* status) {
  testing::meetBeforeCaptureQuery(currentDevice());  // Note [Test hooks of the simulated GPU]
  if (!status) return fail(cudaErrorInvalidValue);
  *status = static_cast<cudaStreamCaptureStatus>(stream(handle)->capture);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t handle,
                                                  cudaStreamCaptureStatus* status) {
  return cudaStreamIsCapturing(handle, status);
}
SIMGPU_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t handle,
                                                cudaStreamCaptureStatus* status,
                                                unsigned long long* id, cudaGraph_t* graph,
                                                const cudaGraphNode_t** dependencies,
                                                const cudaGraphEdgeData** edges, size_t* count) {
  Stream* on = stream(handle);
  if (status) *status = static_cast<cudaStreamCaptureStatus>(on->capture);
  bool active = on->capture == CaptureStatus::kActive;
  if (id) *id = active ? on->capture_id : 0;
  if (graph) *graph = active ? reinterpret_cast<cudaGraph_t>(on->graph) : nullptr;
  // The capture's one dependency is its last node (captures here are sequences).
  thread_local cudaGraphNode_t last;
  bool has_last = active && !on->graph->nodes.empty();
  if (has_last) last = reinterpret_cast<cudaGraphNode_t>(on->graph->nodes.back());
  if (dependencies) *dependencies = has_last ? &last : nullptr;
  if (edges) *edges = nullptr;
  if (count) *count = has_last ? 1 : 0;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t handle,
                                                     cudaStreamCaptureStatus* status,
                                                     unsigned long long* id, cudaGraph_t* graph,
                                                     const cudaGraphNode_t** dependencies,
                                                     const cudaGraphEdgeData** edges,
                                                     size_t* count) {
  return cudaStreamGetCaptureInfo(handle, status, id, graph, dependencies, edges, count);
}
SIMGPU_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t, cudaGraphNode_t*,
                                                           const cudaGraphEdgeData*, size_t,
                                                           unsigned int) {
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode) return fail(cudaErrorInvalidValue);
  *mode = static_cast<cudaStreamCaptureMode>(exchangeCaptureMode(*mode));
  return cudaSuccess;
}

// ---- Graphs ----------------------------------------------------------------------------------

namespace {

struct UserObject {
  void* data;
  cudaHostFn_t destroy;
  unsigned references;
};

std::mutex g_graph_mutex;
// The user objects each graph holds references to.
std::unordered_map<Graph*, std::vector<std::pair<UserObject*, unsigned>>>* g_graph_objects =
    new std::unordered_map<Graph*, std::vector<std::pair<UserObject*, unsigned>>>;

void releaseObject(UserObject* object, unsigned count) {
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    object->references = object->references > count ? object->references - count : 0;
    last = object->references == 0;
  }
  if (last) {
    if (object->destroy) object->destroy(object->data);
    delete object;
  }
}

}  // namespace

SIMGPU_API cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int) {
  if (!graph) return fail(cudaErrorInvalidValue);
  *graph = reinterpret_cast<cudaGraph_t>(new Graph);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphDestroy(cudaGraph_t handle) {
  auto* graph = reinterpret_cast<Graph*>(handle);
  std::vector<std::pair<UserObject*, unsigned>> held;
  {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    auto it = g_graph_objects->find(graph);
    if (it != g_graph_objects->end()) {
      held = std::move(it->second);
      g_graph_objects->erase(it);
    }
  }
  for (auto& [object, count] : held) releaseObject(object, count);
  delete graph;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphGetNodes(cudaGraph_t handle, cudaGraphNode_t* nodes,
                                         size_t* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  auto* graph = reinterpret_cast<Graph*>(handle);
  if (!nodes) {
    *count = graph->nodes.size();
    return cudaSuccess;
  }
  size_t n = std::min(*count, graph->nodes.size());
  for (size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<cudaGraphNode_t>(graph->nodes[i]);
  *count = n;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (!type) return fail(cudaErrorInvalidValue);
  *type = static_cast<cudaGraphNodeType>(reinterpret_cast<GraphNode*>(node)->type);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t handle,
                                                    cudaGraphNode_t* dependencies,
                                                    cudaGraphEdgeData* edges, size_t* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  auto* node = reinterpret_cast<GraphNode*>(handle);
  if (!dependencies) {
    *count = node->dependencies.size();
    return cudaSuccess;
  }
  size_t n = std::min(*count, node->dependencies.size());
  for (size_t i = 0; i < n; ++i) {
    dependencies[i] = reinterpret_cast<cudaGraphNode_t>(node->dependencies[i]);
    if (edges) memset(&edges[i], 0, sizeof(edges[i]));
  }
  *count = n;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphAddNode(cudaGraphNode_t* out, cudaGraph_t handle,
                                        const cudaGraphNode_t* dependencies,
                                        const cudaGraphEdgeData*, size_t count,
                                        cudaGraphNodeParams* params) {
  if (!out || !handle || !params) return fail(cudaErrorInvalidValue);
  auto* graph = reinterpret_cast<Graph*>(handle);
  auto* node = new GraphNode{graph, params->type, {}};
  for (size_t i = 0; i < count; ++i)
    node->dependencies.push_back(reinterpret_cast<GraphNode*>(dependencies[i]));
  graph->nodes.push_back(node);
  *out = reinterpret_cast<cudaGraphNode_t>(node);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* out,
                                                        cudaGraph_t, unsigned int, unsigned int) {
  static std::atomic<unsigned long long> next{1};
  if (!out) return fail(cudaErrorInvalidValue);
  *out = next++;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                     unsigned long long) {
  if (!exec || !graph) return fail(cudaErrorInvalidValue);
  *exec = reinterpret_cast<cudaGraphExec_t>(new GraphExec{reinterpret_cast<Graph*>(graph)});
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                            unsigned long long flags) {
  return cudaGraphInstantiateWithFlags(exec, graph, flags);
}
SIMGPU_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<GraphExec*>(exec);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t handle) {
  if (!exec) return fail(cudaErrorInvalidValue);
  launched(handle, cudaGraphNodeTypeGraph);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t handle) {
  return cudaGraphLaunch(exec, handle);
}
SIMGPU_API cudaError_t cudaGraphUpload(cudaGraphExec_t, cudaStream_t) {
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaUserObjectCreate(cudaUserObject_t* out, void* data, cudaHostFn_t destroy,
                                            unsigned int references, unsigned int) {
  if (!out || references == 0) return fail(cudaErrorInvalidValue);
  *out = reinterpret_cast<cudaUserObject_t>(new UserObject{data, destroy, references});
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaUserObjectRetain(cudaUserObject_t handle, unsigned int count) {
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  reinterpret_cast<UserObject*>(handle)->references += count;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaUserObjectRelease(cudaUserObject_t handle, unsigned int count) {
  releaseObject(reinterpret_cast<UserObject*>(handle), count);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t handle,
                                                 unsigned int count, unsigned int flags) {
  auto* object = reinterpret_cast<UserObject*>(handle);
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  // cudaGraphUserObjectMove hands the caller's references to the graph.
  if (!(flags & cudaGraphUserObjectMove)) object->references += count;
  (*g_graph_objects)[reinterpret_cast<Graph*>(graph)].emplace_back(object, count);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t handle,
                                                  unsigned int count) {
  releaseObject(reinterpret_cast<UserObject*>(handle), count);
  return cudaSuccess;
}

// ---- Events ---------------------------------------------------------------------------------

SIMGPU_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int flags) {
  if (!out) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = ready()) return error;
  *out = reinterpret_cast<cudaEvent_t>(createEvent(flags));
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaEventCreate(cudaEvent_t* out) {
  return cudaEventCreateWithFlags(out, cudaEventDefault);
}
SIMGPU_API cudaError_t cudaEventDestroy(cudaEvent_t handle) {
  destroyEvent(event(handle));
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t on) {
  if (!handle) return fail(cudaErrorInvalidResourceHandle);
  launched(on, cudaGraphNodeTypeEventRecord);
  recordEvent(event(handle));
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t handle, cudaStream_t on) {
  return cudaEventRecord(handle, on);
}
SIMGPU_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t handle, cudaStream_t on, unsigned int) {
  return cudaEventRecord(handle, on);
}
SIMGPU_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t handle, cudaStream_t on,
                                                     unsigned int flags) {
  return cudaEventRecordWithFlags(handle, on, flags);
}
SIMGPU_API cudaError_t cudaEventSynchronize(cudaEvent_t handle) {
  if (!handle) return fail(cudaErrorInvalidResourceHandle);
  poolsSynchronized(event(handle)->device);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaEventQuery(cudaEvent_t handle) {
  return handle ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
// The host's time between the two records (Note [Work that does nothing]).
SIMGPU_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end) return fail(cudaErrorInvalidValue);
  if ((event(start)->flags | event(end)->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle);
  if (event(start)->recorded_ms < 0 || event(end)->recorded_ms < 0)
    return fail(cudaErrorInvalidResourceHandle);
  *ms = static_cast<float>(event(end)->recorded_ms - event(start)->recorded_ms);
  return cudaSuccess;
}

// ---- Kernels: registered by a program's fatbinaries, launched, queried -----------------------

namespace {

struct LaunchConfiguration {
  dim3 grid, block;
  size_t shared;
  void* stream;
};
thread_local std::vector<LaunchConfiguration> t_configurations;

std::mutex g_symbol_mutex;
// Device variables (__device__, __constant__) by their host shadow's address: device memory
// of their size, made at first use and never counted (a module's globals are part of the
// module's image, loaded with the context).
std::unordered_map<const void*, std::pair<void*, size_t>>* g_variables =
    new std::unordered_map<const void*, std::pair<void*, size_t>>;
std::unordered_map<const void*, size_t>* g_variable_sizes =
    new std::unordered_map<const void*, size_t>;

void* variableAddress(const void* symbol, size_t* size) {
  std::lock_guard<std::mutex> lock(g_symbol_mutex);
  auto known = g_variable_sizes->find(symbol);
  if (known == g_variable_sizes->end()) return nullptr;
  auto& entry = (*g_variables)[symbol];
  if (!entry.first) {
    void* memory = nullptr;
    allocate(&memory, known->second ? known->second : 1, 0, MemoryKind::kDevice, false);
    entry = {memory, known->second};
  }
  if (size) *size = entry.second;
  return entry.first;
}

int sm() {
  const Profile* card = profile();
  return card ? card->major * 10 + card->minor : 0;
}

}  // namespace

// The handle a program's fatbinary is registered under: the architecture of the image the
// device loads from it (Note [Reading a fatbinary]).
SIMGPU_API void** __cudaRegisterFatBinary(void* fatbinary) {
  int architecture = loadedArchitecture(fatbinary, sm());
  return reinterpret_cast<void**>(new intptr_t(architecture));
}
SIMGPU_API void __cudaRegisterFatBinaryEnd(void**) {}
SIMGPU_API void __cudaUnregisterFatBinary(void**) {}
SIMGPU_API char __cudaInitModule(void**) {
  return 1;
}
SIMGPU_API void __cudaRegisterFunction(void** handle, const char* host_function, char*,
                                       const char* name, int, void*, void*, void*, void*, int*) {
  Function* function = registeredFunction(host_function);
  function->architecture = handle ? static_cast<int>(*reinterpret_cast<intptr_t*>(handle)) : -1;
  if (name) function->name = name;
}
SIMGPU_API void __cudaRegisterVar(void**, char* host_variable, char*, const char*, int, size_t size,
                                  int, int) {
  std::lock_guard<std::mutex> lock(g_symbol_mutex);
  (*g_variable_sizes)[host_variable] = size;
}
SIMGPU_API void __cudaRegisterManagedVar(void**, void** host_variable, char*, const char*, int,
                                         size_t size, int, int) {
  std::lock_guard<std::mutex> lock(g_symbol_mutex);
  (*g_variable_sizes)[host_variable] = size;
}
SIMGPU_API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, void* on) {
  t_configurations.push_back({grid, block, shared, on});
  return 0;
}
SIMGPU_API cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared,
                                                  void* on) {
  if (t_configurations.empty()) return fail(cudaErrorInvalidConfiguration);
  LaunchConfiguration configuration = t_configurations.back();
  t_configurations.pop_back();
  if (grid) *grid = configuration.grid;
  if (block) *block = configuration.block;
  if (shared) *shared = configuration.shared;
  if (on) *static_cast<void**>(on) = configuration.stream;
  return cudaSuccess;
}
namespace {

// The architecture a kernel runs as on this device; cudaErrorNoKernelImageForDevice when the
// program brought no image the device can run (as the card refuses it).
cudaError_t architecture(const void* host_function, int* out) {
  int arch = registeredFunction(host_function)->architecture;
  if (arch == 0) return fail(cudaErrorNoKernelImageForDevice);
  *out = arch > 0 ? arch : sm();
  return cudaSuccess;
}

}  // namespace

SIMGPU_API cudaError_t cudaLaunchKernel(const void* function, dim3, dim3, void**, size_t,
                                        cudaStream_t on) {
  if (!function) return fail(cudaErrorInvalidDeviceFunction);
  if (cudaError_t error = context()) return error;
  int arch = 0;
  if (cudaError_t error = architecture(function, &arch)) return error;
  launched(on, cudaGraphNodeTypeKernel);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaLaunchKernel_ptsz(const void* function, dim3 grid, dim3 block,
                                             void** args, size_t shared, cudaStream_t on) {
  return cudaLaunchKernel(function, grid, block, args, shared, on);
}
SIMGPU_API cudaError_t __cudaLaunchKernel(const void* function, dim3 grid, dim3 block, void** args,
                                          size_t shared, cudaStream_t on) {
  return cudaLaunchKernel(function, grid, block, args, shared, on);
}
SIMGPU_API cudaError_t __cudaLaunchKernel_ptsz(const void* function, dim3 grid, dim3 block,
                                               void** args, size_t shared, cudaStream_t on) {
  return cudaLaunchKernel(function, grid, block, args, shared, on);
}
SIMGPU_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* function,
                                           void**) {
  if (!config || !function) return fail(cudaErrorInvalidValue);
  launched(config->stream, cudaGraphNodeTypeKernel);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config,
                                                const void* function, void** args) {
  return cudaLaunchKernelExC(config, function, args);
}
SIMGPU_API cudaError_t cudaLaunchCooperativeKernel(const void* function, dim3, dim3, void**, size_t,
                                                   cudaStream_t on) {
  if (!function) return fail(cudaErrorInvalidDeviceFunction);
  launched(on, cudaGraphNodeTypeKernel);
  return cudaSuccess;
}
SIMGPU_API cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* function) {
  if (!kernel) return fail(cudaErrorInvalidValue);
  *kernel = reinterpret_cast<cudaKernel_t>(registeredFunction(function));
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* function) {
  return __cudaGetKernel(kernel, function);
}
SIMGPU_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t* out, const void* function) {
  if (!out) return fail(cudaErrorInvalidValue);
  *out = reinterpret_cast<cudaFunction_t>(registeredFunction(function));
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* function) {
  if (!attributes || !function) return fail(cudaErrorInvalidValue);
  int arch = 0;
  if (cudaError_t error = architecture(function, &arch)) return error;
  memset(attributes, 0, sizeof(*attributes));
  attributes->maxThreadsPerBlock = 1024;
  attributes->numRegs = kRegistersPerThread;
  attributes->ptxVersion = arch;
  attributes->binaryVersion = arch;
  attributes->maxDynamicSharedSizeBytes = 49152;
  attributes->preferredShmemCarveout = -1;
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaFuncSetCacheConfig(const void*, cudaFuncCache) {
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* blocks, const void*, int block_size, size_t dynamic_shared, unsigned int) {
  if (!blocks || block_size <= 0) return fail(cudaErrorInvalidValue);
  if (cudaError_t error = ready()) return error;
  *blocks = activeBlocksPerMultiprocessor(block_size, dynamic_shared);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks,
                                                                     const void* function,
                                                                     int block_size,
                                                                     size_t dynamic_shared) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, block_size,
                                                                dynamic_shared, 0);
}
SIMGPU_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, const void*, int,
                                                                 int) {
  if (!bytes) return fail(cudaErrorInvalidValue);
  const Profile* card = profile();
  *bytes = card ? static_cast<size_t>(card->shared_memory_per_block_optin) : 0;
  return cudaSuccess;
}

// Libraries of kernels loaded at run time (cudaLibraryLoadData: PyTorch's jiterator, Triton).
SIMGPU_API cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, cudaJitOption*,
                                           void**, unsigned int, cudaLibraryOption*, void**,
                                           unsigned int) {
  if (!library || !code) return fail(cudaErrorInvalidValue);
  *library = reinterpret_cast<cudaLibrary_t>(loadModule());
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  delete reinterpret_cast<Module*>(library);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaLibraryGetKernel(cudaKernel_t* kernel, cudaLibrary_t library,
                                            const char* name) {
  if (!kernel || !library) return fail(cudaErrorInvalidValue);
  *kernel =
      reinterpret_cast<cudaKernel_t>(moduleFunction(reinterpret_cast<Module*>(library), name));
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t, cudaFuncAttribute, int, int) {
  return cudaSuccess;
}

// ---- Device variables ---------------------------------------------------------------------

SIMGPU_API cudaError_t cudaGetSymbolAddress(void** address, const void* symbol) {
  if (!address) return fail(cudaErrorInvalidValue);
  *address = variableAddress(symbol, nullptr);
  return *address ? cudaSuccess : fail(cudaErrorInvalidSymbol);
}
SIMGPU_API cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  if (!size) return fail(cudaErrorInvalidValue);
  return variableAddress(symbol, size) ? cudaSuccess : fail(cudaErrorInvalidSymbol);
}
SIMGPU_API cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t bytes,
                                          size_t offset, cudaMemcpyKind) {
  size_t size = 0;
  auto* device = static_cast<char*>(variableAddress(symbol, &size));
  if (!device || offset + bytes > size) return fail(cudaErrorInvalidSymbol);
  copy(device + offset, src, bytes);
  return cudaSuccess;
}
SIMGPU_API cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t bytes,
                                               size_t offset, cudaMemcpyKind kind,
                                               cudaStream_t on) {
  launched(on, cudaGraphNodeTypeMemcpy);
  return cudaMemcpyToSymbol(symbol, src, bytes, offset, kind);
}
SIMGPU_API cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t bytes,
                                            size_t offset, cudaMemcpyKind) {
  size_t size = 0;
  auto* device = static_cast<char*>(variableAddress(symbol, &size));
  if (!device || offset + bytes > size) return fail(cudaErrorInvalidSymbol);
  device += offset;
  return copy(dst, device, bytes) ? cudaSuccess : fail(cudaErrorNotPermitted);
}

// ---- The driver's entry points, as CUDA's runtime hands them out -----------------------------

namespace {

cudaError_t entryPoint(const char* symbol, void** function, unsigned version,
                       unsigned long long flags, cudaDriverEntryPointQueryResult* status,
                       bool per_thread) {
  if (!symbol || !function) return fail(cudaErrorInvalidValue);
  if (per_thread && !(flags & (cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream)))
    flags |= cudaEnablePerThreadDefaultStream;
  int found = 0;
  simgpu_driver_proc_address(symbol, function, static_cast<int>(version), flags, &found);
  if (status) *status = static_cast<cudaDriverEntryPointQueryResult>(found);
  return cudaSuccess;  // an unknown symbol is said in *status, as CUDA's runtime does
}

}  // namespace

SIMGPU_API cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** function,
                                               unsigned long long flags,
                                               cudaDriverEntryPointQueryResult* status) {
  return entryPoint(symbol, function, CUDA_VERSION, flags, status, false);
}
SIMGPU_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** function,
                                                    unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult* status) {
  return entryPoint(symbol, function, CUDA_VERSION, flags, status, true);
}
SIMGPU_API cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                                        unsigned int version,
                                                        unsigned long long flags,
                                                        cudaDriverEntryPointQueryResult* status) {
  return entryPoint(symbol, function, version, flags, status, false);
}
SIMGPU_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** function, unsigned int version, unsigned long long flags,
    cudaDriverEntryPointQueryResult* status) {
  return entryPoint(symbol, function, version, flags, status, true);
}
