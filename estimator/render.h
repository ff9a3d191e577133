// Renderers: text for people, JSON for the report and the Python package
// (docs/estimate-format.md). They only format what the analyses computed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "estimator/device_profile.h"
#include "estimator/estimate.h"
#include "estimator/graph.h"

namespace memtrace::estimator {

// What a graph file says of the step it recorded (graph_file.h).
struct StepInfo {
  bool training = false;
  std::string model;
  std::string device;
  std::string profile;  // the profile whose kernels and optimizer the recording ran
  std::string optimizer;
  std::string optimizer_implementation;
  std::string loop;
  std::string loop_detail;
  int64_t accumulate = 1;
  std::string autocast;
  // --budget: whether the step fits a device of that size (the caching allocator replayed
  // there, releasing its cached segments and retrying as PyTorch does), and what breaks it.
  std::optional<int64_t> budget_bytes;
  bool fits_budget = false;
  std::string budget_breaker;  // budgetBreaker()'s answer
};

struct RenderOptions {
  std::string model_path;
  DeviceProfile profile;
  size_t rows = 10;              // text: rows per table (JSON lists everything)
  std::optional<StepInfo> step;  // graph files
};

std::string renderText(const Graph& graph, const Estimate& estimate, const RenderOptions& options);
std::string renderJson(const Graph& graph, const Estimate& estimate, const RenderOptions& options);

// The neutral graph itself, a node a line, with each value's storage and Python names: for
// finding out why an estimate is what it is.
std::string renderGraphText(const Graph& graph);

struct SweepPoint {
  int64_t batch = 0;
  std::vector<std::vector<int64_t>> input_shapes;
  Estimate estimate;
};

// What --budget asks: the largest batch whose forward the caching allocator replay gets
// through on a device of that size.
struct BudgetAnswer {
  int64_t budget_bytes = 0;
  int64_t search_limit = 0;
  std::optional<int64_t> largest_batch;  // none: batch 1 does not fit
  std::optional<SweepPoint> at_largest;
  // The first batch that does not fit (largest + 1, or 1), replayed without a limit: what it
  // asks for. None when the search stopped at its limit.
  std::optional<SweepPoint> at_next;
};

// Which figure of a replay breaks a budget: "requested" (the bytes the model asks for, before
// the allocator rounds them, are over it alone), "reserved" (they fit; the segments the caching
// allocator reserves for them do not), or "" (neither).
std::string budgetBreaker(const Estimate& estimate, int64_t budget_bytes);

std::string renderSweepText(const std::vector<SweepPoint>& points,
                            const std::optional<BudgetAnswer>& budget,
                            const RenderOptions& options);
std::string renderSweepJson(const std::vector<SweepPoint>& points,
                            const std::optional<BudgetAnswer>& budget,
                            const RenderOptions& options);

}  // namespace memtrace::estimator
