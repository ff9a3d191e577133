// The trace file's session: opening it (with the process's description and the snapshot of
// what is live), closing it, a write that failed, and the exit path.
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tracer/recorder/flight.h"
#include "tracer/recorder/recorder.h"
#include "tracer/recorder/recorder_state.h"

namespace memtrace::detail {
namespace {

using format::MarkerKind;

size_t readCommandLine(char* out, size_t size) {
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t used = 0;
  for (ssize_t n; used < size && (n = read(fd, out + used, size - used)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    used += static_cast<size_t>(n);
  }
  close(fd);
  while (used && out[used - 1] == '\0') --used;  // the last argument's terminator
  return used;
}

}  // namespace

namespace {

// A launcher's number (RANK, ...): -1 when unset or not a non-negative decimal.
int64_t environmentNumber(const char* name) {
  const char* text = getenv(name);
  if (!text || !*text) return -1;
  int64_t value = 0;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9' || value > (INT64_MAX - 9) / 10) return -1;
    value = value * 10 + (*c - '0');
  }
  return value;
}

// What torchrun told this process about its place in the job (Note [A job's ranks]); false
// when it is no rank of a job (none of the variables is set).
bool readDistributed(DistributedFields* rank) {
  const char* job = getenv("TORCHELASTIC_RUN_ID");
  rank->rank = environmentNumber("RANK");
  rank->world_size = environmentNumber("WORLD_SIZE");
  rank->local_rank = environmentNumber("LOCAL_RANK");
  rank->local_world_size = environmentNumber("LOCAL_WORLD_SIZE");
  rank->group_rank = environmentNumber("GROUP_RANK");
  rank->restart_count = environmentNumber("TORCHELASTIC_RESTART_COUNT");
  rank->job_id = job ? job : "";
  // A rank past the world (a launcher's mistake) would be refused by the reader.
  if (rank->world_size >= 0 && rank->rank >= rank->world_size) rank->rank = -1;
  return job || rank->rank >= 0 || rank->world_size >= 0 || rank->local_rank >= 0;
}

// Appends `text` to out[*used], keeping a path's characters: a job id may hold any byte, and
// a '/' in it must not make a folder.
void appendName(const char* text, bool sanitize, char* out, size_t out_size, size_t* used) {
  for (const char* c = text; *c && *used + 1 < out_size; ++c) {
    bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                 *c == '-' || *c == '_' || *c == '.';
    out[(*used)++] = !sanitize || plain ? *c : '_';
  }
  out[*used] = '\0';
}

void appendNumber(int64_t value, char* out, size_t out_size, size_t* used) {
  char text[24];
  if (value < 0)
    snprintf(text, sizeof(text), "x");
  else
    snprintf(text, sizeof(text), "%lld", static_cast<long long>(value));
  appendName(text, false, out, out_size, used);
}

}  // namespace

// %p the pid; a rank's %r, %w, %l, %g, %a and %j (Note [A job's ranks]: "x" when the launcher
// did not say); %% a '%'.
void expandPath(const char* pattern, char* out, size_t out_size) {
  DistributedFields rank;
  readDistributed(&rank);
  size_t used = 0;
  out[0] = '\0';
  for (const char* p = pattern; *p && used + 1 < out_size; ++p) {
    if (p[0] != '%' || !p[1]) {
      out[used++] = *p;
      out[used] = '\0';
      continue;
    }
    switch (*++p) {
      case 'p':
        appendNumber(getpid(), out, out_size, &used);
        break;
      case 'r':
        appendNumber(rank.rank, out, out_size, &used);
        break;
      case 'w':
        appendNumber(rank.world_size, out, out_size, &used);
        break;
      case 'l':
        appendNumber(rank.local_rank, out, out_size, &used);
        break;
      case 'g':
        appendNumber(rank.group_rank, out, out_size, &used);
        break;
      case 'a':
        appendNumber(rank.restart_count, out, out_size, &used);
        break;
      case 'j':
        appendName(*rank.job_id ? rank.job_id : "x", true, out, out_size, &used);
        break;
      case '%':
        appendName("%", false, out, out_size, &used);
        break;
      default:  // not a token: kept as written
        appendName("%", false, out, out_size, &used);
        --p;
    }
  }
  out[used] = '\0';
}

void failWrite() {
  char detail[600];
  snprintf(detail, sizeof(detail), "%s: %s; recording stopped, the program goes on",
           g_recorder.file.path(),
           strerror(g_recorder.file.lastErrno() ? g_recorder.file.lastErrno() : EIO));
  warn("cannot write the trace file ", detail);
  setError("cannot write the trace file ", detail);
  g_recorder.file.closeAfterFailure();
  g_recorder.write_failed = true;
  g_recorder.tracing.store(false, std::memory_order_relaxed);
}

// Header, process information, loaded objects, then every allocation live now (as untraced: the
// file's live bytes are right from its first event), then the start mark if tracing.
bool openFile() {
  if (g_recorder.file.isOpen()) return true;
  if (!g_recorder.file_wanted || g_recorder.write_failed) return false;
  char path[4096];
  expandPath(g_recorder.path_pattern, path, sizeof(path));
  const char* error = nullptr;
  uint32_t flags = g_recorder.config.flight ? format::FileFlags::kFlight : 0;
  TraceFile::OpenResult result =
      g_recorder.file.open(path, &error, flags, g_recorder.config.map_file);
  if (result == TraceFile::OpenResult::kBusy) {
    // Another process is writing there (Note [Which process owns a trace file]).
    size_t length = strlen(path);
    snprintf(path + length, sizeof(path) - length, ".%d", getpid());
    result = g_recorder.file.open(path, &error, flags, g_recorder.config.map_file);
    if (result == TraceFile::OpenResult::kBusy) error = "locked by another process";
  }
  if (result != TraceFile::OpenResult::kOpened) {
    char detail[4200];
    snprintf(detail, sizeof(detail), "%s: %s; the program goes on untraced", path, error);
    warn("cannot open the trace file ", detail);
    setError("cannot open the trace file ", detail);
    g_recorder.write_failed = true;
    g_recorder.tracing.store(false, std::memory_order_relaxed);
    return false;
  }
  if (g_recorder.config.verbose) warn("tracing to ", path);

  uint64_t start = monotonicNow();
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  static char command_line[format::kMaxStringBytes];
  static char executable[4096];
  static char host_name[256];
  ssize_t executable_size = readlink("/proc/self/exe", executable, sizeof(executable) - 1);
  executable[executable_size > 0 ? executable_size : 0] = '\0';
  if (gethostname(host_name, sizeof(host_name)) != 0) host_name[0] = '\0';
  host_name[sizeof(host_name) - 1] = '\0';

  g_recorder.writer.beginFile(start, g_recorder.config.time_unit_ns);
  runPreparing();
  ProcessInfoFields info{};
  info.pid = getpid();
  info.parent_pid = getppid();
  info.start_unix_ns = uint64_t(wall.tv_sec) * 1000000000u + uint64_t(wall.tv_nsec);
  info.start_monotonic_ns = start;
  info.command_line = command_line;
  info.command_line_size = readCommandLine(command_line, sizeof(command_line));
  info.executable = executable;
  info.host_name = host_name;
  info.stack_mode = g_recorder.config.stack_mode;
  info.python_depth = g_recorder.config.python_depth;
  info.native_depth = g_recorder.config.native_depth;
  info.free_stacks = g_recorder.config.free_stacks;
  bool ok = g_recorder.writer.writeProcessInfo(info);
  if (DistributedFields rank; ok && readDistributed(&rank))
    ok = g_recorder.writer.writeDistributed(rank);
  // Note [The simulated device]: right after the process (and the rank), when known now.
  if (ok) ok = writeSimulatedDeviceIfNew();
  if (ok && format::wantsNative(g_recorder.config.stack_mode))
    ok = g_recorder.writer.writeNewLoadedObjects();
  // Note [Generated code]: compiled code made before this file opened runs in it too.
  if (ok) ok = g_recorder.generated_code.writeAll(g_recorder.writer);

  // The snapshot, device by device so that the context changes once per device. What the
  // live table says of each allocation is said again as the file says it: no stacks (the ids
  // were the last file's), untraced, and numbered as this file's events.
  EventContext context{0, -1, 0, format::Api::kSnapshot, format::Level::kTensor};
  uint64_t serial = 0;
  for (int device = -1; ok && device < kMaxDevices; ++device) {
    g_recorder.live.forEachValue([&](uint64_t address, LiveBlock& live) {
      int live_device = live.device >= 0 && live.device < kMaxDevices ? live.device : -1;
      if (!ok || live_device != device) return;
      context.device = live.device;
      context.level = live.level;
      live.python_stack = live.native_stack = live.module = 0;
      live.thread_id = 0;
      live.stream = 0;
      live.traced = false;
      live.category = format::Category::kUnknown;
      live.serial = serial++;
      live.ring = g_recorder.writer.allocationNumber();
      ok = g_recorder.writer.setContext(context) &&
           g_recorder.writer.writeAlloc(start, address, live.size, 0, 0);
    });
  }
  // PyTorch's reserved memory (Note [PyTorch's own allocator] in records.h), as segments
  // allocated at the file's start.
  g_recorder.segments.forEach([&](uint64_t address, const SegmentBlock& block) {
    if (ok)
      ok = g_recorder.writer.writeSegment(start, format::SegmentAction::kAlloc, block.device,
                                          address, block.size, block.graph_pool, block.user_pool);
  });
  if (ok && g_recorder.tracing.load(std::memory_order_relaxed))
    ok = g_recorder.writer.writeMarker(start, MarkerKind::kTracingStarted, nullptr);
  // The opening chunk goes to the file now (Note [When records reach the file]).
  if (!ok || !g_recorder.file.flush() || !runOpened(start)) {
    failWrite();
    return false;
  }
  // A mapped file has every record in the page cache as it is written: nothing to write
  // through (Note [When records reach the file]).
  g_recorder.write_through_until_ns = g_recorder.write_through   ? UINT64_MAX
                                      : g_recorder.file.mapped() ? 0
                                                                 : start + kFlushPeriodNs;
  startFlusher();
  return true;
}

void closeFile(MarkerKind why) {
  if (!g_recorder.file.isOpen()) return;
  if (!g_recorder.writer.writeMarker(monotonicNow(), why, nullptr) || !g_recorder.file.close())
    failWrite();
}

void onExit() {
  // The last device memory reading, while the exiting thread's context may still be current
  // (the driver refuses the call once it is torn down: then there is none).
  recordDeviceMemory();
  RecorderLock lock;
  if (g_recorder.file.isOpen()) {
    // A mapped file is left a little longer than its records (teardown may record more), not
    // a whole window longer.
    if (!g_recorder.writer.writeMarker(monotonicNow(), MarkerKind::kProcessExit, nullptr) ||
        !(g_recorder.file.mapped() ? g_recorder.file.trimForExit() : g_recorder.file.flush()))
      failWrite();
  }
  // Teardown frees after this point (static destructors, CUDA context teardown, other
  // threads still running) are still recorded, each written through; nothing is freed
  // (Note [The recorder's state outlives every thread]).
  g_recorder.write_through = true;
  g_recorder.write_through_until_ns = UINT64_MAX;
}

}  // namespace memtrace::detail
