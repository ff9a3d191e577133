// cuDNN's backend (graph) API (cudnnBackend*): the descriptors PyTorch's convolutions
// (Conv_v8.cpp, through cudnn_frontend's v8 classes) and attention (MHA.cpp, through
// cudnn_frontend's graph API) build, the engines and plans the library answers with, and
// cudnnBackendExecute, which runs nothing.
#include "simulator/libraries/cudnn_backend.h"

#include <ctype.h>
#include <string.h>

#include <algorithm>
#include <atomic>

#include "simulator/libraries/library.h"

using namespace simgpu;
using namespace simgpu::cudnn;

// Note [Backend descriptors]
// A descriptor keeps every attribute the program sets, typed and with its element count, and
// answers cudnnBackendGetAttribute with it. An attribute whose elements are descriptors keeps a
// copy of each as it was when it was set (the real library copies what it needs at
// SetAttribute too), so the program may destroy or reuse its own descriptor afterwards; a
// descriptor the library fills for the program (CUDNN_ATTR_ENGINEHEUR_RESULTS,
// CUDNN_ATTR_ENGINECFG_ENGINE, ...) is the program's own, created by it, and is overwritten
// with a finalized copy. What the real library derives (an operation graph's engines, a
// configuration's workspace, a plan's JSON) is derived at cudnnBackendFinalize from the
// attributes (cudnn_engines.cpp) and answered from there. An attribute that is neither set nor
// derived is refused in one line naming it, never answered with a made-up value; so is one
// asked for as another type than it holds.

namespace simgpu::cudnn {

const char* attributeName(int attribute) {
  switch (attribute) {
#define SIMGPU_CUDNN_NAME(name, value) \
  case value:                          \
    return "CUDNN_ATTR_" #name;
    SIMGPU_CUDNN_ATTRIBUTES(SIMGPU_CUDNN_NAME)
#undef SIMGPU_CUDNN_NAME
  }
  return nullptr;
}

const char* kindName(int kind) {
  switch (kind) {
#define SIMGPU_CUDNN_NAME(name, value) \
  case value:                          \
    return "CUDNN_BACKEND_" #name "_DESCRIPTOR";
    SIMGPU_CUDNN_DESCRIPTOR_TYPES(SIMGPU_CUDNN_NAME)
#undef SIMGPU_CUDNN_NAME
  }
  return nullptr;
}

const char* typeName(int type) {
  switch (type) {
#define SIMGPU_CUDNN_NAME(name, value, bytes) \
  case value:                                 \
    return "CUDNN_TYPE_" #name;
    SIMGPU_CUDNN_ATTRIBUTE_TYPES(SIMGPU_CUDNN_NAME)
#undef SIMGPU_CUDNN_NAME
  }
  return nullptr;
}

std::string dataTypeName(int data_type) {
  const char* name = nullptr;
  switch (data_type) {
#define SIMGPU_CUDNN_NAME(upper, value) \
  case value:                           \
    name = #upper;                      \
    break;
    SIMGPU_CUDNN_DATA_TYPES(SIMGPU_CUDNN_NAME)
#undef SIMGPU_CUDNN_NAME
  }
  if (!name) return "data type " + std::to_string(data_type);
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return lower;
}

int64_t elementBytes(int type) {
  switch (type) {
#define SIMGPU_CUDNN_BYTES(name, value, bytes) \
  case value:                                  \
    return bytes;
    SIMGPU_CUDNN_ATTRIBUTE_TYPES(SIMGPU_CUDNN_BYTES)
#undef SIMGPU_CUDNN_BYTES
  }
  return 0;
}

std::vector<int64_t> Value::integers() const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i)
    out.push_back(type == Type::INT32 ? at<int32_t>(i) : at<int64_t>(i));
  return out;
}

const Descriptor* Descriptor::child(Attr attribute) const {
  const Value* value = find(attribute);
  return value && !value->descriptors.empty() ? value->descriptors[0].get() : nullptr;
}

}  // namespace simgpu::cudnn

