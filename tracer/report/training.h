// The training part of the report (Note [Training records]): the category bytes at the
// peak, and the per-step table (step, peak, phase and module at the peak, categories there).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "tracer/report/analysis.h"

namespace memtrace::report {

// Text: nothing for a trace without training records.
void renderTrainingText(std::ostream& out, const TraceSummary& summary);
// JSON: null for a trace without training records.
nlohmann::json trainingJson(const TraceSummary& summary);

// A row of the module table as the report names it: "model.transformer.h.* (x4)",
// "<no module>", "weights, allocated before tracing" (Note [The module table]).
std::string moduleName(const ModuleCategoryRow& row);
// The module table as JSON: {"depth", "rows": [{"module", "location", "count", "bytes",
// "categories"}]}, the training report's "modules_at_peak" (the job report's for each rank).
nlohmann::json moduleTableJson(const ModuleCategoryTable& table);

}  // namespace memtrace::report
