// The training part of the report (Note [Training records]): the category bytes at the
// peak, and the per-step table (step, peak, phase and module at the peak, categories there).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "tracer/report/analysis.h"

namespace memtrace::report {

// Text: nothing for a trace without training records.
void renderTrainingText(std::ostream& out, const TraceSummary& summary);
// JSON: null for a trace without training records.
nlohmann::json trainingJson(const TraceSummary& summary);

}  // namespace memtrace::report
