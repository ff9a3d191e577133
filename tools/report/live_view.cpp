#include "tools/report/live_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tools/common/cli.h"
#include "tracer/common/byte_format.h"
#include "tracer/format/records.h"
#include "tracer/report/job.h"
#include "tracer/report/live.h"

namespace memtrace::tools {
namespace {

using report::TraceFollower;

bool isNumber(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool startsWithMagic(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[8];
  bool yes = read(fd, magic, sizeof(magic)) == sizeof(magic) &&
             std::memcmp(magic, format::kMagic, sizeof(magic)) == 0;
  close(fd);
  return yes;
}

// The process's children, grandchildren, ... (a torchrun job's workers under its agent).
std::vector<pid_t> withDescendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* entry = readdir(proc)) {
      if (!isNumber(entry->d_name)) continue;
      std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
      std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      // pid (comm) state ppid ...: the comm may hold spaces and parentheses.
      size_t close = text.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(text.substr(close + 1));
      std::string state;
      pid_t parent = 0;
      rest >> state >> parent;
      children.emplace(parent, static_cast<pid_t>(std::atol(entry->d_name)));
    }
    closedir(proc);
  }
  std::vector<pid_t> all{root};
  for (size_t i = 0; i < all.size(); ++i) {
    auto [begin, end] = children.equal_range(all[i]);
    for (auto it = begin; it != end; ++it) all.push_back(it->second);
  }
  return all;
}

// The trace files a process has open (a mapped trace stays open, and mapped, while it runs).
std::vector<std::string> tracesOf(pid_t pid) {
  std::vector<std::string> traces;
  std::string folder = "/proc/" + std::to_string(pid) + "/fd";
  DIR* fds = opendir(folder.c_str());
  if (!fds) return traces;
  while (dirent* entry = readdir(fds)) {
    if (!isNumber(entry->d_name)) continue;
    char target[4096];
    ssize_t size = readlink((folder + "/" + entry->d_name).c_str(), target, sizeof(target) - 1);
    if (size <= 0) continue;
    target[size] = '\0';
    std::string path(target);
    // A flight recorder's file replaced by its compacted copy, or one being written.
    if (path.size() > 10 && path.compare(path.size() - 10, 10, " (deleted)") == 0) continue;
    if (path.find(".compacting") != std::string::npos || path.empty() || path[0] != '/') continue;
    struct stat info;
    if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    if (startsWithMagic(path)) traces.push_back(path);
  }
  closedir(fds);
  return traces;
}

bool processAlive(pid_t pid) {
  return kill(pid, 0) == 0 || errno == EPERM;
}

struct Followed {
  std::unique_ptr<TraceFollower> follower;
  std::string error;
  std::deque<uint64_t> history;  // live bytes at each refresh
};

// The terminal, while the view runs: the alternate screen, no cursor, keys read one by one.
class Terminal {
 public:
  explicit Terminal(bool interactive) : interactive_(interactive) {
    if (!interactive_) return;
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      // Ctrl-C comes as a key (3) and quits like q, so that the terminal is always restored.
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO | ISIG));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      raw_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    write("\x1b[?1049h\x1b[?25l");
  }
  ~Terminal() {
    if (!interactive_) return;
    write("\x1b[?25h\x1b[?1049l");
    if (raw_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  static void write(const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }
  void size(int* columns, int* rows) const {
    winsize window{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &window) == 0 && window.ws_col && window.ws_row) {
      *columns = window.ws_col;
      *rows = window.ws_row;
    } else {
      *columns = 120;
      *rows = 40;
    }
  }
  // The next key within `seconds` (0 when none came).
  int key(double seconds) const {
    pollfd input{STDIN_FILENO, POLLIN, 0};
    int timeout = static_cast<int>(seconds * 1000);
    if (!raw_) {
      usleep(static_cast<useconds_t>(timeout) * 1000);
      return 0;
    }
    if (poll(&input, 1, timeout) <= 0) return 0;
    unsigned char c = 0;
    if (read(STDIN_FILENO, &c, 1) != 1) return 0;
    if (c == 0x1b) {  // an arrow: ESC [ C or ESC [ D
      unsigned char rest[2] = {0, 0};
      if (read(STDIN_FILENO, rest, 2) == 2 && rest[0] == '[')
        return rest[1] == 'C' ? '>' : rest[1] == 'D' ? '<' : 0;
      return 0;
    }
    return c;
  }

 private:
  bool interactive_;
  bool raw_ = false;
  termios saved_{};
};

// The end of a location (the file's name and line) says more than its start.
std::string cutStart(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  if (width <= 3) return text.substr(0, width);
  return "..." + text.substr(text.size() - (width - 3));
}

// A line of the screen: as much of its start as the terminal holds (bytes, not columns: a
// sparkline's characters are three bytes each, and the line is cut short of the edge then).
std::string cutEnd(const std::string& text, size_t width) {
  return text.size() <= width ? text : text.substr(0, width);
}

