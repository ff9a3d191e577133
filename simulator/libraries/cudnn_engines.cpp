// The simulated cuDNN's engines: what an operation graph is (its description), which engines
// the heuristics offer for it, their notes and the workspace their plans ask for (the one
// number of a plan that changes what PyTorch allocates), and the log of plans and executions.
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "simulator/core/device.h"
#include "simulator/core/sizes.h"
#include "simulator/libraries/cudnn_backend.h"

using Json = nlohmann::ordered_json;

namespace simgpu::cudnn {

// Note [Engines and workspaces]
// On a card, the engine a plan runs and the workspace it asks for come from cuDNN's
// heuristics (a model of the card trained by NVIDIA, in libcudnn_heuristic.so), which cannot
// run here. PyTorch allocates that workspace through its caching allocator for the length of
// the call (Conv_v8.cpp run_conv_plan; MHA.cpp with the graph's get_workspace_size), so it is
// the one number of a plan that changes what PyTorch's memory statistics say. What the
// simulated cuDNN answers:
//  - Every operation graph gets two engines: engine 0 (the tensor-core kernel a card picks
//    first for half, bfloat16 and TF32 convolutions, matmuls and attention: numerical note
//    TENSOR_CORE) and engine 1 (no notes: what is left when PyTorch filters tensor cores out,
//    as for float32 with torch.backends.cudnn.allow_tf32 = False, or nondeterministic engines
//    for torch.use_deterministic_algorithms). CUDNN_HEUR_MODE_FALLBACK offers engine 1 alone.
//    Neither has knobs. Both ask for no workspace, like cuDNN's implicit-GEMM engines: a
//    prediction without a measurement would be a guess, and a guess of zero is the one that
//    says so (approximate(): one line per kind of operation, the first time).
//  - Unless the device profile has measured it: "cudnn_workspaces" in simulator/profiles/*.json
//    holds {"match": {...}, "workspace_bytes": N, "measured": "..."} entries; the first entry
//    whose "match" is a part of the graph's description (below; every key it names equal,
//    recursively) gives engine 0 that workspace (and its "numerical_notes", when given).
//  - Under torch.backends.cudnn.benchmark, PyTorch builds a plan of every engine offered,
//    allocates the largest workspace among them and times each plan (with events that answer
//    host time here), so the simulated run allocates the largest measured workspace, where the
//    card would allocate the largest of all its engines' (FFT engines can ask for much more),
//    and keeps whichever plan host time calls faster.
// Against the H200 (tests/simulator/test_cudnn.py, the rows of tests/estimator/truth-h200.json):
// GPT-2 and BERT fp16 (cuDNN attention) at batch 1 and 8 and ResNet-50 fp32 and fp16 at batch 1
// peak exactly where the card did; ResNet-50 at batch 8 requests 2.06 MiB (fp16) and 5.13 MiB
// (fp32) less at its peak than the card, the workspace the card's engine held there, and
// reserves 22 and 10 MiB less (segments the card opened for larger workspaces elsewhere).
// The description of a graph is one line of JSON: its main operation ("convolution_forward",
// "sdpa_fwd", ...), the data type of that operation's first tensor, its tensors (dims and
// strides, by the attribute's name: "x", "w", "y", "q", ...), the other descriptors it names
// (a convolution's paddings, strides and dilations) and the operations fused with it.
// MEMTRACE_GPU_CUDNN_LOG=FILE (or "stderr") writes it for every plan, with the workspace
// answered: that is the "match" to copy into the profile. To measure an entry's workspace on a
// lent card, run the operation alone with the same shapes, layout and dtype: PyTorch's
// requested_bytes.all.peak over the call, less what was requested before and the output's
// bytes, is the workspace (it is allocated after the output and freed at the call's end), or
// read it from cuDNN's own log (CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=FILE; cuDNN 8 names it
// CUDNN_LOGINFO_DBG=1), which prints each plan's workspace size.

namespace {

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return text;
}
bool startsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// "OPERATION_CONVOLUTION_FORWARD" of CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR.
std::string kindStem(Kind kind) {
  const char* name = kindName(static_cast<int>(kind));
  if (!name) return "";
  std::string text(name);
  return text.substr(strlen("CUDNN_BACKEND_"),
                     text.size() - strlen("CUDNN_BACKEND_") - strlen("_DESCRIPTOR"));
}

bool isOperation(Kind kind) {
  return startsWith(kindStem(kind), "OPERATION_");
}

// "convolution_forward", "sdpa_fwd", "matmul", ...
std::string operationName(Kind kind) {
  return lower(kindStem(kind).substr(strlen("OPERATION_")));
}

// The short name of an attribute of a descriptor of `kind`: "x" of
// CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, "dy" of ..._BWD_DATA_DY, "q" of
// ..._SDPA_FWD_QDESC, "pre_paddings" of CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS.
std::string shortName(Kind kind, int attribute) {
  const char* full = attributeName(attribute);
  if (!full) return "attribute_" + std::to_string(attribute);
  std::string name = std::string(full).substr(strlen("CUDNN_ATTR_"));
  std::string stem = kindStem(kind) + "_";
  // The attribute names abbreviate some of the descriptor types' names.
  static const std::pair<const char*, const char*> kShorter[] = {
      {"BACKWARD_DATA", "BWD_DATA"}, {"BACKWARD_FILTER", "BWD_FILTER"},
      {"FORWARD_", "FWD_"},          {"BACKWARD_", "BWD_"},
      {"GEN_STATS", "GENSTATS"},     {"BN_FINALIZE_STATISTICS", "BN_FINALIZE"}};
  if (!startsWith(name, stem)) {
    for (const auto& [from, to] : kShorter) {
      size_t at = stem.find(from);
      if (at != std::string::npos) stem.replace(at, strlen(from), to);
    }
  }
  if (startsWith(name, stem))
    name = name.substr(stem.size());
  else
    name = name.substr(name.rfind('_') == std::string::npos ? 0 : name.rfind('_') + 1);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "DESC") == 0)
    name = name.substr(0, name.size() - 4);
  while (!name.empty() && name.back() == '_') name.pop_back();
  return lower(name);
}

