// The training part of the report (Note [Training records]): the category bytes at the
// peak, and the per-step table (step, peak, phase and module at the peak, categories there).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "tracer/report/analysis.h"
#include "tracer/report/prediction.h"

namespace memtrace::report {

// Text: nothing for a trace without training records. With an estimate that has module x
// category cells, each module row has its prediction beneath (Note [Predicted module cells]).
void renderTrainingText(std::ostream& out, const TraceSummary& summary,
                        const Prediction* prediction = nullptr);
// JSON: null for a trace without training records; with such an estimate, each module row has
// "predicted" beside it.
nlohmann::json trainingJson(const TraceSummary& summary, const Prediction* prediction = nullptr);

// A row of the module table as the report names it: "model.transformer.h.* (x4)",
// "<no module>", "weights, allocated before tracing" (Note [The module table]).
std::string moduleName(const ModuleCategoryRow& row);
// The module table as JSON: {"depth", "rows": [{"module", "location", "count", "bytes",
// "categories"}]}, the training report's "modules_at_peak" (the job report's for each rank).
// With `predicted`, each row has "predicted": {"bytes", "categories"} (null: a row the
// estimate cannot speak to), and the table "predicted_only" (rows the trace has none of) and
// "predicted_total".
nlohmann::json moduleTableJson(const ModuleCategoryTable& table,
                               const PredictedModuleTable* predicted = nullptr);

}  // namespace memtrace::report
