#include "tracer/report/live.h"

#include <sys/stat.h>

#include <algorithm>

#include "tracer/reader/live_set.h"

namespace memtrace::report {

using reader::Allocation;
using reader::Event;

struct TraceFollower::Visitor : reader::LiveVisitor {
  explicit Visitor(TraceFollower& follower) : follower(follower), replay(*this) {}

  void onEvent(const Event& event) {
    ++follower.events_;
    follower.time_ns_ = std::max(follower.time_ns_, event.time_ns);
  }
  void onAlloc(const Event& event, const Allocation& allocation) {
    add(allocation, 1);
    follower.current_ += allocation.size;
    if (follower.current_ > follower.peak_) {  // Note [New peak]: strictly higher
      follower.peak_ = follower.current_;
      follower.peak_time_ns_ = event.time_ns;
      ++follower.peak_stamp_;
    }
  }
  void onFree(const Event&, const Allocation& freed) { remove(freed); }
  void onImpliedFree(const Event&, const Allocation& replaced) { remove(replaced); }
  void onMarker(const reader::Marker& marker) {
    follower.time_ns_ = std::max(follower.time_ns_, marker.time_ns);
    if (marker.kind == format::MarkerKind::kProcessExit ||
        marker.kind == format::MarkerKind::kTraceClosed)
      follower.ended_ = true;
  }
  void onSection(const reader::Section&) { follower.flight_ = true; }

  void add(const Allocation& allocation, int64_t sign) {
    follower.change(follower.by_location_, allocation, sign);
    follower.change(follower.by_module_, allocation, sign);
  }
  void remove(const Allocation& allocation) {
    add(allocation, -1);
    follower.current_ -= std::min(follower.current_, allocation.size);
  }

  TraceFollower& follower;
  reader::LiveReplay<Visitor> replay;
};

TraceFollower::TraceFollower(std::string path, GroupBy group_by, FramePolicy frame)
    : path_(std::move(path)), group_by_(group_by), frame_(frame) {
  start();
}

TraceFollower::~TraceFollower() = default;

void TraceFollower::start() {
  struct stat info;
  if (stat(path_.c_str(), &info) == 0) {
    device_ = info.st_dev;
    inode_ = info.st_ino;
  }
  visitor_.reset();
  reader_ = std::make_unique<reader::TraceReader>(path_);
  visitor_ = std::make_unique<Visitor>(*this);
  for (Grouping* grouping : {&by_location_, &by_module_}) {
    grouping->groups.clear();
    grouping->names.clear();
    grouping->by_name.clear();
    grouping->by_key.clear();
  }
  by_location_.group_by = group_by_;
  by_module_.group_by = GroupBy::kModule;
  by_location_.locator = std::make_unique<Locator>(reader_->tables(), group_by_, frame_);
  by_module_.locator = std::make_unique<Locator>(reader_->tables(), GroupBy::kModule, frame_);
  current_ = peak_ = peak_time_ns_ = time_ns_ = events_ = 0;
  peak_stamp_ = 1;
  ended_ = flight_ = false;
  reader_->read(visitor_->replay);
}

void TraceFollower::poll() {
  struct stat info;
  // A flight recorder's file replaced by its compacted copy (Note [Following a running trace]).
  if (stat(path_.c_str(), &info) == 0 && (info.st_ino != inode_ || info.st_dev != device_)) {
    start();
    return;
  }
  reader_->follow(visitor_->replay);
}

void TraceFollower::change(Grouping& grouping, const Allocation& allocation, int64_t sign) {
  uint64_t key = (uint64_t{allocation.python_stack} * 0x9e3779b97f4a7c15ULL) ^
                 (uint64_t{allocation.native_stack} << 20) ^ (uint64_t{allocation.module} << 42) ^
                 (allocation.traced ? 1 : 0);
  auto [found, inserted] = grouping.by_key.try_emplace(key, 0);
  if (inserted) {
    LiveAllocation described{0,
                             allocation.size,
                             allocation.python_stack,
                             allocation.native_stack,
                             allocation.device,
                             allocation.traced,
                             allocation.module,
                             allocation.category};
    std::string name = grouping.locator->describe(described).name;
    auto [named, new_name] = grouping.by_name.try_emplace(name, grouping.groups.size());
    if (new_name) {
      grouping.groups.emplace_back();
      grouping.names.push_back(name);
    }
    found->second = named->second;
  }
  Grouping::Group& group = grouping.groups[found->second];
  if (group.stamp != peak_stamp_) {
    // Unchanged since the last peak until now: what it holds is what it held there.
    group.peak_bytes = group.bytes;
    group.peak_count = group.count;
    group.stamp = peak_stamp_;
  }
  if (sign > 0) {
    group.bytes += allocation.size;
    ++group.count;
  } else {
    group.bytes -= std::min(group.bytes, allocation.size);
    group.count -= std::min<uint64_t>(group.count, 1);
  }
}

std::vector<LiveRow> TraceFollower::rowsOf(const Grouping& grouping, size_t top) const {
  std::vector<LiveRow> rows;
  for (size_t i = 0; i < grouping.groups.size(); ++i) {
    const Grouping::Group& group = grouping.groups[i];
    bool saved = group.stamp == peak_stamp_;
    LiveRow row{grouping.names[i], group.bytes, group.count, saved ? group.peak_bytes : group.bytes,
                saved ? group.peak_count : group.count};
    if (row.bytes || row.peak_bytes) rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const LiveRow& a, const LiveRow& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.peak_bytes != b.peak_bytes) return a.peak_bytes > b.peak_bytes;
    return a.location < b.location;
  });
  if (top && rows.size() > top) rows.resize(top);
  return rows;
}

std::vector<LiveRow> TraceFollower::rows(bool by_module, size_t top) const {
  return rowsOf(by_module ? by_module_ : by_location_, top);
}

const reader::ProcessInfo& TraceFollower::process() const {
  return reader_->tables().process;
}

const std::optional<reader::DistributedInfo>& TraceFollower::rank() const {
  return reader_->tables().distributed;
}

uint64_t TraceFollower::liveAllocations() const {
  return visitor_->replay.live().size();
}

}  // namespace memtrace::report