Json scalarJson(const Value& value) {
  Json out = Json::array();
  for (int64_t i = 0; i < value.count; ++i) {
    switch (value.type) {
      case Type::DATA_TYPE:
        out.push_back(dataTypeName(value.at<int32_t>(i)));
        break;
      case Type::FLOAT:
        out.push_back(value.at<float>(i));
        break;
      case Type::DOUBLE:
        out.push_back(value.at<double>(i));
        break;
      case Type::BOOLEAN:
        out.push_back(value.at<bool>(i));
        break;
      case Type::INT64:
        out.push_back(value.at<int64_t>(i));
        break;
      case Type::HANDLE:
      case Type::VOID_PTR:
      case Type::CHAR:
      case Type::FRACTION:
        return Json();  // nothing a workspace could depend on, or no number
      default:
        out.push_back(value.at<int32_t>(i));
        break;  // an enumeration
    }
  }
  return out.size() == 1 ? out[0] : out;
}

Json tensorJson(const Descriptor& tensor) {
  Json out;
  const Value* dims = tensor.find(Attr::TENSOR_DIMENSIONS);
  const Value* strides = tensor.find(Attr::TENSOR_STRIDES);
  out["dims"] = dims ? dims->integers() : std::vector<int64_t>{};
  out["strides"] = strides ? strides->integers() : std::vector<int64_t>{};
  if (const Value* type = tensor.find(Attr::TENSOR_DATA_TYPE))
    out["data_type"] = dataTypeName(type->at<int32_t>(0));
  return out;
}

bool isVirtual(const Descriptor& tensor) {
  const Value* value = tensor.find(Attr::TENSOR_IS_VIRTUAL);
  return value && value->count > 0 && value->at<bool>(0);
}

// Every tensor reachable from `d` (an operation's inputs and outputs, a softmax or a subgraph
// it names, a ragged tensor's offsets) that lives in memory.
void collectUids(const Descriptor& d, std::set<int64_t>* uids, int depth) {
  if (depth > 8) return;
  if (d.kind == Kind::TENSOR && !isVirtual(d)) {
    if (const Value* uid = d.find(Attr::TENSOR_UNIQUE_ID)) uids->insert(uid->at<int64_t>(0));
  }
  for (const auto& [attribute, value] : d.attributes)
    for (const auto& child : value.descriptors) collectUids(*child, uids, depth + 1);
}

