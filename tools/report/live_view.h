// memtrace-report live: a running process's trace (or a job's), followed in the terminal
// (Note [Following a running trace], tracer/report/live.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tracer/report/locations.h"

namespace memtrace::tools {

struct LiveOptions {
  // PIDs (the process's trace and its descendants': a torchrun job's ranks), trace files, or
  // folders of traces.
  std::vector<std::string> targets;
  report::GroupBy group_by = report::GroupBy::kLine;
  report::FramePolicy frame = report::FramePolicy::kUser;  // as every view (issue 30)
  size_t top = 0;         // rows; 0: as many as the terminal has room for
  double interval = 1.0;  // seconds between refreshes
  bool once = false;      // one frame, plain text, then exit
  bool json = false;      // with once: JSON instead of text
  double wait = 10.0;     // seconds to wait for a PID's trace to appear
};

// Runs the view until the user quits (q), or once. Returns the exit status.
int runLive(const LiveOptions& options);

}  // namespace memtrace::tools
