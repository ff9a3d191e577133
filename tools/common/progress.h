// Progress of long reads on stderr, only when stderr is a terminal: memtrace-report's passes
// over a trace, memtrace-estimate's load of a model.
//
// Note [Progress from the outside]
// The analyses read the trace through TraceReader, one full or partial pass each, without
// a hook for progress, and should not need one (nor does LibTorch's model loader). So progress is
// measured from outside: a thread reads the bytes this process has read so far (rchar in
// /proc/self/io) every 200 ms, and the share of the trace file that makes since the pass began. It
// is an estimate (symbolization reads debug files too; it is clamped to 100 %) and costs the reads
// nothing. Nothing is printed unless stderr is a terminal, nor for a pass that ends within half a
// second (MEMTRACE_PROGRESS_DELAY_MS sets another delay; 0 prints each pass as it begins).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace memtrace::tools {

class Progress {
 public:
  // `tool` starts each line; `file_bytes`: the size of the file `file_name` each pass reads
  // (at most) once.
  Progress(std::string tool, std::string file_name, uint64_t file_bytes);
  ~Progress();  // erases the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A new pass over the file begins; `what` says what it is for ("finding the peak").
  void pass(const std::string& what);
  void done();  // the reading is over: erase the line

  // Whether progress is shown at all (stderr is a terminal).
  bool enabled() const { return enabled_; }

 private:
  void run();
  void show();  // with mutex_ held

  std::string tool_;
  std::string file_name_;
  uint64_t file_bytes_;
  int64_t quiet_ms_;
  bool enabled_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool shown_ = false;
  std::string what_;
  uint64_t pass_start_bytes_ = 0;
  int64_t pass_start_ms_ = 0;
  std::thread thread_;
};

}  // namespace memtrace::tools
