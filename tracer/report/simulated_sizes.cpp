#include "tracer/report/simulated_sizes.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

namespace memtrace::report {

std::vector<SimulatedSizeRow> simulatedSizeRows(reader::TraceReader& trace,
                                                const TraceSummary& summary, FramePolicy frame) {
  const reader::Tables& tables = trace.tables();
  for (const SimulatedSizeSite& site : summary.simulated_sizes) {
    if (site.python_stack >= tables.python_stacks.size() ||
        site.native_stack >= tables.native_stacks.size() ||
        site.question >= tables.strings.size()) {
      reader::RecordVisitor whole;  // the tables of the whole trace
      trace.read(whole);
      break;
    }
  }
  Locator lines(tables, GroupBy::kLine, frame);
  std::vector<SimulatedSizeRow> rows;
  std::map<std::pair<std::string, uint32_t>, size_t> by_line;  // (line, question): its row
  for (const SimulatedSizeSite& site : summary.simulated_sizes) {
    LiveAllocation asked{0,  site.bytes,  site.python_stack, site.native_stack,
                         -1, site.traced, site.module};
    Location location = lines.describe(asked);
    auto [found, added] = by_line.try_emplace({location.name, site.question}, rows.size());
    if (added) {
      SimulatedSizeRow row;
      row.location = std::move(location);
      // The simulated core wrote the question; a damaged one is shown as it is.
      std::string question(tables.string(site.question));
      nlohmann::json parsed = nlohmann::json::parse(question, nullptr, false);
      if (parsed.is_object()) {
        row.library = parsed.value("library", "");
        row.call = parsed.value("call", "");
        row.shapes = parsed.contains("shapes") ? parsed["shapes"].dump() : "{}";
      } else {
        row.call = question;
      }
      rows.push_back(std::move(row));
    }
    SimulatedSizeRow& row = rows[found->second];
    row.count += site.count;
    row.bytes = std::max(row.bytes, site.bytes);
    row.at_most = std::max(row.at_most, site.at_most);
    row.certainty = std::max(row.certainty, site.certainty);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const SimulatedSizeRow& a, const SimulatedSizeRow& b) {
                     if (a.bytes != b.bytes) return a.bytes > b.bytes;
                     return a.count > b.count;
                   });
  return rows;
}

}  // namespace memtrace::report
