#include "estimator/graph_file.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "estimator/errors.h"

namespace memtrace::estimator {

namespace {

using nlohmann::json;

constexpr const char* kFormat = "memtrace-graph";
constexpr int kVersion = 1;

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw EstimateError(path_ + ": " + what);
  }

  const json& member(const json& object, const char* name, const std::string& where) const {
    auto found = object.find(name);
    if (found == object.end()) fail(where + " has no \"" + name + "\"");
    return *found;
  }

  std::string text(const json& object, const char* name, const std::string& where) const {
    const json& value = member(object, name, where);
    if (!value.is_string()) fail(where + ": \"" + name + "\" must be a string");
    return value.get<std::string>();
  }

  // A string field added within version 1: absent or null is empty.
  std::string optionalText(const json& object, const char* name) const {
    auto found = object.find(name);
    if (found == object.end() || found->is_null()) return {};
    if (!found->is_string()) fail(std::string("\"") + name + "\" must be a string");
    return found->get<std::string>();
  }

  int64_t integer(const json& value, const std::string& where) const {
    if (!value.is_number_integer()) fail(where + " must be an integer");
    return value.get<int64_t>();
  }

  GraphFile read() {
    std::ifstream file(path_);
    if (!file) fail("cannot be read");
    json document;
    try {
      document = json::parse(file);
    } catch (const json::exception& error) {
      fail(std::string("not valid JSON (") + firstLineOf(error.what()) + ")");
    }
    if (!document.is_object()) fail("a graph file is a JSON object");
    if (text(document, "format", "the file") != kFormat) fail("not a memtrace graph file");
    int64_t version = integer(member(document, "version", "the file"), "\"version\"");
    if (version != kVersion) {
      fail("graph file version " + std::to_string(version) + "; this memtrace reads version " +
           std::to_string(kVersion));
    }
    GraphFile result;
    std::string kind = text(document, "kind", "the file");
    if (kind != "training" && kind != "inference") {
      fail("\"kind\" must be \"training\" or \"inference\", not \"" + kind + "\"");
    }
    result.training = kind == "training";
    result.graph.training_step = result.training;
    result.graph.flops_counted = true;
    result.model = text(document, "model", "the file");
    result.device = text(document, "device", "the file");
    if (const json& optimizer = member(document, "optimizer", "the file"); optimizer.is_string()) {
      result.optimizer = optimizer.get<std::string>();
    }
    result.profile = optionalText(document, "profile");
    result.optimizer_implementation = optionalText(document, "optimizer_implementation");
    result.loop = optionalText(document, "loop");
    result.loop_detail = optionalText(document, "loop_detail");
    result.accumulate = integer(member(document, "accumulate", "the file"), "\"accumulate\"");
    if (const json& autocast = member(document, "autocast", "the file"); autocast.is_string()) {
      result.autocast = autocast.get<std::string>();
    }
    readFrames(member(document, "frames", "the file"));
    Graph& graph = result.graph;
    graph.addScope({ScopeId(), "step"});
    readStorages(member(document, "storages", "the file"), graph);
    readNodes(member(document, "nodes", "the file"), graph);
    if (auto assumptions = document.find("assumptions"); assumptions != document.end()) {
      readAssumptions(*assumptions, graph);
    }
    if (auto kernels = document.find("kernels"); kernels != document.end()) {
      readKernels(*kernels, graph);
    }
    return result;
  }

 private:
  void readFrames(const json& frames) {
    if (!frames.is_array()) fail("\"frames\" must be an array");
    for (size_t index = 0; index < frames.size(); ++index) {
      const json& frame = frames[index];
      std::string where = "frame " + std::to_string(index);
      if (!frame.is_array() || frame.size() != 3 || !frame[0].is_string() ||
          !frame[2].is_string()) {
        fail(where + " must be [file, line, function]");
      }
      frames_.push_back({frame[0].get<std::string>(), integer(frame[1], where + "'s line"),
                         frame[2].get<std::string>()});
    }
  }

  // An entry's "stack": indices into "frames", innermost first.
  std::vector<SourceFrame> stackOf(const json& entry, const std::string& where) const {
    const json& stack = member(entry, "stack", where);
    if (!stack.is_array()) fail(where + ": \"stack\" must be an array");
    std::vector<SourceFrame> frames;
    for (const json& frame : stack) {
      int64_t at = integer(frame, where + "'s stack");
      if (at < 0 || static_cast<size_t>(at) >= frames_.size()) {
        fail(where + ": no frame " + std::to_string(at));
      }
      frames.push_back(frames_[at]);
    }
    return frames;
  }

