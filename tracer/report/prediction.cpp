#include "tracer/report/prediction.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "tracer/format/records.h"
#include "tracer/report/join.h"

namespace memtrace::report {
namespace {

using nlohmann::json;

uint64_t unsignedField(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
    throw std::runtime_error(where + ": \"" + key + "\" is missing or not a non-negative integer");
  return it->get<uint64_t>();
}

std::string stringOrEmpty(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::vector<PredictionFrameEntry> frameEntries(const json& peak, const std::string& point,
                                               const char* key, const std::string& path) {
  std::vector<PredictionFrameEntry> entries;
  auto list = peak.find(key);
  if (list == peak.end()) return entries;
  if (!list->is_array())
    throw std::runtime_error(path + ": \"" + point + "." + key + "\" is not a list");
  for (const json& item : *list) {
    std::string where = path + ": an entry of \"" + point + "." + key + "\"";
    if (!item.is_object()) throw std::runtime_error(where + " is not an object");
    PredictionFrameEntry entry;
    entry.file = stringOrEmpty(item, "file");
    auto line = item.find("line");
    if (line != item.end() && line->is_number_integer()) entry.line = line->get<int>();
    entry.function = stringOrEmpty(item, "function");
    entry.bytes = unsignedField(item, "bytes", where);
    if (item.contains("tensors")) entry.tensors = unsignedField(item, "tensors", where);
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<std::pair<format::TrainingPhase, uint64_t>> stepCalls(const json& calls,
                                                                  const std::string& where) {
  if (!calls.is_array()) throw std::runtime_error(where + " is not a list");
  std::vector<std::pair<format::TrainingPhase, uint64_t>> entries;
  for (const json& call : calls) {
    std::string entry = where + ": an entry";
    if (!call.is_object()) throw std::runtime_error(entry + " is not an object");
    std::string phase = stringOrEmpty(call, "phase");
    format::TrainingPhase value = phase == "backward"    ? format::TrainingPhase::kBackward
                                  : phase == "optimizer" ? format::TrainingPhase::kOptimizer
                                                         : format::TrainingPhase::kNone;
    if (value == format::TrainingPhase::kNone)
      throw std::runtime_error(entry + ": \"phase\" is not \"backward\" or \"optimizer\"");
    entries.emplace_back(value, unsignedField(call, "bytes", entry));
  }
  return entries;
}

std::vector<PredictionModuleCell> moduleCells(const json& cells, const std::string& where) {
  if (!cells.is_array()) throw std::runtime_error(where + " is not a list");
  std::vector<PredictionModuleCell> entries;
  for (const json& item : cells) {
    if (!item.is_object()) throw std::runtime_error(where + ": an entry is not an object");
    std::string name = stringOrEmpty(item, "category");
    PredictionModuleCell cell{stringOrEmpty(item, "module_path"), format::Category::kUnknown,
                              unsignedField(item, "bytes", where)};
    for (uint8_t value = 0; value < static_cast<uint8_t>(format::Category::kCount); ++value)
      if (name == format::categoryName(static_cast<format::Category>(value)))
        cell.category = static_cast<format::Category>(value);
    if (cell.category == format::Category::kUnknown && name != "unknown")
      throw std::runtime_error(where + ": unknown category \"" + name + "\"");
    entries.push_back(std::move(cell));
  }
  return entries;
}

std::vector<PredictionModuleEntry> moduleEntries(const json& modules, const std::string& where) {
  if (!modules.is_array()) throw std::runtime_error(where + " is not a list");
  std::vector<PredictionModuleEntry> entries;
  for (const json& item : modules) {
    std::string entry = where + ": an entry";
    if (!item.is_object()) throw std::runtime_error(entry + " is not an object");
    entries.push_back(PredictionModuleEntry{stringOrEmpty(item, "module_path"),
                                            unsignedField(item, "bytes", entry)});
  }
  return entries;
}

// Note [The step's workspaces] in estimator/passes/attribute_peak.h.
PredictionStepWorkspaces stepWorkspaces(const json& apart, const std::string& path) {
  std::string point = "requested_peak.step_workspaces";
  if (!apart.is_object()) throw std::runtime_error(path + ": \"" + point + "\" is not an object");
  PredictionStepWorkspaces workspaces;
  workspaces.bytes = unsignedField(apart, "bytes", path + ": " + point);
  workspaces.by_frame = frameEntries(apart, point, "by_frame", path);
  workspaces.by_user_frame = frameEntries(apart, point, "by_user_frame", path);
  for (const char* key : {"by_step_call", "by_module", "by_module_category"})
    if (!apart.contains(key))
      throw std::runtime_error(path + ": \"" + point + "\" has no \"" + key + "\"");
  std::string where = path + ": \"" + point + ".";
  workspaces.by_step_call = stepCalls(apart["by_step_call"], where + "by_step_call\"");
  workspaces.by_module = moduleEntries(apart["by_module"], where + "by_module\"");
  workspaces.by_module_category =
      moduleCells(apart["by_module_category"], where + "by_module_category\"");
  return workspaces;
}

}  // namespace

Prediction loadPrediction(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": cannot open the estimate");
  json document = json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) throw std::runtime_error(path + ": the estimate is not valid JSON");
  if (!document.is_object() || document.value("format", json()) != "memtrace-estimate")
    throw std::runtime_error(path +
                             ": not a memtrace estimate (no \"format\": \"memtrace-estimate\")");
  if (document.value("version", json()) != 1)
    throw std::runtime_error(path + ": estimate format version " +
                             document.value("version", json()).dump() +
                             ", but this memtrace reads version 1");
  Prediction prediction;
  prediction.path = path;
  prediction.model = stringOrEmpty(document, "model");
  prediction.semantics = stringOrEmpty(document, "semantics");
  prediction.lower_bound = document.value("lower_bound", json(false)) == true;
  auto summary = document.find("summary");
  if (summary == document.end() || !summary->is_object())
    throw std::runtime_error(path + ": the estimate has no \"summary\" object");
  prediction.peak_requested_bytes =
      unsignedField(*summary, "peak_requested_bytes", path + ": summary");
  if (summary->contains("peak_allocated_bytes"))
    prediction.peak_allocated_bytes =
        unsignedField(*summary, "peak_allocated_bytes", path + ": summary");
  if (summary->contains("weight_bytes"))
    prediction.weight_bytes = unsignedField(*summary, "weight_bytes", path + ": summary");
  if (summary->contains("input_bytes"))
    prediction.input_bytes = unsignedField(*summary, "input_bytes", path + ": summary");
  if (auto training = summary->find("training_peak_bytes");
      training != summary->end() && !training->is_null()) {
    prediction.training_peak_bytes =
        unsignedField(*summary, "training_peak_bytes", path + ": summary");
    auto breakdown = summary->find("training_breakdown");
    if (breakdown == summary->end() || !breakdown->is_object())
      throw std::runtime_error(path + ": summary: \"training_breakdown\" is not an object");
    // In the trace format's order of categories (parameter, gradient, optimizer state, ...).
    for (uint8_t value = 1; value < static_cast<uint8_t>(format::Category::kCount); ++value) {
      const char* name = format::categoryName(static_cast<format::Category>(value));
      prediction.by_category.emplace_back(
          name, unsignedField(*breakdown, name, path + ": summary.training_breakdown"));
    }
  }
  // Note [The step's own calls] in estimator/passes/attribute_peak.h.
  if (auto requested = document.find("requested_peak"); requested != document.end() &&
                                                        requested->is_object() &&
                                                        requested->contains("by_step_call")) {
    prediction.step_calls = true;
    prediction.by_step_call =
        stepCalls((*requested)["by_step_call"], path + ": \"requested_peak.by_step_call\"");
    if (auto apart = requested->find("step_workspaces"); apart != requested->end())
      prediction.step_workspaces = stepWorkspaces(*apart, path);
    else  // an estimate from before Note [The step's workspaces]: before the step
      for (const char* key : {"cublas_workspace_bytes", "cublaslt_workspace_bytes"})
        if (auto found = summary->find(key); found != summary->end() && !found->is_null())
          prediction.workspace_bytes_before_step +=
              unsignedField(*summary, key, path + ": summary");
    if (summary->contains("optimizer_state_bytes"))
      prediction.optimizer_state_bytes =
          unsignedField(*summary, "optimizer_state_bytes", path + ": summary");
  }
  // Where requested_bytes peaks, workspaces on their lines (Note [Workspaces on their lines]
  // in estimator/passes/attribute_peak.h); an estimate from before it has the activations' peak.
  const char* point = document.contains("requested_peak") ? "requested_peak" : "peak";
  auto peak = document.find(point);
  if (peak != document.end()) {
    if (!peak->is_object()) throw std::runtime_error(path + ": \"" + point + "\" is not an object");
    prediction.by_frame = frameEntries(*peak, point, "by_frame", path);
    prediction.by_user_frame = frameEntries(*peak, point, "by_user_frame", path);
    if (auto cells = peak->find("by_module_category"); cells != peak->end())
      prediction.by_module_category =
          moduleCells(*cells, path + ": \"" + point + ".by_module_category\"");
    if (auto modules = peak->find("by_module"); modules != peak->end())
      prediction.by_module = moduleEntries(*modules, path + ": \"" + point + ".by_module\"");
  }
  return prediction;
}

namespace {

// Note [Where the step's workspaces are]
// A training step's estimate keeps cuBLAS's and cuBLASLt's workspaces apart (Note [The step's
// workspaces] in estimator/passes/attribute_peak.h), since only the trace can say whether it
// began before they were taken. It says so by what it holds at the point: memory of no known
// category allocated before tracing (the "untraced" row) of at least the workspaces' bytes
// means they were there before it began (a later step traced: they go beside that row, as the
// estimate's view of the steady step has them); less means the trace took them itself (a
// program's first step traced, `memtrace run train.py`: they join the estimate's lines, its
// step's own calls, its modules and its cells, where the taking node is). The workspaces never
// end, so an untraced row that small cannot hold them; one that large could hold something
// else instead only if the program made that much memory of no category before tracing and the
// trace also took the workspaces itself, which the rule reads as before tracing. The rule is all
// or nothing (a trace that begins between the forward's first matmul and backward's is not told
// apart), and one: the per-line join and the module cells read the same point's untraced bytes.
bool stepWorkspacesBeforeTracing(const PredictionStepWorkspaces& apart, uint64_t untraced_bytes) {
  return untraced_bytes >= apart.bytes;
}

void addFrames(std::vector<PredictionFrameEntry>& into,
               const std::vector<PredictionFrameEntry>& entries) {
  for (const PredictionFrameEntry& entry : entries) {
    auto same = std::find_if(into.begin(), into.end(), [&](const PredictionFrameEntry& other) {
      return other.file == entry.file && other.line == entry.line &&
             other.function == entry.function;
    });
    if (same == into.end()) {
      into.push_back(entry);
    } else {
      same->bytes += entry.bytes;
      same->tensors += entry.tensors;
    }
  }
}

// The prediction with a training step's workspaces where the trace shows them (Note [Where the
// step's workspaces are]); `untraced_bytes`: the trace's untraced memory of no known category.
Prediction withStepWorkspaces(const Prediction& prediction, uint64_t untraced_bytes) {
  Prediction placed = prediction;
  if (!prediction.step_workspaces) return placed;
  const PredictionStepWorkspaces& apart = *prediction.step_workspaces;
  placed.step_workspaces.reset();
  if (stepWorkspacesBeforeTracing(apart, untraced_bytes)) {
    placed.workspace_bytes_before_step = apart.bytes;
    return placed;
  }
  addFrames(placed.by_frame, apart.by_frame);
  addFrames(placed.by_user_frame, apart.by_user_frame);
  for (const PredictionModuleEntry& entry : apart.by_module) placed.by_module.push_back(entry);
  for (const auto& entry : apart.by_step_call) {  // not a structured binding: clang 14 cannot
                                                  // capture one in the lambda
    auto same = std::find_if(placed.by_step_call.begin(), placed.by_step_call.end(),
                             [&](const auto& call) { return call.first == entry.first; });
    if (same == placed.by_step_call.end())
      placed.by_step_call.push_back(entry);
    else
      same->second += entry.second;
  }
  for (const PredictionModuleCell& cell : apart.by_module_category)
    placed.by_module_category.push_back(cell);
  return placed;
}

uint64_t untracedBytes(const LocationTable& table,
                       format::Category holding = format::Category::kUnknown) {
  uint64_t bytes = 0;
  for (const TableRow& row : table.rows)
    if (row.location.kind == LocationKind::kUntraced && row.location.holding == holding)
      bytes += row.bytes;
  return bytes;
}

// The prediction as the rows of `table` take it: the step's workspaces where the trace shows
// them, and so the optimizer's state, which the estimate holds before its step (Note [The step's
// own calls]): a trace of a program's first step made it in that step's optimizer.step() (an
// optimizer's lazy state), on the line that called it, in the optimizer phase; where the trace
// holds less optimizer state allocated before tracing than the estimate does, the estimate's
// goes with the optimizer's own call (ownCall). By module it is under its parameters' modules
// either way.
Prediction placedBesideRows(const Prediction& estimate, const LocationTable& table) {
  Prediction prediction = withStepWorkspaces(estimate, untracedBytes(table));
  if (!prediction.step_calls || !prediction.optimizer_state_bytes ||
      untracedBytes(table, format::Category::kOptimizerState) >= prediction.optimizer_state_bytes)
    return prediction;
  auto call = std::find_if(
      prediction.by_step_call.begin(), prediction.by_step_call.end(),
      [](const auto& each) { return each.first == format::TrainingPhase::kOptimizer; });
  if (call == prediction.by_step_call.end())
    prediction.by_step_call.emplace_back(format::TrainingPhase::kOptimizer,
                                         prediction.optimizer_state_bytes);
  else
    call->second += prediction.optimizer_state_bytes;
  prediction.optimizer_state_bytes = 0;
  return prediction;
}

bool untracedRow(const ModuleCategoryRow& row) {
  return row.module.empty() && row.without_module == untracedName(format::Category::kUnknown);
}

uint64_t untracedBytes(const ModuleCategoryTable& table) {
  uint64_t bytes = 0;
  for (const ModuleCategoryRow& row : table.rows)
    if (untracedRow(row)) bytes += row.bytes;
  return bytes;
}

const std::vector<PredictionFrameEntry>& entriesFor(const Prediction& prediction,
                                                    const LocationTable& table) {
  return table.frame_policy == FramePolicy::kUser ? prediction.by_user_frame : prediction.by_frame;
}

// Whether a row can be compared with the estimate at all.
bool comparable(const LocationTable& table, const Location& location) {
  return location.kind == LocationKind::kPython &&
         (table.group_by == GroupBy::kLine || table.group_by == GroupBy::kFunction ||
          table.group_by == GroupBy::kFile);
}

// An entry of the estimate as a row of the table would describe it, for rowKey().
Location entryLocation(const PredictionFrameEntry& entry) {
  Location location;
  location.kind = LocationKind::kPython;
  location.file = entry.file;
  location.function = entry.function;
  location.line = entry.line;
  return location;
}

// Note [Module paths of the tracer and the estimator]
// The Python package names a module by its root and named_modules()'s path under it
// ("model.layers.3.attn", the root itself "model"); the estimator by named_modules()'s path
// alone ("layers.3.attn", the root ""). Dropping the measured path's first component makes
// them meet.
std::string_view pathUnderRoot(std::string_view module) {
  size_t dot = module.find('.');
  return dot == std::string_view::npos ? std::string_view() : module.substr(dot + 1);
}

Location moduleLocation(std::string_view path) {
  Location location;
  location.kind = LocationKind::kModule;
  location.module = std::string(path);
  return location;
}

// The estimate's bytes by the key of the row they belong to (Note [Joining rows]).
std::unordered_map<std::string, uint64_t> predictedByKey(const Prediction& prediction,
                                                         const LocationTable& table) {
  std::unordered_map<std::string, uint64_t> bytes;
  if (table.group_by == GroupBy::kModule) {
    for (const PredictionModuleEntry& entry : prediction.by_module)
      bytes[rowKey(table.group_by, moduleLocation(entry.module_path))] += entry.bytes;
  } else {
    for (const PredictionFrameEntry& entry : entriesFor(prediction, table))
      bytes[rowKey(table.group_by, entryLocation(entry))] += entry.bytes;
  }
  return bytes;
}

// Note [What was live before tracing]: the weights, and the inputs, allocated before tracing
// are what the estimator counts as there before the forward (Module.to(device), then the
// inputs), where rows are lines, functions or files (a stack's rows are stacks); by module,
// the inputs only, since the estimate puts each weight under its module (Note [Workspaces on
// their lines] in estimator/passes/attribute_peak.h).
std::optional<uint64_t> beforeTheForward(const Prediction& prediction, const LocationTable& table,
                                         const Location& location) {
  if (location.kind != LocationKind::kUntraced || table.group_by == GroupBy::kStack ||
      table.group_by == GroupBy::kCategory)
    return {};
  if (location.holding == format::Category::kParameter && table.group_by != GroupBy::kModule)
    return prediction.weight_bytes;
  if (location.holding == format::Category::kInput) return prediction.input_bytes;
  if (!prediction.step_calls) return {};
  // Note [The step's own calls]: a training step's estimate holds, before the step, the library
  // workspaces (what a trace of a later step cannot name: "untraced"), the optimizer's state
  // (under its modules by module) and nothing else: its step begins after zero_grad.
  switch (location.holding) {
    case format::Category::kUnknown:
      return prediction.workspace_bytes_before_step;
    case format::Category::kOptimizerState:
      if (table.group_by == GroupBy::kModule) return {};
      return prediction.optimizer_state_bytes;
    case format::Category::kGradient:
    case format::Category::kActivation:
      return uint64_t{0};
    case format::Category::kParameter:
    case format::Category::kInput:
    case format::Category::kTemporary:
    case format::Category::kCount:
      break;
  }
  return {};
}

// Note [The step's own calls]: the estimate's bytes of backward's or the optimizer's step's own
// call, for a row of lines, functions or files that the estimate has no entry for and whose
// allocations were last made in that phase (the line that calls backward() also holds the
// loss's own gradient, made before autograd reaches the model's output, where a trace's
// backward phase begins: mem_tracer/training.py); the largest such row takes them (the rows
// come largest first), another of the same phase 0 (a loop calls backward from one line).
std::optional<uint64_t> ownCall(const Prediction& prediction, const LocationTable& table,
                                const TableRow& row, std::vector<bool>& taken) {
  if (!prediction.step_calls || !comparable(table, row.location)) return {};
  for (size_t i = 0; i < prediction.by_step_call.size(); ++i) {
    if (prediction.by_step_call[i].first != row.phase) continue;
    if (taken[i]) return uint64_t{0};
    taken[i] = true;
    return prediction.by_step_call[i].second;
  }
  return {};
}

}  // namespace

std::vector<std::optional<uint64_t>> predictedBytes(const Prediction& estimate,
                                                    const LocationTable& table) {
  Prediction prediction = placedBesideRows(estimate, table);
  std::vector<std::optional<uint64_t>> predicted;
  if (table.group_by == GroupBy::kCategory) {
    // A training step's estimate speaks to every category; an inference one to none.
    for (const TableRow& row : table.rows) {
      std::optional<uint64_t> bytes;
      for (const auto& [name, size] : prediction.by_category)
        if (name == row.location.name) bytes = size;
      if (!bytes && !prediction.by_category.empty()) bytes = 0;
      predicted.push_back(bytes);
    }
    return predicted;
  }
  std::unordered_map<std::string, uint64_t> by_key = predictedByKey(prediction, table);
  std::vector<bool> calls_taken(prediction.by_step_call.size(), false);
  for (const TableRow& row : table.rows) {
    std::optional<std::string> key;
    if (std::optional<uint64_t> before = beforeTheForward(prediction, table, row.location)) {
      predicted.push_back(before);
      continue;
    }
    if (table.group_by == GroupBy::kModule) {
      if (row.location.kind == LocationKind::kModule && !row.location.module.empty())
        key = rowKey(table.group_by, moduleLocation(pathUnderRoot(row.location.module)));
    } else if (comparable(table, row.location)) {
      key = rowKey(table.group_by, row.location);
    }
    if (!key) {
      predicted.emplace_back();
      continue;
    }
    auto found = by_key.find(*key);
    if (found == by_key.end()) {
      if (std::optional<uint64_t> call = ownCall(prediction, table, row, calls_taken)) {
        predicted.push_back(call);
        continue;
      }
    }
    predicted.emplace_back(found == by_key.end() ? 0 : found->second);
  }
  return predicted;
}

// Note [Predicted module cells]
// The estimate names a module by named_modules()'s path under the model ("h.0.attn", the root
// ""), the trace by the root's name and that path, cut and folded to the table's depth
// ("model.h.*"): each predicted path is put under a stand-in root and folded to the same depth,
// and both sides meet on the part under the root (Note [Module paths of the tracer and the
// estimator]). Owners that are not modules (`<optimizer.step>`, `<DDP buckets>`) meet by name.
// What the estimate puts under no module meets the measured rows without a module category by
// category: a category's cells go to the row of what was allocated before tracing holding it,
// if the trace has one (the inputs made before the trace started: "inputs, allocated before
// tracing"), else to `<no module>`'s row, else to the largest row without a module. A row
// without a module that gets no cell holds what the estimate cannot tell apart (untraced
// memory of no known category): it has no prediction (null), not a prediction of zero.
namespace {

constexpr std::string_view kNoModuleKey = "\x01no module";

std::string measuredKey(const ModuleCategoryRow& row) {
  if (row.module.empty()) return std::string(kNoModuleKey) + row.without_module;
  if (row.module.front() == '<') return row.module;
  return "." + std::string(pathUnderRoot(row.module));
}

std::string predictedKey(const std::string& module_path, size_t depth) {
  if (module_path == "<no module>") return std::string(kNoModuleKey);
  if (!module_path.empty() && module_path.front() == '<') return module_path;
  std::string folded = foldedModulePath(module_path.empty() ? "_" : "_." + module_path, depth);
  return "." + std::string(pathUnderRoot(folded));
}

// The key of the measured row that takes the estimate's no-module bytes of `category`.
std::string noModuleRowKey(const ModuleCategoryTable& measured, format::Category category) {
  const ModuleCategoryRow* chosen = nullptr;
  for (const ModuleCategoryRow& row : measured.rows) {
    if (!row.module.empty()) continue;
    // (What no category was known of is "untraced": no predicted category goes there.)
    std::string_view before_tracing = untracedName(category);
    if (before_tracing != "untraced" && row.without_module == before_tracing)
      return measuredKey(row);
    // <no module>'s row, else the largest without a module (rows are largest first).
    if (!chosen || row.without_module == "<no module>") chosen = &row;
  }
  return chosen ? measuredKey(*chosen) : std::string(kNoModuleKey) + "<no module>";
}

}  // namespace

PredictedModuleTable predictedModuleTable(const Prediction& estimate,
                                          const ModuleCategoryTable& measured) {
  PredictedModuleTable table;
  if (estimate.by_module_category.empty() || measured.rows.empty()) return table;
  Prediction prediction = withStepWorkspaces(estimate, untracedBytes(measured));
  std::unordered_map<std::string, CategoryBytes> by_key;
  // Note [Where the step's workspaces are]: before tracing, beside the untraced row, as memory
  // of no known category (what the trace knows of it).
  if (prediction.workspace_bytes_before_step)
    for (const ModuleCategoryRow& row : measured.rows)
      if (untracedRow(row)) {
        by_key[measuredKey(row)][static_cast<size_t>(format::Category::kUnknown)] +=
            prediction.workspace_bytes_before_step;
        table.total[static_cast<size_t>(format::Category::kUnknown)] +=
            prediction.workspace_bytes_before_step;
        break;
      }
  for (const PredictionModuleCell& cell : prediction.by_module_category) {
    std::string key = predictedKey(cell.module_path, measured.depth);
    if (key == kNoModuleKey) key = noModuleRowKey(measured, cell.category);
    by_key[key][static_cast<size_t>(cell.category)] += cell.bytes;
    table.total[static_cast<size_t>(cell.category)] += cell.bytes;
  }
  // The trace's name for the model, for the predicted rows it has none of: the largest
  // module row's first part.
  std::string root = "model";
  for (const ModuleCategoryRow& row : measured.rows) {
    if (row.module.empty() || row.module.front() == '<') continue;
    root = row.module.substr(0, row.module.find('.'));
    break;
  }
  for (const ModuleCategoryRow& row : measured.rows) {
    auto found = by_key.find(measuredKey(row));
    if (found == by_key.end()) {
      // A module the estimate puts nothing in: zero; a row without a module: unknown.
      table.rows.push_back(row.module.empty() ? std::nullopt
                                              : std::optional<CategoryBytes>(CategoryBytes{}));
      continue;
    }
    table.rows.push_back(found->second);
    by_key.erase(found);
  }
  for (const auto& [key, categories] : by_key) {
    uint64_t total = 0;
    for (uint64_t bytes : categories) total += bytes;
    if (!total) continue;
    ModuleCategoryRow row{"", 1, total, categories, ""};
    if (key.rfind(kNoModuleKey, 0) == 0)
      row.without_module = key.substr(kNoModuleKey.size());
    else if (key.front() == '<')
      row.module = key;
    else
      row.module = key == "." ? root : root + key;
    table.unmatched.push_back(std::move(row));
  }
  std::sort(table.unmatched.begin(), table.unmatched.end(),
            [](const ModuleCategoryRow& a, const ModuleCategoryRow& b) {
              return a.bytes != b.bytes ? a.bytes > b.bytes : a.module < b.module;
            });
  return table;
}

std::vector<PredictionFrameEntry> unmatchedEntries(const Prediction& estimate,
                                                   const LocationTable& table) {
  Prediction prediction = placedBesideRows(estimate, table);
  std::vector<PredictionFrameEntry> unmatched;
  if (table.group_by == GroupBy::kStack || table.group_by == GroupBy::kModule ||
      table.group_by == GroupBy::kCategory)
    return unmatched;
  std::unordered_set<std::string> rows;
  for (const TableRow& row : table.rows)
    if (comparable(table, row.location)) rows.insert(rowKey(table.group_by, row.location));
  for (const PredictionFrameEntry& entry : entriesFor(prediction, table))
    if (entry.bytes && !rows.count(rowKey(table.group_by, entryLocation(entry))))
      unmatched.push_back(entry);
  return unmatched;
}

}  // namespace memtrace::report