namespace {

constexpr int kSuccess = static_cast<int>(cudnn::Status::SUCCESS);
constexpr int kBadParam = static_cast<int>(cudnn::Status::BAD_PARAM);
constexpr int kNullPointer = static_cast<int>(cudnn::Status::BAD_PARAM_NULL_POINTER);
constexpr int kNotFinalized = static_cast<int>(cudnn::Status::BAD_PARAM_NOT_FINALIZED);
constexpr int kWrongType = static_cast<int>(cudnn::Status::BAD_PARAM_ATTRIBUTE_TYPE);
constexpr int kWrongDescriptor = static_cast<int>(cudnn::Status::BAD_PARAM_DESCRIPTOR_TYPE);
constexpr int kNotSupported = static_cast<int>(cudnn::Status::NOT_SUPPORTED);

// What the program's cudnnBackendDescriptor_t points to: a Descriptor and a mark that tells a
// live one from a pointer this library never made or already destroyed.
constexpr uint64_t kLive = 0x73696d2d63756e6eULL;
struct Handle {
  uint64_t mark = kLive;
  Descriptor descriptor;
};

Descriptor* descriptorOf(void* pointer) {
  auto* handle = static_cast<Handle*>(pointer);
  return handle && handle->mark == kLive ? &handle->descriptor : nullptr;
}

std::string nameOf(int attribute) {
  const char* name = attributeName(attribute);
  return name ? name : "attribute " + std::to_string(attribute);
}

std::string kindOf(Kind kind) {
  const char* name = kindName(static_cast<int>(kind));
  return name ? name : "descriptor type " + std::to_string(static_cast<int>(kind));
}

std::string typeOf(Type type) {
  const char* name = typeName(static_cast<int>(type));
  return name ? name : "type " + std::to_string(static_cast<int>(type));
}

// One line on stderr the first time each (function, what) is refused.
int refuseCall(const char* function, const std::string& what, const char* why, int status) {
  std::string call = std::string(function) + "(" + what + ")";
  return refuse("cuDNN", call.c_str(), status, why);
}

bool has(const Descriptor& d, Attr attribute) {
  const Value* value = d.find(attribute);
  return value && value->count > 0;
}

Value scalar(Type type, int64_t number) {
  if (type == Type::INT32) return valueOf(type, std::vector<int32_t>{static_cast<int32_t>(number)});
  return valueOf(type, std::vector<int64_t>{number});
}

Value descriptorsValue(std::vector<std::shared_ptr<const Descriptor>> descriptors) {
  Value value;
  value.type = Type::BACKEND_DESCRIPTOR;
  value.count = static_cast<int64_t>(descriptors.size());
  value.descriptors = std::move(descriptors);
  return value;
}

// A finalized descriptor the library makes to hand out (an engine, a configuration).
std::shared_ptr<Descriptor> made(Kind kind) {
  auto d = std::make_shared<Descriptor>();
  d->kind = kind;
  d->finalized = true;
  return d;
}

std::shared_ptr<const Descriptor> engineDescriptor(const Descriptor& graph, const Engine& engine) {
  auto d = made(Kind::ENGINE);
  d->attributes[static_cast<int>(Attr::ENGINE_OPERATION_GRAPH)] =
      descriptorsValue({std::make_shared<Descriptor>(graph)});
  d->attributes[static_cast<int>(Attr::ENGINE_GLOBAL_INDEX)] = scalar(Type::INT64, engine.index);
  d->graph = graph.graph;
  d->engine = engine;
  return d;
}

std::shared_ptr<const Descriptor> configDescriptor(const Descriptor& graph, const Engine& engine) {
  auto d = made(Kind::ENGINECFG);
  d->attributes[static_cast<int>(Attr::ENGINECFG_ENGINE)] =
      descriptorsValue({engineDescriptor(graph, engine)});
  d->attributes[static_cast<int>(Attr::ENGINECFG_KNOB_CHOICES)] = descriptorsValue({});
  d->graph = graph.graph;
  d->engine = engine;
  return d;
}

template <typename Note>
Value notesValue(Type type, const std::vector<Note>& notes) {
  std::vector<int32_t> numbers;
  for (Note note : notes) numbers.push_back(static_cast<int32_t>(note));
  return valueOf(type, numbers);
}

// The value of an attribute the library derives for a finalized descriptor of this kind;
// false when it derives none (the attribute is then what the program set, or refused).
bool derive(const Descriptor& d, Attr attribute, Value* out) {
  switch (d.kind) {
    case Kind::OPERATIONGRAPH:
      if (attribute != Attr::OPERATIONGRAPH_ENGINE_GLOBAL_COUNT || !d.graph) return false;
      *out = scalar(Type::INT64, d.graph->global_count);
      return true;
    case Kind::ENGINEHEUR: {
      if (attribute != Attr::ENGINEHEUR_RESULTS || !d.graph) return false;
      const Descriptor* graph = d.child(Attr::ENGINEHEUR_OPERATION_GRAPH);
      const Value* mode = d.find(Attr::ENGINEHEUR_MODE);
      bool fallback = mode && mode->at<int32_t>(0) == static_cast<int>(HeuristicMode::FALLBACK);
      std::vector<std::shared_ptr<const Descriptor>> configs;
      for (const Engine& engine : d.graph->engines) {
        bool listed = std::find(d.graph->fallback.begin(), d.graph->fallback.end(), engine.index) !=
                      d.graph->fallback.end();
        if (!fallback || listed) configs.push_back(configDescriptor(*graph, engine));
      }
      *out = descriptorsValue(std::move(configs));
      return true;
    }
    case Kind::ENGINE:
      if (!d.graph) return false;
      if (attribute == Attr::ENGINE_NUMERICAL_NOTE)
        *out = notesValue(Type::NUMERICAL_NOTE, d.engine.numerical_notes);
      else if (attribute == Attr::ENGINE_BEHAVIOR_NOTE)
        *out = notesValue(Type::BEHAVIOR_NOTE, d.engine.behavior_notes);
      else if (attribute == Attr::ENGINE_KNOB_INFO || attribute == Attr::ENGINE_LAYOUT_INFO)
        *out = descriptorsValue({});  // no knobs, no preferred layouts
      else
        return false;
      return true;
    case Kind::ENGINECFG:
      if (!d.graph) return false;
      if (attribute == Attr::ENGINECFG_WORKSPACE_SIZE)
        *out = scalar(Type::INT64, d.engine.workspace_bytes);
      else if (attribute == Attr::ENGINECFG_SHARED_MEMORY_USED)
        *out = scalar(Type::INT32, 0);  // never more than the card has: no plan is deselected
      else if (attribute == Attr::ENGINECFG_KNOB_CHOICES && !d.find(attribute))
        *out = descriptorsValue({});
      else
        return false;
      return true;
    case Kind::EXECUTION_PLAN:
      if (!d.graph) return false;
      if (attribute == Attr::EXECUTION_PLAN_WORKSPACE_SIZE) {
        *out = scalar(Type::INT64, d.engine.workspace_bytes);
      } else if (attribute == Attr::EXECUTION_PLAN_JSON_REPRESENTATION) {
        std::string json = planJson(d);
        *out = valueOf(Type::CHAR, std::vector<char>(json.begin(), json.end()));
      } else if (attribute == Attr::EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS) {
        *out = valueOf(Type::INT64, std::vector<int64_t>{});
      } else if (attribute == Attr::EXECUTION_PLAN_ENGINE_CONFIG && !d.find(attribute)) {
        // A plan read from JSON: its configuration, over the graph the JSON described.
        Descriptor graph;
        graph.kind = Kind::OPERATIONGRAPH;
        graph.finalized = true;
        graph.graph = d.graph;
        *out = descriptorsValue({configDescriptor(graph, d.engine)});
      } else {
        return false;
      }
      return true;
    default:
      return false;
  }
}

// The documented defaults of attributes a program may read back without setting them.
bool defaultOf(const Descriptor& d, Attr attribute, Value* out) {
  if (d.kind != Kind::TENSOR) return false;
  switch (attribute) {
    case Attr::TENSOR_IS_VIRTUAL:
    case Attr::TENSOR_IS_BY_VALUE:
      *out = valueOf(Type::BOOLEAN, std::vector<char>{0});
      break;
    case Attr::TENSOR_VECTOR_COUNT:
      *out = scalar(Type::INT64, 1);
      break;
    case Attr::TENSOR_VECTORIZED_DIMENSION:
      *out = scalar(Type::INT64, -1);
      break;
    case Attr::TENSOR_REORDERING_MODE:
      *out = valueOf(Type::TENSOR_REORDERING_MODE, std::vector<int32_t>{0});
      break;
    default:
      return false;
  }
  return true;
}

// Finalizing: what each kind needs before it can be used, and what the library derives then.
int finalize(Descriptor& d) {
  switch (d.kind) {
    case Kind::TENSOR: {
      const Value* dims = d.find(Attr::TENSOR_DIMENSIONS);
      const Value* strides = d.find(Attr::TENSOR_STRIDES);
      if (!has(d, Attr::TENSOR_DATA_TYPE) || !has(d, Attr::TENSOR_UNIQUE_ID) || !dims || !strides ||
          dims->count != strides->count || dims->count < 1 || dims->count > 12)
        return kBadParam;
      for (int64_t size : dims->integers())
        if (size <= 0) return kBadParam;
      return kSuccess;
    }
    case Kind::OPERATIONGRAPH: {
      const Value* operations = d.find(Attr::OPERATIONGRAPH_OPS);
      if (!operations || operations->descriptors.empty()) return kBadParam;
      std::string why;
      d.graph = analyseGraph(*operations, &why);
      if (!d.graph)
        return refuseCall("cudnnBackendFinalize", "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR",
                          why.c_str(),
                          static_cast<int>(cudnn::Status::NOT_SUPPORTED_GRAPH_PATTERN));
      return kSuccess;
    }
    case Kind::ENGINEHEUR: {
      const Descriptor* graph = d.child(Attr::ENGINEHEUR_OPERATION_GRAPH);
      if (!graph || !graph->graph || !has(d, Attr::ENGINEHEUR_MODE)) return kBadParam;
      d.graph = graph->graph;
      return kSuccess;
    }
    case Kind::ENGINE: {
      const Descriptor* graph = d.child(Attr::ENGINE_OPERATION_GRAPH);
      const Value* index = d.find(Attr::ENGINE_GLOBAL_INDEX);
      if (!graph || !graph->graph || !index || index->count != 1) return kBadParam;
      for (const Engine& engine : graph->graph->engines) {
        if (engine.index != index->at<int64_t>(0)) continue;
        d.graph = graph->graph;
        d.engine = engine;
        return kSuccess;
      }
      // An engine that does not support this graph: the real library says so the same way,
      // and the program (cudnn_frontend's fallback list) tries the next.
      return kNotSupported;
    }
    case Kind::ENGINECFG: {
      const Descriptor* engine = d.child(Attr::ENGINECFG_ENGINE);
      if (!engine || !engine->graph) return kBadParam;
      d.graph = engine->graph;
      d.engine = engine->engine;
      return kSuccess;
    }
    case Kind::EXECUTION_PLAN: {
      static std::atomic<int64_t> plans{0};
      if (const Descriptor* config = d.child(Attr::EXECUTION_PLAN_ENGINE_CONFIG)) {
        if (!config->graph) return kBadParam;
        d.graph = config->graph;
        d.engine = config->engine;
      } else if (const Value* json = d.find(Attr::EXECUTION_PLAN_JSON_REPRESENTATION)) {
        std::string text(json->bytes.begin(), json->bytes.end());
        if (!planFromJson(text, &d))
          return refuseCall("cudnnBackendFinalize", "CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION",
                            "a plan serialized by NVIDIA's library, not by the simulated one",
                            kNotSupported);
      } else {
        return kBadParam;
      }
      d.id = ++plans;
      logPlan(d);
      return kSuccess;
    }
    case Kind::VARIANT_PACK: {
      const Value* pointers = d.find(Attr::VARIANT_PACK_DATA_POINTERS);
      const Value* uids = d.find(Attr::VARIANT_PACK_UNIQUE_IDS);
      if (!pointers || !uids || pointers->count != uids->count) return kBadParam;
      return kSuccess;
    }
    case Kind::KNOB_CHOICE:
      return has(d, Attr::KNOB_CHOICE_KNOB_TYPE) && has(d, Attr::KNOB_CHOICE_KNOB_VALUE)
                 ? kSuccess
                 : kBadParam;
    default:
      // Operations, and the descriptors they name (pointwise, convolution, matmul, reduction,
      // ...): the graph reads them when it is finalized.
      return kSuccess;
  }
}

// Nothing thrown reaches the program: the one thing that can throw here is the host running
// out of memory, which cuDNN reports as such.
template <typename Body>
int guarded(Body body) {
  try {
    return body();
  } catch (...) {
    return static_cast<int>(cudnn::Status::INTERNAL_ERROR_HOST_ALLOCATION_FAILED);
  }
}

}  // namespace