  // What the recording assumed (Note [Data-dependent values] in step_graph.py): sizes of
  // data-dependent ops as on the example input; and calls the recording could not run as the
  // device does, with how far the peak may be off (Note [cuDNN's RNN reserve, bracketed] in
  // device_kernels.py).
  void readAssumptions(const json& assumptions, Graph& graph) {
    if (!assumptions.is_array()) fail("\"assumptions\" must be an array");
    for (size_t index = 0; index < assumptions.size(); ++index) {
      const json& entry = assumptions[index];
      std::string where = "assumption " + std::to_string(index);
      if (!entry.is_object()) fail(where + " must be an object");
      std::string kind = text(entry, "kind", where);
      if (kind != "data_dependent_size" && kind != "approximate") {
        fail(where + ": unknown kind \"" + kind + "\"");
      }
      Assumption assumption{
          kind == "approximate" ? AssumptionKind::kApproximate : AssumptionKind::kDataDependentSize,
          text(entry, "op", where),
          {},
          text(entry, "detail", where),
          /*makes_lower_bound=*/false};
      if (assumption.kind == AssumptionKind::kApproximate) {
        assumption.over_by_at_most =
            integer(member(entry, "over_by_at_most_bytes", where), where + "'s over_by");
        assumption.under_by_at_most =
            integer(member(entry, "under_by_at_most_bytes", where), where + "'s under_by");
        if (assumption.over_by_at_most < 0 || assumption.under_by_at_most < 0) {
          fail(where + ": a bracket's bytes are negative");
        }
      }
      assumption.stack = stackOf(entry, where);
      graph.assumptions.push_back(std::move(assumption));
    }
  }

  // The kernels the recording ran as the device does (Note [The device's kernels on fake
  // tensors] in device_kernels.py): each call's op, kernel, why, and stack.
  void readKernels(const json& kernels, Graph& graph) {
    if (!kernels.is_array()) fail("\"kernels\" must be an array");
    for (size_t index = 0; index < kernels.size(); ++index) {
      const json& entry = kernels[index];
      std::string where = "kernel " + std::to_string(index);
      if (!entry.is_object()) fail(where + " must be an object");
      graph.kernel_choices.push_back({text(entry, "op", where), text(entry, "kernel", where),
                                      text(entry, "why", where), stackOf(entry, where)});
    }
  }

  void readStorages(const json& storages, Graph& graph) {
    if (!storages.is_array()) fail("\"storages\" must be an array");
    static const std::map<std::string, StorageOrigin> kOrigins = {
        {"parameter", StorageOrigin::kParameter},
        {"buffer", StorageOrigin::kBuffer},
        {"input", StorageOrigin::kInput},
        {"optimizer_state", StorageOrigin::kOptimizerState},
        {"activation", StorageOrigin::kActivation}};
    for (size_t index = 0; index < storages.size(); ++index) {
      const json& entry = storages[index];
      std::string where = "storage " + std::to_string(index);
      if (!entry.is_object()) fail(where + " must be an object");
      Storage storage;
      storage.bytes = integer(member(entry, "bytes", where), where + "'s bytes");
      if (storage.bytes < 0) fail(where + "'s bytes are negative");
      std::string origin = text(entry, "origin", where);
      auto found = kOrigins.find(origin);
      if (found == kOrigins.end()) fail(where + ": unknown origin \"" + origin + "\"");
      storage.origin = found->second;
      storage.category = categoryOf(text(entry, "category", where), where);
      storage.name = text(entry, "name", where);
      if (auto module = entry.find("module"); module != entry.end() && !module->is_null()) {
        storage.owner_module = text(entry, "module", where);
        storage.owned = true;
      }
      graph.addStorage(std::move(storage));
      Value value;  // what a persistent storage holds: its shape, when the file says it
      if (auto shape = entry.find("shape"); shape != entry.end() && shape->is_array()) {
        for (const json& dimension : *shape) value.shape.push_back(integer(dimension, where));
      }
      if (auto dtype = entry.find("dtype"); dtype != entry.end() && dtype->is_string()) {
        value.dtype = dtype->get<std::string>();
      }
      persistent_values_.push_back(std::move(value));
    }
    allocated_.assign(graph.storages.size(), false);
    released_.assign(graph.storages.size(), false);
  }

  format::Category categoryOf(const std::string& name, const std::string& where) const {
    for (uint8_t value = 0; value < static_cast<uint8_t>(format::Category::kCount); ++value) {
      auto category = static_cast<format::Category>(value);
      if (name == format::categoryName(category)) return category;
    }
    fail(where + ": unknown category \"" + name + "\"");
  }

