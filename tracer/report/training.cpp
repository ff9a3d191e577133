#include "tracer/report/training.h"

#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tracer/common/byte_format.h"

namespace memtrace::report {
namespace {

using format::Category;

constexpr size_t kCategories = static_cast<size_t>(Category::kCount);

// The order the report lists categories in: what persists across steps first.
constexpr Category kOrder[] = {
    Category::kParameter, Category::kGradient,  Category::kOptimizerState, Category::kActivation,
    Category::kInput,     Category::kTemporary, Category::kUnknown};
static_assert(sizeof(kOrder) / sizeof(kOrder[0]) == kCategories);

uint64_t bytesOf(const CategoryBytes& bytes, Category category) {
  return bytes[static_cast<size_t>(category)];
}

std::string breakdownText(const CategoryBytes& bytes) {
  std::string text;
  for (Category category : kOrder) {
    if (!bytesOf(bytes, category)) continue;
    if (!text.empty()) text += ", ";
    text +=
        fmt::format("{} {}", format::categoryName(category), formatBytes(bytesOf(bytes, category)));
  }
  return text.empty() ? "-" : text;
}

nlohmann::json breakdownJson(const CategoryBytes& bytes) {
  nlohmann::json object = nlohmann::json::object();
  for (Category category : kOrder)
    object[format::categoryName(category)] = bytesOf(bytes, category);
  return object;
}

uint64_t sum(const CategoryBytes& bytes) {
  uint64_t total = 0;
  for (uint64_t size : bytes) total += size;
  return total;
}

// The module x category table at the peak (Note [The module table]): the categories the peak
// holds as columns, the modules as rows, and their total, which is the categories line. With
// an estimate's cells (Note [Predicted module cells]), a line beneath each row gives the
// prediction in the same columns, "=" where it is the measured figure to the byte: a second
// figure in each cell ("1.234 GiB / 1.250 GiB") would double a table that is 100 columns wide
// with four categories, and a table of differences alone would hide what was predicted.
void renderModuleTable(std::ostream& out, const TraceSummary& s, const Prediction* prediction) {
  const ModuleCategoryTable& table = s.peak_modules;
  if (table.rows.empty()) return;
  PredictedModuleTable predicted;
  if (prediction) predicted = predictedModuleTable(*prediction, table);
  bool beside = !predicted.rows.empty();
  std::vector<Category> columns;
  for (Category category : kOrder)
    if (bytesOf(s.peak_categories, category) || (beside && bytesOf(predicted.total, category)))
      columns.push_back(category);
  out << fmt::format(
      "\nBy module at the peak (paths cut to {} named part{}, * for repeated blocks):\n",
      table.depth, table.depth == 1 ? "" : "s");
  if (beside)
    out << "  beneath each row, the estimate's prediction where it peaks (= the same to the byte; "
           "--format json has both)\n";
  std::string header = fmt::format("  {:>10}", "total");
  for (Category category : columns)
    header += fmt::format("  {:>15}", format::categoryName(category));
  out << header << fmt::format("  {}\n", "module");
  auto line = [&](uint64_t total, const CategoryBytes& bytes, const std::string& name) {
    std::string text = fmt::format("  {:>10}", formatBytes(total));
    for (Category category : columns) {
      uint64_t value = bytesOf(bytes, category);
      text += fmt::format("  {:>15}", value ? formatBytes(value) : "-");
    }
    out << text << fmt::format("  {}\n", name);
  };
  auto predictedLine = [&](uint64_t total, const CategoryBytes& measured,
                           const std::optional<CategoryBytes>& cells) {
    if (!cells) {
      out << fmt::format("  {:>10}  (the estimate does not speak to this row)\n", "");
      return;
    }
    auto cell = [](uint64_t value, uint64_t against) {
      return value == against ? std::string("=") : value ? formatBytes(value) : std::string("-");
    };
    std::string text = fmt::format("  {:>10}", cell(sum(*cells), total));
    for (Category category : columns)
      text += fmt::format("  {:>15}", cell(bytesOf(*cells, category), bytesOf(measured, category)));
    out << text << "    predicted\n";
  };
  uint64_t total = 0;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const ModuleCategoryRow& row = table.rows[i];
    line(row.bytes, row.categories, moduleName(row));
    if (beside) predictedLine(row.bytes, row.categories, predicted.rows[i]);
    total += row.bytes;
  }
  for (const ModuleCategoryRow& row : predicted.unmatched)
    line(row.bytes, row.categories, moduleName(row) + " (predicted only: nothing measured)");
  line(total, s.peak_categories, "(all: the categories line)");
  if (beside) predictedLine(total, s.peak_categories, predicted.total);
}

std::string seconds(uint64_t ns) {
  return fmt::format("{:.3f} s", double(ns) / 1e9);
}

}  // namespace