// ---- The entry points ----------------------------------------------------------------------

SIMGPU_API int cudnnBackendCreateDescriptor(int type, void** out) {
  return guarded([&] {
    if (!out) return kNullPointer;
    *out = nullptr;
    if (!kindName(type))
      return refuseCall("cudnnBackendCreateDescriptor", "descriptor type " + std::to_string(type),
                        "a type cuDNN 9.24 does not have", kNotSupported);
    auto* handle = new Handle;
    handle->descriptor.kind = static_cast<Kind>(type);
    *out = handle;
    return kSuccess;
  });
}

SIMGPU_API int cudnnBackendDestroyDescriptor(void* descriptor) {
  return guarded([&] {
    if (!descriptor) return kSuccess;
    if (!descriptorOf(descriptor)) return kBadParam;
    auto* handle = static_cast<Handle*>(descriptor);
    handle->mark = 0;
    delete handle;
    return kSuccess;
  });
}

// Deprecated in cuDNN 9, still exported: the descriptor as it was created, attributes dropped.
SIMGPU_API int cudnnBackendInitialize(void* descriptor) {
  return guarded([&] {
    Descriptor* d = descriptorOf(descriptor);
    if (!d) return kBadParam;
    Kind kind = d->kind;
    *d = Descriptor{};
    d->kind = kind;
    return kSuccess;
  });
}

