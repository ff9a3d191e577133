// The reports the library writes itself, beside the trace.
//
// Note [Reports the library writes itself]
// A week-long job that runs out of memory at 3 a.m. should leave the answer where its log is,
// without anyone running memtrace-report on a trace that may be on another machine. So when an
// allocation fails, the recorder writes TRACE.oom.txt: the failing request (its size, device,
// entry point, its Python stack and nn.Module), and what was live then, by line and by
// module, from the live table (LiveBlock carries each allocation's stacks as ids of the
// file's tables, and the writer keeps the tables by id). It is written after each failed
// allocation (PyTorch's caching allocator frees its cache and retries, so the first refusal
// may not be the last), under the recorder's lock, with mmap'd tables and no malloc: a program
// that is out of device memory may be out of host memory too. The report is written to a
// temporary name and renamed, so a reader sees a whole one.
// The same report of what is live now is written on a signal (MEMTRACE_SNAPSHOT_SIGNAL, USR1
// by default) as TRACE.snapshot-N.txt, with an annotation "memtrace snapshot N" in the trace
// at that moment (memtrace-report --at reaches it). The handler only sets a flag (nothing but
// that is async-signal-safe); the flusher thread writes the snapshot within its period. The
// handler is installed only where the signal is at its default action (which would end the
// program): a program that handles the signal itself keeps its handler, and one that installs
// its own later replaces ours.
#include "tracer/recorder/reports.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "tracer/common/flat_map.h"
#include "tracer/recorder/flight.h"
#include "tracer/recorder/growable_array.h"
#include "tracer/recorder/immortal.h"

namespace memtrace::detail {
namespace {

constexpr size_t kReportBytes = 256 << 10;
constexpr int kRows = 25;
constexpr int kStackFrames = 12;

// The report's text, built in mmap'd memory.
class Text {
 public:
  bool ready() {
    if (!data_) data_ = static_cast<char*>(mapPages(kReportBytes));
    used_ = 0;
    return data_ != nullptr;
  }
  void add(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    if (used_ + 1 >= kReportBytes) return;
    va_list arguments;
    va_start(arguments, format);
    int n = vsnprintf(data_ + used_, kReportBytes - used_, format, arguments);
    va_end(arguments);
    if (n > 0) used_ = std::min(kReportBytes - 1, used_ + static_cast<size_t>(n));
  }
  // Appends [data, data + size) as it is.
  void addBytes(const char* data, size_t size) {
    size = std::min(size, kReportBytes - 1 - used_);
    memcpy(data_ + used_, data, size);
    used_ += size;
  }
  const char* data() const { return data_; }
  size_t size() const { return used_; }

