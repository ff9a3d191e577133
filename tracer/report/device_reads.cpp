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

}  // namespace memtrace::report
