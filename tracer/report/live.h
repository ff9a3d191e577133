// Following a trace while its process still writes it (memtrace-report live; memtrace live):
// the bytes live now and at the peak so far, by location, updated from the records written
// since the last look. An analysis over the reader's event stream like analysis.h's, but
// incremental: each poll() reads only what is new (TraceReader::follow), and memory is the
// live set and the locations, never the file.
//
// Note [Following a running trace]
// A mapped trace holds every record the moment it is written (Note [Records reach the page
// cache as they are written]), so a reader in another process sees the run as it goes, with
// nothing asked of the traced process: no socket, no thread, no signal (memray's live mode
// has the tracker send its records over a socket instead, which costs the process its sends
// and makes it wait for the viewer to connect). A viewer polls the file; whatever it does,
// the process runs as it would without it. A flight recorder's file is replaced by its
// compacted copy now and then (Note [The flight recorder's file]): the viewer sees the path
// name another file and starts over on it, which reads as the same run (the copy's sections
// stand for the events it dropped).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tracer/reader/live_set.h"
#include "tracer/reader/reader.h"
#include "tracer/report/locations.h"

namespace memtrace::report {

struct LiveRow {
  std::string location;
  uint64_t bytes = 0;       // live now
  uint64_t count = 0;       // allocations live now
  uint64_t peak_bytes = 0;  // live at the peak so far
  uint64_t peak_count = 0;
};

class TraceFollower {
 public:
  TraceFollower(std::string path, GroupBy group_by, FramePolicy frame);
  ~TraceFollower();
  TraceFollower(const TraceFollower&) = delete;
  TraceFollower& operator=(const TraceFollower&) = delete;

  // Reads what was written since the last poll (starting over when the path names another
  // file now). Throws reader::TraceError for a file that is not a trace or is damaged.
  void poll();

  const std::string& path() const { return path_; }
  const reader::ProcessInfo& process() const;
  const std::optional<reader::DistributedInfo>& rank() const;
  uint64_t currentBytes() const { return current_; }
  uint64_t peakBytes() const { return peak_; }
  uint64_t peakTimeNs() const { return peak_time_ns_; }
  uint64_t timeNs() const { return time_ns_; }  // the last record's time, since the start
  uint64_t events() const { return events_; }
  uint64_t liveAllocations() const;
  bool ended() const { return ended_; }  // an exit or close mark was read
  bool flight() const { return flight_; }
  // The locations by line (as the constructor's `group_by` and `frame` say) or by nn.Module,
  // largest now first (then largest at the peak); `top` 0: all.
  std::vector<LiveRow> rows(bool by_module, size_t top) const;

 private:
  struct Visitor;
  // One grouping's locations. Note [The peak's rows without copying the live set]: a group's
  // bytes at the peak are its bytes when the last peak was reached, kept lazily: a group
  // changed since that peak saved its bytes of then first (its stamp says which peak), a group
  // not changed since still holds them. O(1) per event, whatever the number of locations.
  struct Grouping {
    struct Group {
      uint64_t bytes = 0;
      uint64_t count = 0;
      uint64_t peak_bytes = 0;
      uint64_t peak_count = 0;
      uint64_t stamp = 0;  // the peak its peak_* were saved at
    };
    std::unique_ptr<Locator> locator;
    GroupBy group_by = GroupBy::kLine;
    std::vector<Group> groups;
    std::vector<std::string> names;
    std::unordered_map<std::string, size_t> by_name;
    // Allocations are keyed by what names them (stacks, module, traced), so that a location
    // is described once, not once per event.
    std::unordered_map<uint64_t, size_t> by_key;
  };
  void start();
  void change(Grouping& grouping, const reader::Allocation& allocation, int64_t sign);
  std::vector<LiveRow> rowsOf(const Grouping& grouping, size_t top) const;

  std::string path_;
  GroupBy group_by_;
  FramePolicy frame_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  std::unique_ptr<reader::TraceReader> reader_;
  std::unique_ptr<Visitor> visitor_;
  Grouping by_location_;
  Grouping by_module_;
  uint64_t current_ = 0;
  uint64_t peak_ = 0;
  uint64_t peak_time_ns_ = 0;
  uint64_t peak_stamp_ = 1;
  uint64_t time_ns_ = 0;
  uint64_t events_ = 0;
  bool ended_ = false;
  bool flight_ = false;
};

}  // namespace memtrace::report
