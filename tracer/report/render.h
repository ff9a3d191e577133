// Renderers of the report: the same content as text for people, JSON for programs (the
// Python package, the HTML report) and CSV for spreadsheets. Analyses stay in analysis.h.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tracer/report/analysis.h"
#include "tracer/report/device_reads.h"
#include "tracer/report/locations.h"
#include "tracer/report/oom.h"
#include "tracer/report/prediction.h"
#include "tracer/report/simulated_sizes.h"

namespace memtrace::report {

struct Report {
  std::string trace_path;
  TraceSummary summary;
  LiveSet live_set;
  LocationTable table;
  size_t top = 20;  // rows shown (0: all)
  // memtrace-estimate's prediction, shown beside the measurement when given (--estimate).
  const Prediction* prediction = nullptr;
  // The reads of device values by line (deviceReadRows) and the first OOM (analyzeOom).
  std::vector<DeviceReadRow> device_reads;
  // The sizes the simulated libraries answered without knowing them, by line
  // (simulatedSizeRows).
  std::vector<SimulatedSizeRow> simulated_sizes;
  // The values the simulated run assumed where they decided the path, by line
  // (assumedValueRows).
  std::vector<AssumedValueRow> assumed_values;
  std::optional<OomReport> oom;
  // The user's line that holds most of the point, broken down (Note [One line holds the peak]).
  std::optional<LineBreakdown> dominant_line;
};

// Note [Saying a run was simulated]
// A trace made on memtrace's simulated GPU (Note [The simulated device] in records.h) is never
// shown as a card's: every view names the profile where it names the device (the text and
// JSON reports, the CSV, the HTML page's banner, the flame graph's title, a job's ranks, a
// diff's sides), with one sentence of what that means, and the reads of device values it made.
// The wording lives here, once, for all of them.
inline constexpr const char* kSimulatedMeaning =
    "memtrace's simulated GPU: sizes as on the card, no kernel ran, time not simulated";
inline constexpr const char* kDeviceReadsMeaning =
    "On the simulated device these read zeros, so what the program did after them (a loop ending "
    "at an end token, MoE routing, nonzero's size, a boolean mask) may differ from the card.";
inline constexpr const char* kSimulatedSizesMeaning =
    "The simulated libraries answered these sizes without knowing them (what the library decides "
    "on the card; Note [Sizes nobody measured] in simulator/core/sizes.cpp): the peak holds "
    "them as answered, and the device profile's measured_sizes (python -m mem_tracer.calibrate "
    "on a card) replaces them.";

inline constexpr const char* kAssumedValuesMeaning =
    "No kernel computed these; where the program read one to decide what to do next, the run "
    "took the memory's worst case where memtrace knows it (a loop goes on to its limit, a mask "
    "keeps everything, top-k keeps each row's first k), zero elsewhere (Note [Values where they "
    "decide the path], Note [Top-k keeps k]).";
// "SIMULATED: profile h200" (and ", 24.00 GiB set by the user" when it was).
std::string simulatedLabel(const reader::SimulatedDeviceInfo& simulated);
// The "simulated" object of the JSON views; null for a trace of a card.
nlohmann::json simulatedJson(const std::optional<reader::SimulatedDeviceInfo>& simulated);
// The reads of device values, as the JSON report has them.
nlohmann::json deviceReadsJson(const TraceSummary& summary, const std::vector<DeviceReadRow>& rows,
                               size_t top);
// The simulated sizes, as the JSON report has them.
nlohmann::json simulatedSizesJson(const TraceSummary& summary,
                                  const std::vector<SimulatedSizeRow>& rows, size_t top);
// The assumed values, as the JSON report has them.
nlohmann::json assumedValuesJson(const TraceSummary& summary,
                                 const std::vector<AssumedValueRow>& rows, size_t top);
// The OOM, as the JSON report has it (null without one).
nlohmann::json oomJson(const std::optional<OomReport>& oom, size_t top);

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
