// The simulated cuDNN's backend (graph) API: the descriptors a program builds and what the
// library derives from them (Note [Backend descriptors] in cudnn_backend.cpp), shared by the
// entry points (cudnn_backend.cpp) and the engines (cudnn_engines.cpp: which engines a graph
// gets, their notes and workspaces, Note [Engines and workspaces]).
#pragma once

#include <stdint.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "simulator/libraries/cudnn_enums.h"

namespace simgpu::cudnn {

struct Descriptor;

// One attribute as the program set it (or the library derived it): its type, its elements.
struct Value {
  Type type = Type::INT64;
  int64_t count = 0;
  std::vector<unsigned char> bytes;  // count * elementBytes(type); empty for descriptors
  // BACKEND_DESCRIPTOR elements: what each named descriptor was when it was set.
  std::vector<std::shared_ptr<const Descriptor>> descriptors;

  template <typename T>
  T at(int64_t index) const {
    T element{};
    if (index >= 0 && index < count && bytes.size() >= sizeof(T) * static_cast<size_t>(count))
      __builtin_memcpy(&element, bytes.data() + index * sizeof(T), sizeof(T));
    return element;
  }
  std::vector<int64_t> integers() const;  // INT64 (or INT32) elements
};

template <typename T>
Value valueOf(Type type, const std::vector<T>& elements) {
  Value value;
  value.type = type;
  value.count = static_cast<int64_t>(elements.size());
  value.bytes.resize(elements.size() * sizeof(T));
  if (!elements.empty()) __builtin_memcpy(value.bytes.data(), elements.data(), value.bytes.size());
  return value;
}

// An engine of the simulated library: its global index (the "eng<N>" of a plan's tag), its
// notes, and the workspace its plans ask for. No knobs: a configuration is the engine.
struct Engine {
  int64_t index = 0;
  std::vector<NumericalNote> numerical_notes;
  std::vector<BehaviorNote> behavior_notes;
  int64_t workspace_bytes = 0;
  std::string source;  // where the workspace comes from: "measured: ..." or "none measured"
};

// What the library makes of a finalized operation graph: its description (the JSON object the
// log prints and the profile's workspace table is matched against) and its engines, in the
// order heuristics offer them.
struct GraphAnalysis {
  std::string description;  // one line of JSON
  std::string operation;    // "convolution_forward", "sdpa_forward", ...: the graph's main op
  std::vector<Engine> engines;
  std::vector<int64_t> fallback;  // the indices CUDNN_HEUR_MODE_FALLBACK offers
  int64_t global_count = 0;       // CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT
  // The tensors in memory (neither virtual nor passed by value): what a variant pack must
  // give a pointer for.
  std::vector<int64_t> uids;
};

// A backend descriptor: what the program's cudnnBackendDescriptor_t points to.
struct Descriptor {
  Kind kind = Kind::TENSOR;
  bool finalized = false;
  std::map<int, Value> attributes;  // by cudnnBackendAttributeName_t
  // Derived when finalized: an operation graph's analysis (shared by the engines, configs and
  // plans made from it), an engine's choice among them, a plan's workspace.
  std::shared_ptr<const GraphAnalysis> graph;
  Engine engine;
  int64_t id = 0;  // a plan's number in the log

  const Value* find(Attr attribute) const {
    auto it = attributes.find(static_cast<int>(attribute));
    return it == attributes.end() ? nullptr : &it->second;
  }
  // The descriptor an attribute names (its first element), or nullptr.
  const Descriptor* child(Attr attribute) const;
};

// ---- cudnn_engines.cpp ---------------------------------------------------------------------

// The analysis of an operation graph whose CUDNN_ATTR_OPERATIONGRAPH_OPS are `operations`;
// nullptr with `why` set when the graph cannot be analysed (an operation without tensors).
std::shared_ptr<const GraphAnalysis> analyseGraph(const Value& operations, std::string* why);

// The plan's JSON representation (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION), and a plan
// read back from one: false when `json` is not a plan this library wrote.
std::string planJson(const Descriptor& plan);
bool planFromJson(const std::string& json, Descriptor* plan);

// The log (MEMTRACE_GPU_CUDNN_LOG=FILE or "stderr"): one JSON line per plan finalized and per
// plan executed, for the tests and for whoever fills the profile's workspace table.
void logPlan(const Descriptor& plan);
void logExecute(const Descriptor& plan, const void* workspace);

}  // namespace simgpu::cudnn
