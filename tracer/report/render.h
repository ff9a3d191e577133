// Renderers of the report: the same content as text for people, JSON for programs (the
// Python package, the HTML report) and CSV for spreadsheets. Analyses stay in analysis.h.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "tracer/report/analysis.h"
#include "tracer/report/locations.h"
#include "tracer/report/prediction.h"

namespace memtrace::report {

struct Report {
  std::string trace_path;
  TraceSummary summary;
  LiveSet live_set;
  LocationTable table;
  size_t top = 20;  // rows shown (0: all)
  // memtrace-estimate's prediction, shown beside the measurement when given (--estimate).
  const Prediction* prediction = nullptr;
};

std::string pointName(const Point& point);

// The parts of the JSON report the other renderers (the HTML page's data) share.
nlohmann::json processJson(const TraceSummary& summary);
nlohmann::json summaryJson(const TraceSummary& summary);
nlohmann::json devicesJson(const TraceSummary& summary);
// The table's shown rows; with an estimate, each with its predicted bytes.
nlohmann::json rowsJson(const Report& report, const Prediction* prediction);

void renderText(std::ostream& out, const Report& report);
void renderJson(std::ostream& out, const Report& report);
void renderCsv(std::ostream& out, const Report& report);

}  // namespace memtrace::report
