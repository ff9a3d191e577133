// The estimator's prediction (memtrace-estimate's JSON, "format": "memtrace-estimate"),
// read so that the HTML report can draw it beside what the trace measured.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tracer/report/locations.h"

namespace memtrace::report {

struct PredictionFrameEntry {
  std::string file;  // absolute, "" when the estimate has none
  int line = 0;
  std::string function;
  uint64_t bytes = 0;
  uint64_t tensors = 0;
};

struct PredictionModuleEntry {
  std::string module_path;  // as named_modules() names it; "" is the root module
  uint64_t bytes = 0;
};

struct PredictionModuleCell {
  std::string module_path;  // named_modules()'s ("" the root), or an owner: "<no module>", ...
  format::Category category = format::Category::kUnknown;
  uint64_t bytes = 0;
};

// A training step's cuBLAS and cuBLASLt workspaces, grouped as the rest of the estimate is
// ("requested_peak.step_workspaces"; Note [The step's workspaces] in
// estimator/passes/attribute_peak.h): where the trace shows them, the report puts them (Note
// [Where the step's workspaces are] in prediction.cpp).
struct PredictionStepWorkspaces {
  uint64_t bytes = 0;
  std::vector<PredictionFrameEntry> by_frame;
  std::vector<PredictionFrameEntry> by_user_frame;
  std::vector<PredictionModuleEntry> by_module;
  std::vector<std::pair<format::TrainingPhase, uint64_t>> by_step_call;
  std::vector<PredictionModuleCell> by_module_category;
};

// An estimate file as the report reads it: only what it shows beside the measurement. (The
// estimator's own estimator::Estimate is the whole analysis that file was written from.)
struct Prediction {
  std::string path;
  std::string model;
  std::string semantics;  // "eager" or "torchscript"
  bool lower_bound = false;
  uint64_t peak_requested_bytes = 0;
  uint64_t peak_allocated_bytes = 0;
  // Parameters, buffers and constants; the forward's inputs: both there before the forward
  // (summary.weight_bytes, summary.input_bytes), beside the rows of what was allocated before
  // tracing (Note [What was live before tracing]).
  std::optional<uint64_t> weight_bytes;
  std::optional<uint64_t> input_bytes;
  // Live where requested_bytes peaks, workspaces on the lines that took them ("requested_peak";
  // Note [Workspaces on their lines] in estimator/passes/attribute_peak.h), or, in an estimate
  // from before that, at the activations' peak ("peak").
  std::vector<PredictionFrameEntry> by_frame;       // keyed like --frame innermost
  std::vector<PredictionFrameEntry> by_user_frame;  // keyed like --frame user
  std::vector<PredictionModuleEntry> by_module;     // keyed like --group-by module
  // A training step's estimate: the step's peak and its categories there ("parameter", ...;
  // summary.training_breakdown), keyed like --group-by category. Empty otherwise.
  std::optional<uint64_t> training_peak_bytes;
  std::vector<std::pair<std::string, uint64_t>> by_category;
  // A training step's estimate that names its own calls (requested_peak.by_step_call; Note [The
  // step's own calls] in estimator/passes/attribute_peak.h): what it holds before the step
  // besides the weights and the inputs, the optimizer's state (summary.optimizer_state_bytes)
  // and the library workspaces (summary.cublas_workspace_bytes + cublaslt_workspace_bytes, in
  // an estimate without step_workspaces; else where the trace shows them); and
  // what backward and the optimizer's step allocated outside the forward's lines, by phase.
  bool step_calls = false;
  uint64_t optimizer_state_bytes = 0;
  uint64_t workspace_bytes_before_step = 0;
  std::vector<std::pair<format::TrainingPhase, uint64_t>> by_step_call;
  // Every byte where requested_bytes peaks, by owner and category ("requested_peak.
  // by_module_category": Note [Module x category predicted] in
  // estimator/passes/attribute_peak.h); empty in an estimate from before it.
  std::vector<PredictionModuleCell> by_module_category;
  // Apart from all of the above, in an estimate that keeps them apart (a training step's since
  // Note [The step's workspaces]; before it, they were in workspace_bytes_before_step).
  std::optional<PredictionStepWorkspaces> step_workspaces;
};

// Reads and checks an estimate file. Throws std::runtime_error, whose message names the
// file and what is wrong, for a file that is missing, not JSON, or not an estimate.
Prediction loadPrediction(const std::string& path);

// The predicted bytes for each row of `table`, from the entries keyed like the table's
// frame policy, summed at the table's grain (a line; a file and function; a file), or by
// nn.Module (Note [Module paths of the tracer and the estimator]); the estimate's weights and
// inputs beside the rows of weights and inputs allocated before tracing, where rows are lines,
// functions or files; for a training step's estimate, the optimizer's state and the library
// workspaces beside the rows of what was there before tracing, and what backward and the
// optimizer's step allocated beside the row whose allocations were all made in that phase
// (Note [The step's own calls]). A row the estimate cannot speak to (a stack, other untraced
// or native memory) gets nullopt; a row it has no entry for 0.
std::vector<std::optional<uint64_t>> predictedBytes(const Prediction& prediction,
                                                    const LocationTable& table);

// Note [Predicted module cells]: the estimate's module x category cells at the grain of the
// measured module table (its depth, its folded blocks), one per measured row.
struct PredictedModuleTable {
  // Beside each measured row: the predicted bytes by category; nullopt for a row without a
  // module that no predicted cell goes to (untraced memory the estimate cannot tell apart).
  std::vector<std::optional<CategoryBytes>> rows;
  // Predicted rows that no measured row has (a module the estimate puts bytes in, the trace
  // none at its peak), largest first; their module is folded as a measured row's would be.
  std::vector<ModuleCategoryRow> unmatched;
  CategoryBytes total{};  // every predicted cell: sums to the requested peak
};
// Empty (no rows) when the estimate has no module x category cells or the table no rows.
PredictedModuleTable predictedModuleTable(const Prediction& prediction,
                                          const ModuleCategoryTable& measured);

// The estimate's entries (keyed like the table's frame policy) that match no row of the
// table: what the estimator predicted live at its peak where nothing was live at the
// measured point. Empty for a grouping the estimate cannot speak to (stack, module).
std::vector<PredictionFrameEntry> unmatchedEntries(const Prediction& prediction,
                                                   const LocationTable& table);

}  // namespace memtrace::report
