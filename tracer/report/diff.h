// Two traces compared (memtrace-report diff A B): two runs, or two ranks of one job. Each is
// read at its own peak; the peaks, and per line, function, module and category what grew,
// shrank, appeared and went between what was live at A's peak and at B's. A pure analysis
// over the two event streams (job.h reads them); render_diff.h renders it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracer/report/job.h"

namespace memtrace::report {

enum class Change { kGrew, kShrank, kAppeared, kWent, kSame };
const char* changeName(Change change);  // "grew", "shrank", "appeared", "went", "same"

struct DiffRow {
  Location location;
  uint64_t a_bytes = 0;  // live at A's peak (0 when A has no such row)
  uint64_t b_bytes = 0;
  uint64_t a_count = 0;  // allocations
  uint64_t b_count = 0;
  Change change = Change::kSame;
  int64_t delta() const { return static_cast<int64_t>(b_bytes) - static_cast<int64_t>(a_bytes); }
};

struct DiffTable {
  GroupBy group_by = GroupBy::kLine;
  std::vector<DiffRow> rows;  // those that changed, the largest change first
  size_t unchanged = 0;       // rows with the same bytes in both
};

struct TraceDiff {
  TracePeak a;
  TracePeak b;
  std::vector<DiffTable> tables;  // one per grouping, as DiffOptions asked
};

// The groupings a diff shows by default.
inline const std::vector<GroupBy> kDiffGroupings = {GroupBy::kLine, GroupBy::kFunction,
                                                    GroupBy::kModule, GroupBy::kCategory};

// Reads both traces at their peaks (options.groupings: the tables to compare).
TraceDiff diffTraces(const std::string& a, const std::string& b, const JobOptions& options);

// B's peak over A's, in percent of A's (nullopt when A's is 0).
std::optional<double> peakChangePercent(const TraceDiff& diff);

}  // namespace memtrace::report
