// Joining tables of live allocations: the one way two views of memory speak of the same row
// (Note [Joining rows]). The estimate beside a trace (prediction.cpp), the ranks of a job
// (job.cpp) and two traces compared (diff.cpp) all join through it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracer/report/locations.h"

namespace memtrace::report {

// Note [Joining rows]
// A row is known by its key at the table's grain: a line by its file and line number (the
// estimator names no function for some lines, and a line is one place whatever its
// function), a function by its file and function, a file by its path, a module by its path,
// a category, a stack or any row that is not a Python frame (untraced, native, no stack) by
// its kind and the name the report prints. Rows of one table that share a key (two code
// objects on one line) are one row of the join, their bytes summed.
std::string rowKey(GroupBy group_by, const Location& location);

// A row of several tables joined: its location (from the first table that has it) and its
// bytes and allocations in each table (nullopt: the table has no such row).
struct JoinedRow {
  Location location;
  std::vector<std::optional<uint64_t>> bytes;
  std::vector<uint64_t> counts;
};

// The rows of `tables` (all grouped the same way), the first table's in its order (largest
// first), then those only in later tables, in the order those have them.
std::vector<JoinedRow> joinRows(const std::vector<const LocationTable*>& tables);

}  // namespace memtrace::report