SIMGPU_API int cudnnBackendSetAttribute(void* descriptor, int name, int type, int64_t count,
                                        const void* elements) {
  return guarded([&] {
    Descriptor* d = descriptorOf(descriptor);
    if (!d) return kBadParam;
    if (d->finalized) return kBadParam;
    int64_t bytes = elementBytes(type);
    if (bytes == 0) return kWrongType;
    if (count < 0 || (count > 0 && !elements)) return kNullPointer;
    Value value;
    value.type = static_cast<Type>(type);
    value.count = count;
    if (value.type == Type::BACKEND_DESCRIPTOR) {
      auto* named = static_cast<void* const*>(elements);
      for (int64_t i = 0; i < count; ++i) {
        const Descriptor* element = descriptorOf(named[i]);
        if (!element) return kNullPointer;
        if (!element->finalized) return kNotFinalized;
        value.descriptors.push_back(std::make_shared<const Descriptor>(*element));
      }
    } else {
      const auto* begin = static_cast<const unsigned char*>(elements);
      value.bytes.assign(begin, begin + count * bytes);
    }
    d->attributes[name] = std::move(value);
    return kSuccess;
  });
}

SIMGPU_API int cudnnBackendGetAttribute(void* descriptor, int name, int type, int64_t requested,
                                        int64_t* count, void* elements) {
  return guarded([&] {
    const Descriptor* d = descriptorOf(descriptor);
    if (!d || requested < 0) return kBadParam;
    Attr attribute = static_cast<Attr>(name);
    std::string what = nameOf(name) + " of " + kindOf(d->kind);
    Value derived;
    const Value* value = nullptr;
    if (d->finalized && derive(*d, attribute, &derived)) {
      value = &derived;
    } else if ((value = d->find(attribute)) == nullptr) {
      if (!defaultOf(*d, attribute, &derived)) {
        // Asked of an unfinalized descriptor, it is the program's mistake, said as cuDNN says
        // it; of a finalized one, an answer the simulator does not have.
        if (!d->finalized) return kNotFinalized;
        return refuseCall("cudnnBackendGetAttribute", what,
                          "neither set by the program nor derived by the simulator", kNotSupported);
      }
      value = &derived;
    }
    if (static_cast<int>(value->type) != type) {
      std::string why =
          "asked for as " + typeOf(static_cast<Type>(type)) + ", held as " + typeOf(value->type);
      return refuseCall("cudnnBackendGetAttribute", what, why.c_str(), kWrongType);
    }
    // Without an array, how many elements there are; with one, how many were written (the
    // frontend sizes its list of heuristic results by it).
    int64_t n = std::min(requested, value->count);
    if (count) *count = elements ? n : value->count;
    if (!elements) return kSuccess;
    if (value->type == Type::BACKEND_DESCRIPTOR) {
      auto* targets = static_cast<void**>(elements);
      for (int64_t i = 0; i < n; ++i) {
        Descriptor* target = descriptorOf(targets[i]);
        if (!target) return kNullPointer;
        if (target->kind != value->descriptors[i]->kind) return kWrongDescriptor;
        *target = *value->descriptors[i];
      }
    } else if (n > 0) {
      memcpy(elements, value->bytes.data(), static_cast<size_t>(n * elementBytes(type)));
    }
    return kSuccess;
  });
}

