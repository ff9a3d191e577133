#include "tracer/report/device_reads.h"

#include <algorithm>
#include <unordered_map>

namespace memtrace::report {

std::vector<DeviceReadRow> deviceReadRows(reader::TraceReader& trace, const TraceSummary& summary,
                                          FramePolicy frame) {
  const reader::Tables& tables = trace.tables();
  for (const DeviceReadSite& site : summary.device_reads) {
    if (site.python_stack >= tables.python_stacks.size() ||
        site.native_stack >= tables.native_stacks.size()) {
      reader::RecordVisitor whole;  // the tables of the whole trace
      trace.read(whole);
      break;
    }
  }
  Locator lines(tables, GroupBy::kLine, frame);
  std::vector<DeviceReadRow> rows;
  std::unordered_map<std::string, size_t> by_name;  // sites that share a line share a row
  for (const DeviceReadSite& site : summary.device_reads) {
    LiveAllocation read{0,  site.bytes,  site.python_stack, site.native_stack,
                        -1, site.traced, site.module};
    Location location = lines.describe(read);
    auto [found, added] = by_name.try_emplace(location.name, rows.size());
    if (added) rows.push_back(DeviceReadRow{std::move(location), 0, 0});
    rows[found->second].count += site.count;
    rows[found->second].bytes += site.bytes;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const DeviceReadRow& a, const DeviceReadRow& b) {
    if (a.count != b.count) return a.count > b.count;
    return a.bytes > b.bytes;
  });
  return rows;
}

std::vector<AssumedValueRow> assumedValueRows(reader::TraceReader& trace,
                                              const TraceSummary& summary, FramePolicy frame) {
  const reader::Tables& tables = trace.tables();
  for (const AssumedValueSite& site : summary.assumed_values) {
    if (site.python_stack >= tables.python_stacks.size() ||
        site.native_stack >= tables.native_stacks.size() || site.assumed >= tables.strings.size()) {
      reader::RecordVisitor whole;  // the tables of the whole trace
      trace.read(whole);
      break;
    }
  }
  Locator lines(tables, GroupBy::kLine, frame);
  std::vector<AssumedValueRow> rows;
  // Sites that share a line and what they assumed share a row.
  std::unordered_map<std::string, size_t> by_name;
  for (const AssumedValueSite& site : summary.assumed_values) {
    LiveAllocation value{0, 0, site.python_stack, site.native_stack, -1, site.traced, site.module};
    Location location = lines.describe(value);
    std::string assumed(tables.strings[site.assumed]);
    auto [found, added] = by_name.try_emplace(location.name + '\0' + assumed, rows.size());
    if (added) rows.push_back(AssumedValueRow{std::move(location), std::move(assumed), 0});
    rows[found->second].count += site.count;
  }
  std::stable_sort(
      rows.begin(), rows.end(),
      [](const AssumedValueRow& a, const AssumedValueRow& b) { return a.count > b.count; });
  return rows;
}

}  // namespace memtrace::report
