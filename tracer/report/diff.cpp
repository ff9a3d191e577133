#include "tracer/report/diff.h"

#include <algorithm>
#include <cstdlib>

#include "tracer/report/join.h"

namespace memtrace::report {

const char* changeName(Change change) {
  switch (change) {
    case Change::kGrew:
      return "grew";
    case Change::kShrank:
      return "shrank";
    case Change::kAppeared:
      return "appeared";
    case Change::kWent:
      return "went";
    case Change::kSame:
      return "same";
  }
  return "?";
}

TraceDiff diffTraces(const std::string& a, const std::string& b, const JobOptions& options) {
  std::vector<TracePeak> peaks = readPeaks({a, b}, options);
  TraceDiff diff{std::move(peaks[0]), std::move(peaks[1]), {}};
  for (size_t g = 0; g < options.groupings.size(); ++g) {
    DiffTable table;
    table.group_by = options.groupings[g];
    for (const JoinedRow& joined : joinRows({&diff.a.tables[g], &diff.b.tables[g]})) {
      DiffRow row;
      row.location = joined.location;
      row.a_bytes = joined.bytes[0].value_or(0);
      row.b_bytes = joined.bytes[1].value_or(0);
      row.a_count = joined.counts[0];
      row.b_count = joined.counts[1];
      if (!joined.bytes[0])
        row.change = Change::kAppeared;
      else if (!joined.bytes[1])
        row.change = Change::kWent;
      else if (row.b_bytes > row.a_bytes)
        row.change = Change::kGrew;
      else if (row.b_bytes < row.a_bytes)
        row.change = Change::kShrank;
      if (row.change == Change::kSame)
        ++table.unchanged;
      else
        table.rows.push_back(std::move(row));
    }
    std::stable_sort(table.rows.begin(), table.rows.end(), [](const DiffRow& x, const DiffRow& y) {
      return std::llabs(x.delta()) > std::llabs(y.delta());
    });
    diff.tables.push_back(std::move(table));
  }
  return diff;
}

std::optional<double> peakChangePercent(const TraceDiff& diff) {
  uint64_t a = diff.a.summary.peak_bytes;
  if (!a) return std::nullopt;
  return 100.0 * (static_cast<double>(diff.b.summary.peak_bytes) - static_cast<double>(a)) /
         static_cast<double>(a);
}

}  // namespace memtrace::report
