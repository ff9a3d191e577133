#include "tools/common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace memtrace::tools {
namespace {

uint64_t bytesReadSoFar() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return 0;
}

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A pass shorter than this prints nothing. MEMTRACE_PROGRESS_DELAY_MS changes it (the
// tests set 0, so that even a small trace shows every pass).
int64_t quietMs() {
  const char* text = std::getenv("MEMTRACE_PROGRESS_DELAY_MS");
  return text && *text ? std::atoll(text) : 500;
}
constexpr auto kEvery = std::chrono::milliseconds(200);

}  // namespace

Progress::Progress(std::string tool, std::string file_name, uint64_t file_bytes)
    : tool_(std::move(tool)),
      file_name_(std::move(file_name)),
      file_bytes_(file_bytes),
      quiet_ms_(quietMs()) {
  enabled_ = isatty(STDERR_FILENO) == 1 && file_bytes_ > 0;
  if (enabled_) thread_ = std::thread([this] { run(); });
}

Progress::~Progress() {
  done();
}

void Progress::pass(const std::string& what) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  what_ = what;
  pass_start_bytes_ = bytesReadSoFar();
  pass_start_ms_ = nowMs();
  if (quiet_ms_ <= 0) show();
}

void Progress::show() {
  uint64_t read = bytesReadSoFar() - pass_start_bytes_;
  double share = std::min(1.0, static_cast<double>(read) / static_cast<double>(file_bytes_));
  std::fprintf(stderr, "\r\x1b[K%s: %s: %s %3.0f%%", tool_.c_str(), file_name_.c_str(),
               what_.c_str(), share * 100);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::done() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (shown_) std::fputs("\r\x1b[K", stderr);
  std::fflush(stderr);
}

void Progress::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, kEvery, [this] { return stopping_; })) {
    if (what_.empty() || nowMs() - pass_start_ms_ < quiet_ms_) continue;
    show();
  }
}

}  // namespace memtrace::tools
