#include "tracer/report/join.h"

#include <unordered_map>

namespace memtrace::report {

std::string rowKey(GroupBy group_by, const Location& location) {
  std::string key = locationKindName(location.kind);
  key += '\0';
  if (location.kind == LocationKind::kPython && group_by != GroupBy::kStack) {
    key += location.file;
    if (group_by == GroupBy::kLine) key += '\0' + std::to_string(location.line);
    if (group_by == GroupBy::kFunction) key += '\0' + location.function;
    return key;
  }
  if (location.kind == LocationKind::kModule) return key + location.module;
  return key + location.name;
}

std::vector<JoinedRow> joinRows(const std::vector<const LocationTable*>& tables) {
  std::vector<JoinedRow> joined;
  std::unordered_map<std::string, size_t> index_of;
  for (size_t t = 0; t < tables.size(); ++t) {
    for (const TableRow& row : tables[t]->rows) {
      auto [found, added] =
          index_of.try_emplace(rowKey(tables[t]->group_by, row.location), joined.size());
      if (added) {
        joined.push_back(JoinedRow{row.location,
                                   std::vector<std::optional<uint64_t>>(tables.size()),
                                   std::vector<uint64_t>(tables.size())});
      }
      JoinedRow& entry = joined[found->second];
      entry.bytes[t] = entry.bytes[t].value_or(0) + row.bytes;
      entry.counts[t] += row.count;
    }
  }
  return joined;
}

}  // namespace memtrace::report