std::string sparkline(const std::deque<uint64_t>& history, size_t width) {
  static const char* const kBars[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  uint64_t high = 0;
  for (uint64_t value : history) high = std::max(high, value);
  std::string line;
  size_t skip = history.size() > width ? history.size() - width : 0;
  for (size_t i = skip; i < history.size(); ++i) {
    size_t level = high ? static_cast<size_t>((history[i] * 8 + high - 1) / high) : 0;
    line += kBars[std::min<size_t>(level, 8)];
  }
  return line;
}

std::string seconds(uint64_t ns) {
  return fmt::format("{:.3f} s", static_cast<double>(ns) / 1e9);
}

std::string label(const TraceFollower& follower) {
  if (const auto& rank = follower.rank(); rank && rank->rank >= 0)
    return fmt::format("rank {}", rank->rank);
  return fmt::format("pid {}", follower.process().pid);
}

struct View {
  bool by_module = false;
  size_t selected = 0;
};

std::string frame(const std::vector<Followed*>& followed, const View& view,
                  const LiveOptions& options, int columns, int rows, bool plain,
                  const std::string& waiting) {
  std::string out;
  auto line = [&](const std::string& text) {
    bool sparkline = text.rfind("Live bytes ", 0) == 0;
    out += sparkline ? text : cutEnd(text, static_cast<size_t>(columns));
    out += plain ? "\n" : "\x1b[K\r\n";
  };
  if (followed.empty()) {
    line("memtrace live: " + waiting);
    line("");
    line("q quits");
    return out;
  }
  const Followed& shown = *followed[std::min(view.selected, followed.size() - 1)];
  const TraceFollower& follower = *shown.follower;
  std::string command;
  for (const std::string& argument : follower.process().command_line)
    command += (command.empty() ? "" : " ") + argument;
  line(fmt::format("memtrace live  {}  {}", label(follower), command));
  line(fmt::format("trace {}{}  {}", follower.path(), follower.flight() ? " (flight recorder)" : "",
                   follower.ended() ? "ended" : "running"));
  if (!shown.error.empty()) line("  " + shown.error);
  line(fmt::format("Now {}   Peak {} at {}   {} events   {} live allocations   at {}",
                   formatBytes(follower.currentBytes()), formatBytes(follower.peakBytes()),
                   seconds(follower.peakTimeNs()), follower.events(), follower.liveAllocations(),
                   seconds(follower.timeNs())));
  if (!plain)
    line("Live bytes " + sparkline(shown.history, static_cast<size_t>(std::max(columns - 12, 10))));
  int used = plain ? 4 : 5;
  if (followed.size() > 1) {
    line("");
    line(fmt::format("  {:<10} {:>12} {:>12} {:>12}", "", "Now", "Peak", "Events"));
    for (size_t i = 0; i < followed.size(); ++i) {
      const TraceFollower& other = *followed[i]->follower;
      line(fmt::format("{} {:<10} {:>12} {:>12} {:>12}", i == view.selected ? ">" : " ",
                       label(other), formatBytes(other.currentBytes()),
                       formatBytes(other.peakBytes()), other.events()));
    }
    used += 2 + static_cast<int>(followed.size());
  }
  line("");
  std::string what = view.by_module ? "nn.Module" : report::groupByName(options.group_by);
  if (!view.by_module && options.frame == report::FramePolicy::kUser) what += " in user code";
  size_t room = static_cast<size_t>(std::max(rows - used - 4, 3));
  size_t top = options.top ? options.top : plain ? 20 : room;
  std::vector<report::LiveRow> table = follower.rows(view.by_module, top);
  size_t name_width = static_cast<size_t>(std::max(columns - 40, 20));
  line(fmt::format("{:<{}} {:>11} {:>11} {:>7}", "Location (by " + what + ")", name_width, "Now",
                   "At peak", "Count"));
  for (const report::LiveRow& row : table)
    line(fmt::format("{:<{}} {:>11} {:>11} {:>7}", cutStart(row.location, name_width), name_width,
                     formatBytes(row.bytes), formatBytes(row.peak_bytes), row.count));
  if (!plain) {
    for (size_t i = table.size(); i < room; ++i) line("");
    line(fmt::format("q quit   l by line   m by module{}   refreshed every {:.1f} s",
                     followed.size() > 1 ? "   < > rank" : "", options.interval));
  }
  return out;
}

nlohmann::json json(const std::vector<Followed*>& followed, const LiveOptions& options) {
  nlohmann::json traces = nlohmann::json::array();
  for (const Followed* one : followed) {
    const TraceFollower& follower = *one->follower;
    auto rows = [&](bool by_module) {
      nlohmann::json list = nlohmann::json::array();
      for (const report::LiveRow& row : follower.rows(by_module, options.top))
        list.push_back({{"location", row.location},
                        {"bytes", row.bytes},
                        {"count", row.count},
                        {"peak_bytes", row.peak_bytes},
                        {"peak_count", row.peak_count}});
      return list;
    };
    traces.push_back({{"path", follower.path()},
                      {"pid", follower.process().pid},
                      {"rank", follower.rank() ? nlohmann::json(follower.rank()->rank)
                                               : nlohmann::json(nullptr)},
                      {"current_bytes", follower.currentBytes()},
                      {"peak_bytes", follower.peakBytes()},
                      {"peak_time_ns", follower.peakTimeNs()},
                      {"time_ns", follower.timeNs()},
                      {"events", follower.events()},
                      {"live_allocations", follower.liveAllocations()},
                      {"ended", follower.ended()},
                      {"flight", follower.flight()},
                      {"by_location", rows(false)},
                      {"by_module", rows(true)},
                      {"error", one->error}});
  }
  return {{"traces", traces}};
}

}  // namespace