void renderTrainingText(std::ostream& out, const TraceSummary& s, const Prediction* prediction) {
  if (!s.training) return;
  out << fmt::format("Categories at the peak: {}\n", breakdownText(s.peak_categories));
  if (s.categories_ignored)
    out << fmt::format(
        "  note       {} of {} categories named no allocation's start (tensors inside "
        "segments of PyTorch's caching allocator are not told apart)\n",
        s.categories_ignored, s.categories_told);
  renderModuleTable(out, s, prediction);
  if (s.steps.empty()) {
    out << "\n";
    return;
  }
  out << fmt::format("\nSteps ({}):\n", s.steps.size());
  out << fmt::format("  {:>5}  {:>10}  {:>9}  {:<9}  {:<28}  {}\n", "step", "peak", "at", "phase",
                     "module", "at the peak");
  // A long run's steps (a flight recorder's file keeps a week's): the first, the highest and
  // the last ones; the JSON report lists every step.
  constexpr size_t kShown = 40;
  size_t highest = 0;
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (s.steps[i].peak_bytes > s.steps[highest].peak_bytes) highest = i;
  bool cut = s.steps.size() > kShown;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    bool shown = !cut || i < kShown / 2 || i + kShown / 2 >= s.steps.size() || i == highest;
    if (!shown) {
      if (i == kShown / 2 || i == highest + 1)
        out << fmt::format("  {:>5}  ... ({} steps in all; --format json lists every one)\n", "",
                           s.steps.size());
      continue;
    }
    const StepSummary& step = s.steps[i];
    std::string number = std::to_string(step.step) + (step.finished ? "" : "*");
    out << fmt::format(
        "  {:>5}  {:>10}  {:>9}  {:<9}  {:<28}  {}\n", number, formatBytes(step.peak_bytes),
        seconds(step.peak_time_ns), format::trainingPhaseName(step.peak_phase),
        step.peak_module.empty() ? "-" : step.peak_module, breakdownText(step.peak_categories));
  }
  if (!s.steps.back().finished)
    out << "  * unfinished: the trace ended before this step's optimizer step\n";
  // The first step creates the optimizer's state (Adam's moments, SGD's momentum): it stays
  // live from then on, so every later step's peak carries it and the first step's does not
  // (or only part of it).
  if (s.steps.size() >= 2) {
    const StepSummary& first = s.steps[0];
    const StepSummary& second = s.steps[1];
    uint64_t state = bytesOf(second.peak_categories, Category::kOptimizerState);
    int64_t difference = int64_t(second.peak_bytes) - int64_t(first.peak_bytes);
    if (state)
      out << fmt::format(
          "  step 1 created the optimizer state: {}, live at step 2's peak and in every step "
          "after (step 2's peak is {} {} step 1's)\n",
          formatBytes(state), formatBytes(uint64_t(std::abs(difference))),
          difference < 0 ? "below" : "above");
  }
  out << "\n";
}

std::string moduleName(const ModuleCategoryRow& row) {
  if (row.module.empty()) return row.without_module;
  return row.count > 1 ? fmt::format("{} (x{})", row.module, row.count) : row.module;
}

nlohmann::json moduleTableJson(const ModuleCategoryTable& table,
                               const PredictedModuleTable* predicted) {
  bool beside = predicted && !predicted->rows.empty();
  auto cellsJson = [](const CategoryBytes& cells) {
    return nlohmann::json{{"bytes", sum(cells)}, {"categories", breakdownJson(cells)}};
  };
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const ModuleCategoryRow& row = table.rows[i];
    nlohmann::json entry = {{"module", row.module},
                            {"location", moduleName(row)},
                            {"count", row.count},
                            {"bytes", row.bytes},
                            {"categories", breakdownJson(row.categories)}};
    if (beside)
      entry["predicted"] =
          predicted->rows[i] ? cellsJson(*predicted->rows[i]) : nlohmann::json(nullptr);
    rows.push_back(std::move(entry));
  }
  nlohmann::json result = {{"depth", table.depth}, {"rows", rows}};
  if (beside) {
    nlohmann::json only = nlohmann::json::array();
    for (const ModuleCategoryRow& row : predicted->unmatched) {
      nlohmann::json entry = cellsJson(row.categories);
      entry["module"] = row.module;
      entry["location"] = moduleName(row);
      only.push_back(std::move(entry));
    }
    result["predicted_only"] = std::move(only);
    result["predicted_total"] = cellsJson(predicted->total);
  }
  return result;
}

nlohmann::json trainingJson(const TraceSummary& s, const Prediction* prediction) {
  if (!s.training) return nullptr;
  PredictedModuleTable predicted;
  if (prediction) predicted = predictedModuleTable(*prediction, s.peak_modules);
  nlohmann::json steps = nlohmann::json::array();
  for (const StepSummary& step : s.steps)
    steps.push_back({{"step", step.step},
                     {"finished", step.finished},
                     {"begin_ns", step.begin_ns},
                     {"end_ns", step.end_ns},
                     {"peak_bytes", step.peak_bytes},
                     {"peak_time_ns", step.peak_time_ns},
                     {"peak_phase", format::trainingPhaseName(step.peak_phase)},
                     {"peak_module", step.peak_module},
                     {"categories", breakdownJson(step.peak_categories)}});
  nlohmann::json training = {{"categories_at_peak", breakdownJson(s.peak_categories)},
                             {"modules_at_peak", moduleTableJson(s.peak_modules, &predicted)},
                             {"categories_told", s.categories_told},
                             {"categories_ignored", s.categories_ignored},
                             {"steps", steps}};
  if (s.steps.size() >= 2 && bytesOf(s.steps[1].peak_categories, Category::kOptimizerState)) {
    training["first_step"] = {
        {"optimizer_state_bytes", bytesOf(s.steps[1].peak_categories, Category::kOptimizerState)},
        {"peak_difference_bytes", int64_t(s.steps[1].peak_bytes) - int64_t(s.steps[0].peak_bytes)}};
  }
  return training;
}

}  // namespace memtrace::report