 private:
  char* data_ = nullptr;
  size_t used_ = 0;
};

Text g_text;

struct Group {
  uint64_t key;  // a frame id, or a module's string id
  uint64_t bytes;
  uint64_t count;
};
Immortal<FlatMap<uint64_t, Group>> g_groups_storage;
Immortal<GrowableArray<Group>> g_sorted_storage;
FlatMap<uint64_t, Group>& g_groups = g_groups_storage.value;
GrowableArray<Group>& g_sorted = g_sorted_storage.value;

void addString(uint32_t id, const char* none) {
  const char* data;
  size_t size;
  if (g_recorder.writer.stringOf(id, &data, &size))
    g_text.addBytes(data, size);
  else
    g_text.add("%s", none);
}

// "file:line (function)" of a frame id.
void addFrame(uint32_t frame_id) {
  RecordWriter::FrameEntry frame;
  if (!g_recorder.writer.frameOf(frame_id, &frame)) {
    g_text.add("<unknown>");
    return;
  }
  addString(frame.file, "?");
  g_text.add(":%d (", frame.line);
  addString(frame.function, "?");
  g_text.add(")");
}

uint32_t innermostFrame(uint32_t python_stack) {
  uint32_t parent, frame;
  return g_recorder.writer.pythonNodeOf(python_stack, &parent, &frame) ? frame : 0;
}

void addBytesText(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0)
    g_text.add("%llu B", static_cast<unsigned long long>(bytes));
  else
    g_text.add("%.2f %s", value, kUnits[unit]);
}

// What is live, grouped by the innermost Python frame (by_module: by nn.Module), largest
// first: the top kRows rows.
void addLiveTable(bool by_module, int device) {
  g_groups.clear();
  uint64_t total = 0, count = 0;
  g_recorder.live.forEach([&](uint64_t, const LiveBlock& block) {
    if (device >= 0 && block.device != device) return;
    // Key 0 for no frame (or no module); untraced allocations under a key of their own.
    uint64_t key = by_module ? block.module : innermostFrame(block.python_stack);
    if (!block.traced && key == 0) key = UINT64_MAX;
    Group* group = g_groups.insert(key, Group{key, 0, 0});
    if (group) {
      group->bytes += block.size;
      ++group->count;
    }
    total += block.size;
    ++count;
  });
  g_sorted.clear();
  g_groups.forEach([&](uint64_t, const Group& group) { g_sorted.push(group); });
  std::sort(g_sorted.begin(), g_sorted.end(),
            [](const Group& a, const Group& b) { return a.bytes > b.bytes; });
  g_text.add("%14s %8s  %s\n", "Bytes", "Count", by_module ? "nn.Module" : "Location");
  int rows = 0;
  for (const Group& group : g_sorted) {
    if (rows++ == kRows) {
      g_text.add("%14s %8s  ... %zu more rows (memtrace-report has them all)\n", "", "",
                 g_sorted.size() - kRows);
      break;
    }
    char bytes[32];
    double value = static_cast<double>(group.bytes);
    if (group.bytes >= (1ull << 30))
      snprintf(bytes, sizeof(bytes), "%.2f GiB", value / (1ull << 30));
    else if (group.bytes >= (1ull << 20))
      snprintf(bytes, sizeof(bytes), "%.2f MiB", value / (1ull << 20));
    else if (group.bytes >= 1024)
      snprintf(bytes, sizeof(bytes), "%.2f KiB", value / 1024);
    else
      snprintf(bytes, sizeof(bytes), "%llu B", static_cast<unsigned long long>(group.bytes));
    g_text.add("%14s %8llu  ", bytes, static_cast<unsigned long long>(group.count));
    if (group.key == UINT64_MAX)
      g_text.add("untraced");
    else if (group.key == 0)
      g_text.add(by_module ? "<no nn.Module>" : "<no Python frame>");
    else if (by_module)
      addString(static_cast<uint32_t>(group.key), "?");
    else
      addFrame(static_cast<uint32_t>(group.key));
    g_text.add("\n");
  }
  g_text.add("%14s %8s  (", "", "");
  addBytesText(total);
  g_text.add(" in all)\n");
  (void)count;
}

// Writes the text to `path` through a temporary name.
void writeText(const char* path) {
  char temporary[4200];
  snprintf(temporary, sizeof(temporary), "%s.part", path);
  int fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const char* data = g_text.data();
  size_t left = g_text.size();
  bool ok = true;
  while (left > 0) {
    ssize_t n = write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  close(fd);
  if (!ok || rename(temporary, path) != 0) unlink(temporary);
}

void addHeader(const char* what, uint64_t time_ns) {
  g_text.add("memtrace: %s in process %d at %.3f s (", what, getpid(),
             static_cast<double>(time_ns - g_recorder.writer.startTime()) / 1e9);
  char command[512];
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, command, sizeof(command) - 1) : 0;
  if (fd >= 0) close(fd);
  for (ssize_t i = 0; i < n; ++i)
    if (command[i] == '\0') command[i] = ' ';
  while (n > 0 && command[n - 1] == ' ') --n;
  g_text.addBytes(command, n > 0 ? static_cast<size_t>(n) : 0);
  g_text.add(")\n");
}

void addTrailer() {
  g_text.add("\nThe trace: %s\n", g_recorder.file.path());
}

std::atomic<int> g_snapshots_asked{0};
int g_snapshots_written = 0;

void onSnapshotSignal(int) {
  g_snapshots_asked.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void writeOutOfMemoryReport(uint64_t time_ns, uint64_t size, const EventContext& context,
                            uint32_t python_stack, uint32_t module) {
  // Beside a trace that is a file: a pipe or a device has no folder to write into.
  if (!g_recorder.config.oom_report || !g_recorder.file.isOpen() || !g_recorder.file.regular() ||
      !g_text.ready())
    return;
  addHeader("an allocation failed (out of memory)", time_ns);
  g_text.add("\nThe failing request: ");
  addBytesText(size);
  g_text.add(" (%llu bytes) on device %d, %s, stream 0x%llx\n",
             static_cast<unsigned long long>(size), context.device, format::apiName(context.api),
             static_cast<unsigned long long>(context.stream));
  if (python_stack == 0) {
    g_text.add("  with no Python stack (a thread without Python, or stacks not recorded)\n");
  } else {
    uint32_t node = python_stack;
    for (int depth = 0; node && depth < kStackFrames; ++depth) {
      uint32_t parent, frame;
      if (!g_recorder.writer.pythonNodeOf(node, &parent, &frame)) break;
      g_text.add(depth == 0 ? "  at " : "     called from ");
      addFrame(frame);
      g_text.add("\n");
      node = parent;
    }
  }
  if (module) {
    g_text.add("  in nn.Module ");
    addString(module, "?");
    g_text.add("\n");
  }
  int device = context.device;
  int index = counterIndex(device);
  g_text.add("\nLive when it failed, on device %d: ", device);
  addBytesText(index >= 0 ? g_recorder.current[index] : 0);
  g_text.add(" (all devices: ");
  addBytesText(g_recorder.current[0]);
  g_text.add("); the most live at once so far: ");
  RunPeak peak = runPeak();
  addBytesText(peak.bytes);
  g_text.add("\n\nBy line (the innermost Python frame), device %d:\n", device);
  addLiveTable(false, device);
  g_text.add("\nBy nn.Module, device %d:\n", device);
  addLiveTable(true, device);
  addTrailer();
  g_text.add("memtrace-report %s --at oom   shows the first failure; --at end the last state\n",
             g_recorder.file.path());
  char path[4200];
  snprintf(path, sizeof(path), "%s.oom.txt", g_recorder.file.path());
  writeText(path);
}

void installSnapshotSignal() {
  int signal_number = g_recorder.config.snapshot_signal;
  if (signal_number <= 0) return;
  struct sigaction current;
  if (sigaction(signal_number, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
      (current.sa_flags & SA_SIGINFO))
    return;
  struct sigaction action {};
  action.sa_handler = onSnapshotSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(signal_number, &action, nullptr);
}

void writeSnapshotIfAsked() {
  if (g_snapshots_asked.load(std::memory_order_relaxed) == g_snapshots_written) return;
  RecorderLock lock;
  g_snapshots_written = g_snapshots_asked.load(std::memory_order_relaxed);
  if (!g_recorder.file.isOpen() || !g_recorder.file.regular() || !g_text.ready()) return;
  static int number = 0;
  ++number;
  uint64_t time = monotonicNow();
  char name[64];
  snprintf(name, sizeof(name), "memtrace snapshot %d", number);
  if (!g_recorder.writer.writeMarker(time, format::MarkerKind::kAnnotation, name))
    failWrite();
  else
    afterRecord(time);
  addHeader(name, time);
  g_text.add("\nLive now: ");
  addBytesText(g_recorder.current[0]);
  g_text.add("; the most live at once so far: ");
  RunPeak peak = runPeak();
  addBytesText(peak.bytes);
  if (peak.time_ns)
    g_text.add(" at %.3f s",
               static_cast<double>(peak.time_ns - g_recorder.writer.startTime()) / 1e9);
  g_text.add("\n\nBy line (the innermost Python frame), all devices:\n");
  addLiveTable(false, -1);
  g_text.add("\nBy nn.Module, all devices:\n");
  addLiveTable(true, -1);
  addTrailer();
  g_text.add("memtrace-report %s --at %.3f   shows this moment\n", g_recorder.file.path(),
             static_cast<double>(time - g_recorder.writer.startTime()) / 1e9);
  char path[4200];
  snprintf(path, sizeof(path), "%s.snapshot-%d.txt", g_recorder.file.path(), number);
  writeText(path);
}

}  // namespace memtrace::detail
