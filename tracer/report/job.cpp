#include "tracer/report/job.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <thread>

#include "tracer/report/training.h"

namespace memtrace::report {
namespace {

bool isDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// Whether the file starts with the trace format's magic (a folder may hold other files: the
// HTML pages made of its traces, logs).
bool startsWithMagic(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  char magic[sizeof(format::kMagic)] = {};
  return file.read(magic, sizeof(magic)) && std::memcmp(magic, format::kMagic, sizeof(magic)) == 0;
}

// Reads the process record and the rank's, which the recorder writes right after it (Note [A
// job's ranks]): any other record ends the header, so that this costs one chunk, not a pass.
struct HeaderVisitor : reader::RecordVisitor {
  void onDistributed(const reader::DistributedInfo&) { finished = true; }
  void onString(uint32_t, std::string_view) { finished = true; }
  void onPythonFrame(uint32_t, const reader::PythonFrame&) { finished = true; }
  void onPythonStack(uint32_t, const reader::StackNode&) { finished = true; }
  void onNativeStack(uint32_t, const reader::NativeNode&) { finished = true; }
  void onLoadedObject(uint32_t, const reader::LoadedObject&) { finished = true; }
  void onDevice(const reader::Device&) { finished = true; }
  void onContext(const reader::Context&) { finished = true; }
  void onModuleScope(int64_t, uint32_t) { finished = true; }
  void onMarker(const reader::Marker&) { finished = true; }
  void onCategory(uint64_t, format::Category) { finished = true; }
  void onOwnerModule(uint64_t, uint32_t) { finished = true; }
  void onTrainingPhase(uint64_t, format::TrainingPhase) { finished = true; }
  void onStepEnd(uint64_t, uint64_t) { finished = true; }
  void onSimulatedDevice(const reader::SimulatedDeviceInfo&) { finished = true; }
  void onDeviceRead(const reader::DeviceRead&) { finished = true; }
  void onSection(const reader::Section&) { finished = true; }
  void onStepPeak(const reader::StepPeak&) { finished = true; }
  void onGeneratedCode(const reader::GeneratedCode&) { finished = true; }
  void onSimulatedSize(const reader::SimulatedSize&) { finished = true; }
  void onEvent(const reader::Event&) { finished = true; }
  bool done() const { return finished; }
  bool finished = false;
};

struct Header {
  std::string path;
  std::optional<reader::DistributedInfo> distributed;
};

Header readHeader(const std::string& path) {
  reader::TraceReader trace(path);
  HeaderVisitor visitor;
  trace.read(visitor);
  return Header{path, trace.tables().distributed};
}

// Pass 1 and 2 of one trace (and the timeline's pass for the page).
TracePeak readPeak(const std::string& path, const JobOptions& options) {
  reader::TraceReader trace(path);
  TracePeak rank;
  rank.path = path;
  rank.summary = summarize(trace, options.device, options.until);
  resolveTraining(trace, rank.summary);
  rank.distributed = trace.tables().distributed;
  rank.host = rank.summary.process.host_name;
  LiveSet live_set = liveSetAt(trace, rank.summary, Point{});
  for (GroupBy group_by : options.groupings)
    rank.tables.push_back(Locator(trace.tables(), group_by, options.frame).group(live_set));
  rank.categories = categoryBytes(live_set.allocations);
  if (const LiveAllocation* reached = live_set.lastAllocation()) {
    Locator lines(trace.tables(), GroupBy::kLine, options.frame);
    rank.peak_line = lines.describe(*reached).name;
    rank.peak_module = std::string(trace.tables().string(reached->module));
  }
  // The trace's peak is the peak of the step it lies in (both are checked after every
  // allocation), so that step names its phase.
  for (const StepSummary& step : rank.summary.steps) {
    if (step.peak_event == rank.summary.peak_event && rank.summary.allocations) {
      rank.peak_step = step.step;
      rank.peak_phase = step.peak_phase;
    }
  }
  if (options.timelines) {
    TimelineOptions timeline_options;
    timeline_options.lanes = 0;  // one lane: the rank's live bytes
    timeline_options.buckets = options.timeline_buckets;
    Locator locator(trace.tables(), options.groupings.front(), options.frame);
    rank.timeline =
        computeTimeline(trace, rank.summary, locator, rank.tables.front(), timeline_options);
  }
  return rank;
}

}  // namespace

std::vector<TracePeak> readPeaks(const std::vector<std::string>& paths, const JobOptions& options) {
  std::vector<TracePeak> ranks(paths.size());
  std::vector<std::exception_ptr> errors(paths.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < paths.size();) {
      try {
        ranks[i] = readPeak(paths[i], options);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  unsigned threads = options.threads ? options.threads : std::thread::hardware_concurrency();
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(paths.size())));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
  return ranks;
}

namespace {

std::string fileName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Note [Aligning the ranks' clocks]
// Each trace's times count from its own start (CLOCK_MONOTONIC when its file opened), and
// ProcessInfo holds that start on both CLOCK_MONOTONIC and the wall clock (CLOCK_REALTIME).
// The job's time axis starts at the earliest rank's start, and each rank is placed at its own
// start's distance from it: on one host by CLOCK_MONOTONIC, which every process of a host
// shares (exact, and blind to wall-clock steps); across hosts by the wall clock, as exact as
// the hosts' clocks agree (NTP keeps them within milliseconds). The ranks are aligned at the
// job's start, not at a collective: a rank's file opens at its first CUDA allocation, so a
// rank that starts allocating late starts late on the axis, as it did.
void alignClocks(JobReport& job) {
  job.one_host = true;
  for (const TracePeak& rank : job.ranks)
    job.one_host = job.one_host && rank.host == job.ranks.front().host;
  auto start = [&](const TracePeak& rank) {
    return job.one_host ? rank.summary.process.start_monotonic_ns
                        : rank.summary.process.start_unix_ns;
  };
  uint64_t earliest = UINT64_MAX;
  for (const TracePeak& rank : job.ranks) earliest = std::min(earliest, start(rank));
  for (TracePeak& rank : job.ranks) rank.offset_ns = start(rank) - earliest;
  job.alignment =
      job.one_host
          ? "at the job's start, by each process's CLOCK_MONOTONIC start on one host (exact)"
          : "at the job's start, by each host's wall clock at each process's start (as exact as "
            "the hosts' clocks agree: NTP keeps them within milliseconds)";
}

// Note [The job's module table].
void joinModules(JobReport& job) {
  std::vector<size_t> order{job.peak_rank};
  for (size_t i = 0; i < job.ranks.size(); ++i)
    if (i != job.peak_rank) order.push_back(i);
  std::map<std::string, size_t> index;  // a row's key -> its index in job.modules
  for (size_t rank : order) {
    for (const ModuleCategoryRow& row : job.ranks[rank].summary.peak_modules.rows) {
      std::string key = row.module.empty() ? "\n" + row.without_module : row.module;
      auto [found, added] = index.try_emplace(key, job.modules.size());
      if (added)
        job.modules.push_back(JobModuleRow{row.module, moduleName(row),
                                           std::vector<uint64_t>(job.ranks.size()),
                                           std::vector<CategoryBytes>(job.ranks.size())});
      JobModuleRow& joined = job.modules[found->second];
      joined.bytes[rank] += row.bytes;
      for (size_t c = 0; c < row.categories.size(); ++c)
        joined.categories[rank][c] += row.categories[c];
    }
  }
  if (job.ranks.size() < 2) return;
  constexpr double kShown = 0.001;  // 0.1 point of a rank's peak
  double widest = kShown;
  for (size_t r = 0; r < job.modules.size(); ++r) {
    ModuleShareDifference difference{r, 0, 0, -1.0, 2.0};
    for (size_t rank = 0; rank < job.ranks.size(); ++rank) {
      uint64_t peak = job.ranks[rank].summary.peak_bytes;
      if (!peak || job.ranks[rank].summary.peak_modules.rows.empty()) continue;
      double share = double(job.modules[r].bytes[rank]) / double(peak);
      if (share > difference.highest_share) {
        difference.highest_share = share;
        difference.highest = rank;
      }
      if (share < difference.lowest_share) {
        difference.lowest_share = share;
        difference.lowest = rank;
      }
    }
    // Ties (two modules' shares always move together when they are all a peak holds) go to
    // the row listed first: the peak rank's largest.
    double spread = difference.highest_share - difference.lowest_share;
    if (job.differing_module ? spread > widest + 1e-9 : spread >= widest) {
      widest = spread;
      job.differing_module = difference;
    }
  }
}

}  // namespace

std::string TracePeak::label() const {
  if (distributed && distributed->rank >= 0) return "rank " + std::to_string(distributed->rank);
  return fileName(path);
}

std::vector<std::string> traceFiles(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    if (!isDirectory(path)) {
      files.push_back(path);
      continue;
    }
    std::vector<std::string> found;
    if (DIR* directory = opendir(path.c_str())) {
      while (dirent* entry = readdir(directory)) {
        std::string file = path + (path.back() == '/' ? "" : "/") + entry->d_name;
        struct stat info;
        if (stat(file.c_str(), &info) == 0 && S_ISREG(info.st_mode) && startsWithMagic(file))
          found.push_back(file);
      }
      closedir(directory);
    }
    if (found.empty()) throw reader::TraceError(path + ": a folder without a memtrace trace");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

JobReport readJob(const std::vector<std::string>& paths, const JobOptions& options) {
  JobReport job;
  job.group_by = options.groupings.front();
  job.frame = options.frame;
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (paths[i] == paths[j]) throw reader::TraceError(paths[i] + " is given twice");
  // The headers first: which file is which rank's, and which attempt of it to read.
  std::vector<Header> headers;
  for (const std::string& path : paths) headers.push_back(readHeader(path));
  std::map<std::string, std::string> jobs;  // job id -> a file of it
  for (const Header& header : headers)
    if (header.distributed) jobs.emplace(header.distributed->job_id, header.path);
  if (jobs.size() > 1) {
    auto first = jobs.begin(), second = std::next(first);
    throw reader::TraceError("the traces belong to " + std::to_string(jobs.size()) + " jobs ('" +
                             first->first + "' in " + first->second + ", '" + second->first +
                             "' in " + second->second + "): give the traces of one job");
  }
  if (!jobs.empty()) job.job_id = jobs.begin()->first;
  std::map<int64_t, const Header*> latest;  // rank -> its latest attempt
  std::vector<std::string> chosen;
  for (const Header& header : headers) {
    if (!header.distributed || header.distributed->rank < 0) {
      chosen.push_back(header.path);
      continue;
    }
    const reader::DistributedInfo& rank = *header.distributed;
    job.world_size = std::max(job.world_size, rank.world_size);
    auto [found, added] = latest.try_emplace(rank.rank, &header);
    if (added) continue;
    const reader::DistributedInfo& other = *found->second->distributed;
    if (other.restart_count == rank.restart_count)
      throw reader::TraceError("two traces of rank " + std::to_string(rank.rank) + ", attempt " +
                               std::to_string(rank.restart_count) + ": " + found->second->path +
                               " and " + header.path);
    const Header* earlier = other.restart_count < rank.restart_count ? found->second : &header;
    if (earlier == found->second) found->second = &header;
    job.earlier_attempts.push_back(earlier->path);
  }
  for (const auto& [rank, header] : latest) chosen.push_back(header->path);
  for (int64_t rank = 0; rank < job.world_size; ++rank)
    if (!latest.count(rank)) job.missing_ranks.push_back(rank);
  std::sort(job.earlier_attempts.begin(), job.earlier_attempts.end());

  job.ranks = readPeaks(chosen, options);
  std::stable_sort(job.ranks.begin(), job.ranks.end(), [](const TracePeak& a, const TracePeak& b) {
    bool a_rank = a.rank() >= 0, b_rank = b.rank() >= 0;
    if (a_rank != b_rank) return a_rank;
    return a_rank ? a.rank() < b.rank() : a.path < b.path;
  });
  alignClocks(job);

  // The highest peak (the first rank of equal ones), and the median.
  std::vector<size_t> order(job.ranks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return job.ranks[a].summary.peak_bytes > job.ranks[b].summary.peak_bytes;
  });
  job.peak_rank = order.front();
  // The lower median of an even count: a peak some rank really had.
  job.median_rank = order[order.size() / 2];

  // The peak rank's table first, so that its rows lead, then indexed back by rank.
  std::vector<const LocationTable*> tables{&job.ranks[job.peak_rank].tables.front()};
  for (size_t i = 0; i < job.ranks.size(); ++i)
    if (i != job.peak_rank) tables.push_back(&job.ranks[i].tables.front());
  for (JoinedRow& row : joinRows(tables)) {
    if (!row.bytes[0]) break;  // the rows only other ranks have
    JoinedRow by_rank{row.location, std::vector<std::optional<uint64_t>>(job.ranks.size()),
                      std::vector<uint64_t>(job.ranks.size())};
    for (size_t i = 0, t = 1; i < job.ranks.size(); ++i) {
      size_t from = i == job.peak_rank ? 0 : t++;
      by_rank.bytes[i] = row.bytes[from];
      by_rank.counts[i] = row.counts[from];
    }
    job.rows.push_back(std::move(by_rank));
  }
  joinModules(job);
  return job;
}

}  // namespace memtrace::report