SIMGPU_API int cudnnBackendFinalize(void* descriptor) {
  return guarded([&] {
    Descriptor* d = descriptorOf(descriptor);
    if (!d) return kBadParam;
    if (d->finalized) return kBadParam;
    int status = finalize(*d);
    if (status == kSuccess) d->finalized = true;
    return status;
  });
}

// Runs nothing (Note [Work that does nothing] in simulator/core/work.h): the plan is a kernel
// launched on the handle's stream, a node of the graph that stream may be capturing.
SIMGPU_API int cudnnBackendExecute(void* handle, void* plan_descriptor, void* pack_descriptor) {
  return guarded([&] {
    const Descriptor* plan = descriptorOf(plan_descriptor);
    const Descriptor* pack = descriptorOf(pack_descriptor);
    if (!handle || !plan || !pack || plan->kind != Kind::EXECUTION_PLAN ||
        pack->kind != Kind::VARIANT_PACK)
      return kBadParam;
    if (!plan->finalized || !pack->finalized) return kNotFinalized;
    const Value* workspace = pack->find(Attr::VARIANT_PACK_WORKSPACE);
    void* workspace_pointer = workspace ? workspace->at<void*>(0) : nullptr;
    if (plan->engine.workspace_bytes > 0 && !workspace_pointer) return kBadParam;
    // Every tensor the graph reads or writes in memory needs its pointer in the pack.
    const Value* uids = pack->find(Attr::VARIANT_PACK_UNIQUE_IDS);
    std::vector<int64_t> given = uids ? uids->integers() : std::vector<int64_t>{};
    for (int64_t uid : plan->graph->uids)
      if (std::find(given.begin(), given.end(), uid) == given.end()) return kBadParam;
    launched(static_cast<LibraryHandle*>(handle)->stream, 0 /* kernel */);
    logExecute(*plan, workspace_pointer);
    return kSuccess;
  });
}
