// What a program asks the simulated device to do, shared by the runtime and the driver
// (whose handles are the same objects, as CUDA's are): streams, events, stream capture and
// graphs, loaded modules and their functions, launches. Nothing executes: a launch only
// counts, and is a node of the graph its stream is capturing into (Note [Work that does
// nothing]).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

namespace simgpu {

struct Graph;

enum class CaptureStatus : int { kNone = 0, kActive = 1, kInvalidated = 2 };

struct Stream {
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  // Stream capture (cudaStreamBeginCapture .. cudaStreamEndCapture).
  CaptureStatus capture = CaptureStatus::kNone;
  unsigned long long capture_id = 0;
  int capture_mode = 0;
  Graph* graph = nullptr;
};

struct Event {
  int device = 0;
  unsigned flags = 0;
  double recorded_ms = -1;  // host time of the last record, or -1
};

struct GraphNode {
  Graph* graph;
  int type;  // cudaGraphNodeType
  std::vector<GraphNode*> dependencies;
};

struct Graph {
  std::vector<GraphNode*> nodes;
  ~Graph();
};

struct GraphExec {
  Graph* graph;
};

struct Function;

struct Module {
  std::vector<Function*> functions;
  ~Module();
};

struct Function {
  Module* module;  // nullptr: a kernel registered by a program's fatbinary
  std::string name;
  int max_dynamic_shared_bytes = 0;
  // The architecture of the image loaded for it (Note [Reading a fatbinary]): 0 none the
  // device can run, -1 unknown (the device's own is assumed).
  int architecture = -1;
};

// Streams; nullptr, cudaStreamLegacy (1) and cudaStreamPerThread (2) are the current device's
// default stream.
Stream* defaultStream();
Stream* resolve(void* stream);
Stream* createStream(unsigned flags, int priority);
void destroyStream(Stream* stream);

Event* createEvent(unsigned flags);
void destroyEvent(Event* event);
void recordEvent(Event* event);
double hostMilliseconds();

// A launch on `stream` (or a copy, a memset): a node of its graph while it is capturing.
void launched(void* stream, int node_type);
// The graph being captured by the calling thread on `stream`, or nullptr.
Graph* captureGraph(void* stream);
bool beginCapture(Stream* stream, int mode);
Graph* endCapture(Stream* stream);
// Whether any stream is capturing in global mode (what makes other calls illegal).
int capturingStreams();
unsigned long long nextCaptureId();

Module* loadModule();
Function* moduleFunction(Module* module, const char* name);
// Kernels a program registered through __cudaRegisterFunction, by their host stub's address.
Function* registeredFunction(const void* host_function);

uint64_t launches();

}  // namespace simgpu
