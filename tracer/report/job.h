// A torch.distributed job read as one: the traces of its ranks (memtrace-report given a folder
// or several traces), each rank's peak and where it was, which rank peaks and by how much over
// the median rank, and the peak rank's table beside the other ranks' figures for the same rows.
// Pure analyses over the ranks' event streams, like analysis.h; render_job.h renders them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracer/reader/reader.h"
#include "tracer/report/analysis.h"
#include "tracer/report/join.h"
#include "tracer/report/locations.h"
#include "tracer/report/timeline.h"

namespace memtrace::report {

// The trace files `paths` name: a file as given, a folder as the memtrace traces in it (files
// that start with the trace format's magic), by name. Throws reader::TraceError for a folder
// without a trace.
std::vector<std::string> traceFiles(const std::vector<std::string>& paths);

// How traces are read at their peaks (a job's ranks, two traces compared).
struct JobOptions {
  std::vector<GroupBy> groupings{GroupBy::kLine};  // a table at the peak for each
  FramePolicy frame = FramePolicy::kUser;
  int device = kAllDevices;
  Until until = Until::kEnd;
  bool timelines = false;  // compute each rank's timeline too (the HTML page)
  size_t timeline_buckets = 2000;
  unsigned threads = 0;  // ranks read at once; 0: one per core
};

// One trace (a rank's) read at its peak, and where the job's time axis puts it.
struct TracePeak {
  std::string path;
  std::optional<reader::DistributedInfo> distributed;  // nullopt: the trace is no rank's
  std::string host;
  TraceSummary summary;  // training resolved (peak_modules: the module table at its peak)
  // What was live at its peak, grouped as JobOptions::groupings say, one table each.
  std::vector<LocationTable> tables;
  CategoryBytes categories{};  // at its peak (all unknown without training records)
  // The allocation that reached the peak: its line (under the frame policy) and nn.Module.
  std::string peak_line;
  std::string peak_module;
  // The training step and phase at the peak (step 0: the trace has no steps).
  uint64_t peak_step = 0;
  std::optional<format::TrainingPhase> peak_phase;
  uint64_t offset_ns = 0;  // where this trace's time 0 lies on the job's time axis
  Timeline timeline;       // with JobOptions::timelines

  int64_t rank() const { return distributed ? distributed->rank : -1; }
  std::string label() const;  // "rank 3", or the file's name for a trace that is no rank's
};

// Note [The job's module table]
// Each rank's module table at its own peak (Note [The module table]), joined by row: a
// module's path as cut for that rank's table, or what a row without module holds. The rows
// are the peak rank's first, largest first, then those only other ranks have. A module whose
// share of the peak differs between ranks is what tells the ranks apart (an uneven shard, a
// rank that alone holds a bucket NCCL keeps): the row whose share of its rank's peak differs
// most between two ranks is named, with both shares, where it differs by 0.1 point or more.
struct JobModuleRow {
  std::string module;  // "" for a row without module
  std::string name;    // as the report names it (moduleName: "<no module>", "model.h.* (x4)")
  std::vector<uint64_t> bytes;            // indexed like JobReport::ranks; 0 where a rank has none
  std::vector<CategoryBytes> categories;  // the same, by category
};
struct ModuleShareDifference {
  size_t row = 0;                  // index into JobReport::modules
  size_t highest = 0, lowest = 0;  // the ranks (indices) where its share is highest and lowest
  double highest_share = 0, lowest_share = 0;  // of those ranks' peaks, in [0, 1]
};

struct JobReport {
  std::vector<TracePeak> ranks;  // by rank; traces that are no rank's after them, by path
  std::string job_id;            // "" when the traces do not say
  int64_t world_size = -1;       // as the ranks say (-1: they do not)
  // Files of ranks that were restarted (elastic jobs): the earlier attempts, not read; each
  // rank is read from its latest attempt.
  std::vector<std::string> earlier_attempts;
  std::vector<int64_t> missing_ranks;  // ranks below the world size that have no trace
  size_t peak_rank = 0;                // index into ranks of the highest peak
  size_t median_rank = 0;              // index of the median peak (the lower one of an even count)
  // How the ranks' clocks were put on one axis (Note [Aligning the ranks' clocks]).
  bool one_host = false;
  std::string alignment;
  // The peak rank's rows (its first table, largest first) with every rank's bytes for the
  // same rows, indexed like `ranks` (Note [Joining rows]).
  std::vector<JoinedRow> rows;
  GroupBy group_by = GroupBy::kLine;
  FramePolicy frame = FramePolicy::kUser;
  // Every rank's module table (Note [The job's module table]); empty where no rank has training
  // records.
  std::vector<JobModuleRow> modules;
  std::optional<ModuleShareDifference> differing_module;
};

// Reads each of `paths` at its peak, on up to JobOptions::threads threads at once. Throws the
// first error (reader::TraceError) once all are read.
std::vector<TracePeak> readPeaks(const std::vector<std::string>& paths, const JobOptions& options);

// Reads the traces `paths` as one job. Throws reader::TraceError for a trace it cannot read,
// traces of two jobs, or two traces of one rank's same attempt.
JobReport readJob(const std::vector<std::string>& paths, const JobOptions& options);

}  // namespace memtrace::report