  format::TrainingPhase phaseOf(const std::string& name, const std::string& where) const {
    for (uint8_t value = 0; value < static_cast<uint8_t>(format::TrainingPhase::kCount); ++value) {
      auto phase = static_cast<format::TrainingPhase>(value);
      if (name == format::trainingPhaseName(phase)) return phase;
    }
    fail(where + ": unknown phase \"" + name + "\"");
  }

  StorageId storageAt(const json& value, const std::string& where, const Graph& graph) const {
    int64_t index = integer(value, where);
    if (index < 0 || static_cast<size_t>(index) >= graph.storages.size()) {
      fail(where + ": no storage " + std::to_string(index));
    }
    return StorageId(static_cast<uint32_t>(index));
  }

  void readNodes(const json& nodes, Graph& graph) {
    if (!nodes.is_array()) fail("\"nodes\" must be an array");
    for (size_t index = 0; index < nodes.size(); ++index) {
      const json& entry = nodes[index];
      std::string where = "node " + std::to_string(index);
      if (!entry.is_object()) fail(where + " must be an object");
      NodeId id(static_cast<uint32_t>(graph.nodes.size()));
      Node node;
      node.op = text(entry, "op", where);
      node.phase = phaseOf(text(entry, "phase", where), where);
      // null: outside every module (a field that was always a string before: read alike).
      if (const json& module = member(entry, "module", where); module.is_null())
        node.in_module = false;
      else
        node.module_path = text(entry, "module", where);
      node.scope = ScopeId(0u);
      if (auto flops = entry.find("flops"); flops != entry.end()) {
        node.flops = integer(*flops, where + "'s flops");
      }
      node.stack = stackOf(entry, where);
      const json& releases = member(entry, "releases", where);
      if (!releases.is_array()) fail(where + ": \"releases\" must be an array");
      for (const json& release : releases) {
        StorageId storage = storageAt(release, where + "'s releases", graph);
        if (!allocated_[storage.value] || released_[storage.value]) {
          fail(where + " releases storage " + std::to_string(storage.value) +
               ", which is not live");
        }
        released_[storage.value] = true;
        node.events.push_back({MemoryEventKind::kRelease, storage});
      }
      const json& allocates = member(entry, "allocates", where);
      if (!allocates.is_array()) fail(where + ": \"allocates\" must be an array");
      for (const json& allocation : allocates) {
        if (!allocation.is_array() || allocation.size() != 3 || !allocation[1].is_array() ||
            !allocation[2].is_string()) {
          fail(where + ": an allocation is [storage, shape, dtype]");
        }
        StorageId storage = storageAt(allocation[0], where + "'s allocations", graph);
        Storage& allocated = graph.storage(storage);
        if (allocated.origin != StorageOrigin::kActivation || allocated_[storage.value]) {
          fail(where + " allocates storage " + std::to_string(storage.value) +
               ", which is persistent or allocated already");
        }
        allocated_[storage.value] = true;
        allocated.producer = id;
        Value value;
        value.storage = storage;
        value.producer = id;
        value.dtype = allocation[2].get<std::string>();
        for (const json& dimension : allocation[1]) {
          value.shape.push_back(integer(dimension, where + "'s shapes"));
        }
        node.outputs.push_back(graph.addValue(std::move(value)));
        node.events.push_back({MemoryEventKind::kAllocate, storage});
      }
      graph.addNode(std::move(node));
    }
    // The values of storages the file allocated and never released: held to the end.
    for (size_t index = 0; index < graph.values.size(); ++index) {
      StorageId storage = graph.values[index].storage;
      if (storage.valid() && !released_[storage.value]) {
        graph.outputs.push_back(ValueId(static_cast<uint32_t>(index)));
      }
    }
    // Persistent storages get a value each, so that they are listed like the TorchScript
    // front end's weights and inputs.
    for (size_t index = 0; index < graph.storages.size(); ++index) {
      if (graph.storages[index].origin == StorageOrigin::kActivation) continue;
      Value value = persistent_values_[index];
      value.storage = StorageId(static_cast<uint32_t>(index));
      ValueId id = graph.addValue(std::move(value));
      if (graph.storages[index].origin == StorageOrigin::kInput) graph.inputs.push_back(id);
    }
  }

  std::string path_;
  std::vector<SourceFrame> frames_;
  std::vector<Value> persistent_values_;  // per storage
  std::vector<bool> allocated_;
  std::vector<bool> released_;
};

}  // namespace

bool isGraphFile(const std::string& path) {
  std::ifstream file(path);
  char first = 0;
  while (file.get(first)) {
    if (!std::isspace(static_cast<unsigned char>(first))) return first == '{';
  }
  return false;
}

GraphFile readGraphFile(const std::string& path) {
  return Reader(path).read();
}

}  // namespace memtrace::estimator
