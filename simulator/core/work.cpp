#include "simulator/core/work.h"

#include <time.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "simulator/core/device.h"

// Note [Work that does nothing]
// Kernels, copies to the device and memsets are not carried out: the simulated device keeps
// no values (Note [Device memory]). What the program can observe of them is kept: a launch
// during stream capture becomes a node of the captured graph (PyTorch warns about an empty
// graph and replays graphs), events record the host's time, so that cudaEventElapsedTime
// answers the time the host spent between two records (nothing else takes time here), and
// every stream is always idle (cudaStreamQuery answers success). Time on the device is not
// simulated: a program's timings on the simulated device say nothing of the card's.

namespace simgpu {
namespace {

std::mutex g_mutex;
std::atomic<uint64_t> g_launches{0};
std::atomic<unsigned long long> g_capture_ids{1};
std::atomic<int> g_capturing{0};

Stream* defaultStreams() {
  static Stream* streams = new Stream[64];
  return streams;
}

}  // namespace

Stream* defaultStream() {
  int device = currentDevice();
  Stream* stream = &defaultStreams()[device >= 0 && device < 64 ? device : 0];
  stream->device = device;
  return stream;
}

Stream* resolve(void* stream) {
  uintptr_t value = reinterpret_cast<uintptr_t>(stream);
  if (value <= 2) return defaultStream();
  return static_cast<Stream*>(stream);
}

Stream* createStream(unsigned flags, int priority) {
  auto* stream = new Stream;
  stream->device = currentDevice();
  stream->flags = flags;
  stream->priority = priority;
  return stream;
}

void destroyStream(Stream* stream) {
  if (!stream || stream == defaultStream()) return;
  if (stream->capture != CaptureStatus::kNone) --g_capturing;
  delete stream;
}

Event* createEvent(unsigned flags) {
  auto* event = new Event;
  event->device = currentDevice();
  event->flags = flags;
  return event;
}

void destroyEvent(Event* event) {
  delete event;
}

double hostMilliseconds() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

void recordEvent(Event* event) {
  if (event) event->recorded_ms = hostMilliseconds();
}

void launched(void* stream, int node_type) {
  ++g_launches;
  if (!g_capturing.load(std::memory_order_relaxed)) return;
  Stream* on = resolve(stream);
  if (on->capture != CaptureStatus::kActive || !on->graph) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto* node = new GraphNode{on->graph, node_type, {}};
  if (!on->graph->nodes.empty()) node->dependencies.push_back(on->graph->nodes.back());
  on->graph->nodes.push_back(node);
}

Graph* captureGraph(void* stream) {
  Stream* on = resolve(stream);
  return on->capture == CaptureStatus::kActive ? on->graph : nullptr;
}

bool beginCapture(Stream* stream, int mode) {
  if (stream->capture != CaptureStatus::kNone) return false;
  stream->capture = CaptureStatus::kActive;
  stream->capture_mode = mode;
  stream->capture_id = nextCaptureId();
  stream->graph = new Graph;
  ++g_capturing;
  return true;
}

Graph* endCapture(Stream* stream) {
  if (stream->capture == CaptureStatus::kNone) return nullptr;
  Graph* graph = stream->graph;
  stream->capture = CaptureStatus::kNone;
  stream->graph = nullptr;
  --g_capturing;
  return graph;
}

int capturingStreams() {
  return g_capturing.load(std::memory_order_relaxed);
}

unsigned long long nextCaptureId() {
  return g_capture_ids++;
}

Graph::~Graph() {
  for (GraphNode* node : nodes) delete node;
}

Module* loadModule() {
  return new Module;
}

Module::~Module() {
  for (Function* function : functions) delete function;
}

Function* moduleFunction(Module* module, const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Function* function : module->functions)
    if (function->name == name) return function;
  auto* function = new Function{module, name ? name : "", 0, -1};
  module->functions.push_back(function);
  return function;
}

Function* registeredFunction(const void* host_function) {
  static auto* registered = new std::unordered_map<const void*, Function*>;
  std::lock_guard<std::mutex> lock(g_mutex);
  Function*& function = (*registered)[host_function];
  if (!function) function = new Function{nullptr, "", 0, -1};
  return function;
}

uint64_t launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace simgpu