// What an operation is, for the description: its tensors, the descriptors it names (a
// convolution's), the operations nested in it (attention's softmax) and its subgraph's.
Json operationJson(const Descriptor& op, int depth) {
  Json out;
  out["operation"] = operationName(op.kind);
  out["data_type"] = nullptr;  // its first tensor's, below; first in the line for the reader
  Json tensors = Json::object();
  for (const auto& [attribute, value] : op.attributes) {
    if (value.type != Type::BACKEND_DESCRIPTOR || value.descriptors.empty()) continue;
    const Descriptor& child = *value.descriptors[0];
    std::string name = shortName(op.kind, attribute);
    if (child.kind == Kind::TENSOR) {
      if (out["data_type"].is_null()) {
        if (const Value* type = child.find(Attr::TENSOR_DATA_TYPE))
          out["data_type"] = dataTypeName(type->at<int32_t>(0));
      }
      tensors[name] = tensorJson(child);
    } else if (isOperation(child.kind)) {
      if (depth < 4) out[name] = operationJson(child, depth + 1);
    } else if (child.kind == Kind::OPERATIONGRAPH) {
      Json names = Json::array();
      if (const Value* ops = child.find(Attr::OPERATIONGRAPH_OPS))
        for (const auto& nested : ops->descriptors) names.push_back(operationName(nested->kind));
      out[name] = names;
    } else {
      Json described = Json::object();
      for (const auto& [child_attribute, child_value] : child.attributes) {
        Json number = scalarJson(child_value);
        if (!number.is_null()) described[shortName(child.kind, child_attribute)] = number;
      }
      out[name] = described;
    }
  }
  if (out["data_type"].is_null()) out.erase("data_type");
  out["tensors"] = tensors;
  return out;
}

// Which operation of a graph decides its engine: attention, then convolutions, matmuls,
// normalizations, the rest in order.
int rank(Kind kind) {
  std::string name = operationName(kind);
  if (startsWith(name, "sdpa")) return 0;
  if (startsWith(name, "convolution")) return 1;
  if (startsWith(name, "matmul")) return 2;
  if (startsWith(name, "norm")) return 3;
  return 4;
}

struct TableEntry {
  Json match;
  int64_t workspace_bytes = 0;
  std::vector<NumericalNote> numerical_notes;
  bool has_notes = false;
  std::string measured;
};

// The device profile's "cudnn_workspaces" entries (Note [Engines and workspaces]); read once.
const std::vector<TableEntry>& table() {
  static const std::vector<TableEntry>* entries = [] {
    auto* out = new std::vector<TableEntry>;
    const Profile* card = profile();
    if (!card) return out;
    try {
      std::ifstream file(card->file);
      Json document = Json::parse(file);
      if (!document.contains("cudnn_workspaces")) return out;
      for (const Json& row : document.at("cudnn_workspaces").at("entries")) {
        TableEntry entry;
        entry.match = row.at("match");
        entry.workspace_bytes = row.at("workspace_bytes").get<int64_t>();
        entry.measured = row.value("measured", "");
        if (row.contains("numerical_notes")) {
          entry.has_notes = true;
          for (const Json& note : row.at("numerical_notes"))
            entry.numerical_notes.push_back(static_cast<NumericalNote>(note.get<int>()));
        }
        out->push_back(std::move(entry));
      }
    } catch (const std::exception& error) {
      std::string how =
          std::string("cannot be read (") + error.what() + "): no workspace is taken from it";
      approximate("cuDNN", "the device profile's cudnn_workspaces", how.c_str());
      out->clear();
    }
    return out;
  }();
  return *entries;
}

// Whether every key `pattern` names is in `value` and equal (objects recursively).
bool matches(const Json& pattern, const Json& value) {
  if (!pattern.is_object()) return pattern == value;
  if (!value.is_object()) return false;
  for (const auto& [key, expected] : pattern.items())
    if (!value.contains(key) || !matches(expected, value.at(key))) return false;
  return true;
}

}  // namespace

std::shared_ptr<const GraphAnalysis> analyseGraph(const Value& operations, std::string* why) {
  const Descriptor* main = nullptr;
  std::vector<std::string> names;
  for (const auto& op : operations.descriptors) {
    if (!isOperation(op->kind)) {
      *why = "its CUDNN_ATTR_OPERATIONGRAPH_OPS names a " +
             std::string(kindName(static_cast<int>(op->kind))) + ", not an operation";
      return nullptr;
    }
    names.push_back(operationName(op->kind));
    if (!main || rank(op->kind) < rank(main->kind)) main = op.get();
  }
  auto analysis = std::make_shared<GraphAnalysis>();
  Json description = operationJson(*main, 0);
  if (names.size() > 1) description["graph"] = names;  // every operation, in the graph's order
  analysis->description = description.dump();
  analysis->operation = description["operation"].get<std::string>();
  std::set<int64_t> uids;
  for (const auto& op : operations.descriptors) collectUids(*op, &uids, 0);
  analysis->uids.assign(uids.begin(), uids.end());

  std::string type = description.value("data_type", "");
  bool tensor_cores = rank(main->kind) <= 2 && (type == "half" || type == "bfloat16" ||
                                                type == "float" || startsWith(type, "fp8"));
  Engine first;
  first.index = 0;
  if (tensor_cores) first.numerical_notes = {NumericalNote::TENSOR_CORE};
  first.source = "none measured";
  for (const TableEntry& entry : table()) {
    if (!matches(entry.match, description)) continue;
    first.workspace_bytes = entry.workspace_bytes;
    if (entry.has_notes) first.numerical_notes = entry.numerical_notes;
    first.source = "measured: " + entry.measured;
    break;
  }
  Engine plain;
  plain.index = 1;
  plain.source = "none measured";
  analysis->engines = {first, plain};
  analysis->fallback = {plain.index};
  analysis->global_count = 2;
  return analysis;
}