int runLive(const LiveOptions& options) {
  std::vector<pid_t> pids;
  std::vector<std::string> files, folders;
  for (const std::string& target : options.targets) {
    struct stat info;
    if (isNumber(target) && stat(target.c_str(), &info) != 0) {
      pid_t pid = static_cast<pid_t>(std::atol(target.c_str()));
      if (!processAlive(pid))
        throw UsageError("no process " + target + " (live takes a PID, a trace or a folder)");
      pids.push_back(pid);
    } else if (stat(target.c_str(), &info) != 0) {
      throw UsageError(target + " does not exist (live takes a PID, a trace or a folder)");
    } else if (S_ISDIR(info.st_mode)) {
      folders.push_back(target);
    } else {
      files.push_back(target);
    }
  }
  std::map<std::string, std::unique_ptr<Followed>> by_path;
  std::vector<Followed*> order;
  auto follow = [&](const std::string& path) {
    if (by_path.count(path)) return;
    auto followed = std::make_unique<Followed>();
    try {
      followed->follower = std::make_unique<TraceFollower>(path, options.group_by, options.frame);
    } catch (const reader::TraceError& error) {
      // A trace whose first chunk is not there yet: tried again at the next refresh.
      return;
    }
    order.push_back(followed.get());
    by_path.emplace(path, std::move(followed));
  };
  auto resolve = [&]() {
    for (const std::string& file : files) follow(file);
    for (const std::string& folder : folders) {
      try {
        for (const std::string& path : report::traceFiles({folder})) follow(path);
      } catch (const reader::TraceError&) {
        // No trace in it yet.
      }
    }
    for (pid_t pid : pids)
      for (pid_t process : withDescendants(pid))
        for (const std::string& path : tracesOf(process)) follow(path);
    // Ranks in order, then the others by path.
    std::stable_sort(order.begin(), order.end(), [](const Followed* a, const Followed* b) {
      auto key = [](const Followed* f) {
        const auto& rank = f->follower->rank();
        return rank && rank->rank >= 0 ? rank->rank : INT64_MAX;
      };
      return key(a) < key(b);
    });
  };
  std::string waiting = "waiting for " + fmt::format("{}", fmt::join(options.targets, " ")) +
                        " to write a trace (a process writes one at its first CUDA allocation)";
  auto started = std::chrono::steady_clock::now();
  resolve();
  while (options.once && order.empty()) {
    double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (waited > options.wait)
      throw UsageError("no trace found for " + fmt::format("{}", fmt::join(options.targets, " ")) +
                       " within " + fmt::format("{:g}", options.wait) + " s");
    usleep(100000);
    resolve();
  }
  Terminal terminal(!options.once);
  View view;
  for (;;) {
    for (Followed* followed : order) {
      try {
        followed->follower->poll();
        followed->error.clear();
      } catch (const reader::TraceError& error) {
        followed->error = error.what();
      }
      followed->history.push_back(followed->follower->currentBytes());
      if (followed->history.size() > 1000) followed->history.pop_front();
    }
    int columns, rows;
    terminal.size(&columns, &rows);
    if (options.once) {
      if (options.json)
        Terminal::write(json(order, options).dump(2) + "\n");
      else
        Terminal::write(frame(order, view, options, std::max(columns, 120), rows, true, waiting));
      return 0;
    }
    Terminal::write("\x1b[H" + frame(order, view, options, columns, rows, false, waiting) +
                    "\x1b[J");
    auto until = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<int>(options.interval * 1000));
    for (;;) {
      double left = std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count();
      if (left <= 0) break;
      int key = terminal.key(left);
      if (key == 'q' || key == 'Q' || key == 3) return 0;
      if (key == 'm') view.by_module = true;
      if (key == 'l') view.by_module = false;
      if (key == '>' && !order.empty()) view.selected = (view.selected + 1) % order.size();
      if (key == '<' && !order.empty())
        view.selected = (view.selected + order.size() - 1) % order.size();
      if (key) break;  // redraw at once
    }
    resolve();
  }
}

}  // namespace memtrace::tools