std::string planJson(const Descriptor& plan) {
  Json out;
  out["memtrace_simulated_plan"] = 1;
  out["engine"] = plan.engine.index;
  out["workspace_bytes"] = plan.engine.workspace_bytes;
  out["workspace_source"] = plan.engine.source;
  std::vector<int> notes;
  for (NumericalNote note : plan.engine.numerical_notes) notes.push_back(static_cast<int>(note));
  out["numerical_notes"] = notes;
  out["uids"] = plan.graph ? plan.graph->uids : std::vector<int64_t>{};
  out["graph"] = plan.graph ? Json::parse(plan.graph->description) : Json::object();
  return out.dump();
}

bool planFromJson(const std::string& text, Descriptor* plan) {
  try {
    Json json = Json::parse(text);
    if (!json.contains("memtrace_simulated_plan")) return false;
    Engine engine;
    engine.index = json.at("engine").get<int64_t>();
    engine.workspace_bytes = json.at("workspace_bytes").get<int64_t>();
    engine.source = json.value("workspace_source", "");
    for (const Json& note : json.at("numerical_notes"))
      engine.numerical_notes.push_back(static_cast<NumericalNote>(note.get<int>()));
    auto analysis = std::make_shared<GraphAnalysis>();
    analysis->description = json.at("graph").dump();
    analysis->operation = json.at("graph").value("operation", "");
    analysis->engines = {engine};
    analysis->global_count = engine.index + 1;
    analysis->uids = json.at("uids").get<std::vector<int64_t>>();
    plan->graph = analysis;
    plan->engine = engine;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

namespace {

// MEMTRACE_GPU_CUDNN_LOG: a file (appended to) or "stderr"; nullptr when unset or unwritable.
FILE* logFile() {
  static FILE* file = [] {
    const char* path = getenv("MEMTRACE_GPU_CUDNN_LOG");
    if (!path || !*path) return static_cast<FILE*>(nullptr);
    if (strcmp(path, "stderr") == 0) return stderr;
    FILE* opened = fopen(path, "a");
    if (!opened) {
      std::string how = std::string("MEMTRACE_GPU_CUDNN_LOG=") + path + " cannot be written";
      approximate("cuDNN", "the plan log", how.c_str());
    }
    return opened;
  }();
  return file;
}

std::mutex g_log_mutex;

void writeLog(const std::string& line) {
  FILE* file = logFile();
  if (!file) return;
  std::lock_guard<std::mutex> lock(g_log_mutex);
  fprintf(file, "%s\n", line.c_str());
  fflush(file);
}

}  // namespace

void logPlan(const Descriptor& plan) {
  if (plan.engine.source == "none measured") {
    // Said and recorded as every size nobody measured is (Note [Sizes nobody measured] in
    // simulator/core/sizes.cpp); the answer stays 0 under MEMTRACE_GPU_UNKNOWN_SIZES=refuse
    // too, as it always was: a plan is never refused for its workspace.
    SizeQuestion question{"cuDNN", "cudnnBackendFinalize (" + plan.graph->operation + " plan)",
                          plan.graph->description};
    SizeAnswer answer;
    answer.bytes = 0;
    answer.at_most = kNoBound;
    answer.how =
        "no engine's workspace measured: the device profile's cudnn_workspaces has no entry "
        "for it (Note [Engines and workspaces] in simulator/libraries/cudnn_engines.cpp)";
    answerSize(question, &answer);
  }
  if (!logFile()) return;
  writeLog("{\"event\":\"plan\",\"plan\":" + std::to_string(plan.id) +
           ",\"engine\":" + std::to_string(plan.engine.index) +
           ",\"workspace_bytes\":" + std::to_string(plan.engine.workspace_bytes) +
           ",\"workspace_source\":" + Json(plan.engine.source).dump() +
           ",\"graph\":" + plan.graph->description + "}");
}

void logExecute(const Descriptor& plan, const void* workspace) {
  if (!logFile()) return;
  writeLog("{\"event\":\"execute\",\"plan\":" + std::to_string(plan.id) +
           ",\"operation\":" + Json(plan.graph->operation).dump() +
           ",\"workspace_bytes\":" + std::to_string(plan.engine.workspace_bytes) +
           ",\"workspace_given\":" + (workspace ? "true" : "false") + "}");
}

}  // namespace simgpu::cudnn
