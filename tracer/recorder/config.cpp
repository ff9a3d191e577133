#include "tracer/recorder/config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <initializer_list>

#include "tracer/recorder/thread_state.h"

namespace memtrace {
namespace {

bool parseUnsigned(const char* text, uint32_t low, uint32_t high, uint32_t* out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  unsigned long value = strtoul(text, &end, 10);
  if (*end || value < low || value > high) return false;
  *out = static_cast<uint32_t>(value);
  return true;
}

int parseFlag(const char* name) {
  const char* text = getenv(name);
  if (!text || !*text) return -1;
  if (!strcmp(text, "1") || !strcmp(text, "true") || !strcmp(text, "yes")) return 1;
  if (!strcmp(text, "0") || !strcmp(text, "false") || !strcmp(text, "no")) return 0;
  warn("ignoring a value that is not 0 or 1: ", name);
  return -1;
}

}  // namespace

void warn(const char* message, const char* detail) {
  char line[1024];
  size_t used = 0;
  for (const char* part : {"memtrace: ", message, detail, "\n"}) {
    if (!part) continue;
    size_t length = strlen(part);
    if (used + length >= sizeof(line)) length = sizeof(line) - 1 - used;
    memcpy(line + used, part, length);
    used += length;
  }
  ssize_t ignored = write(STDERR_FILENO, line, used);
  (void)ignored;
}

Config readConfig() {
  Config config{};
  const char* output = getenv("MEMTRACE_OUTPUT");
  strncpy(config.output_pattern, output && *output ? output : "memtrace-%p.bin",
          sizeof(config.output_pattern) - 1);

  config.stack_mode = format::StackMode::kPython;
  if (const char* stacks = getenv("MEMTRACE_STACKS"); stacks && *stacks) {
    if (!strcmp(stacks, "python"))
      config.stack_mode = format::StackMode::kPython;
    else if (!strcmp(stacks, "native"))
      config.stack_mode = format::StackMode::kNative;
    else if (!strcmp(stacks, "all"))
      config.stack_mode = format::StackMode::kAll;
    else if (!strcmp(stacks, "none"))
      config.stack_mode = format::StackMode::kNone;
    else
      warn("MEMTRACE_STACKS must be python, native, all or none; using python, not ", stacks);
  }

  config.python_depth = 128;
  if (const char* depth = getenv("MEMTRACE_PYTHON_DEPTH");
      depth && *depth && !parseUnsigned(depth, 1, kMaxPythonDepth, &config.python_depth))
    warn("MEMTRACE_PYTHON_DEPTH must be 1..256; using 128, not ", depth);
  config.native_depth = 32;
  if (const char* depth = getenv("MEMTRACE_NATIVE_DEPTH");
      depth && *depth && !parseUnsigned(depth, 1, kMaxNativeDepth, &config.native_depth))
    warn("MEMTRACE_NATIVE_DEPTH must be 1..256; using 32, not ", depth);

  config.free_stacks = parseFlag("MEMTRACE_FREE_STACKS") == 1;
  config.autostart = parseFlag("MEMTRACE_AUTOSTART");
  config.torch_tracker = parseFlag("MEMTRACE_TORCH_TRACKER") != 0;
  config.verbose = parseFlag("MEMTRACE_VERBOSE") == 1;
  if (const char* walker = getenv("MEMTRACE_PYTHON_WALKER"); walker && *walker) {
    if (!strcmp(walker, "api"))
      config.python_public_api_only = true;
    else if (strcmp(walker, "auto") != 0)
      warn("MEMTRACE_PYTHON_WALKER must be auto or api; using auto, not ", walker);
  }
  if (const char* mode = getenv("MEMTRACE_MODE"); mode && *mode) {
    if (!strcmp(mode, "flight"))
      config.flight = true;
    else if (strcmp(mode, "full") != 0)
      warn("MEMTRACE_MODE must be full or flight; using full, not ", mode);
  }
  config.flight_events = 1000000;
  if (const char* events = getenv("MEMTRACE_FLIGHT_EVENTS"); events && *events) {
    char* end = nullptr;
    unsigned long long value = strtoull(events, &end, 10);
    if (*end || value < 1 || value > (1ull << 40) || events[0] == '-')
      warn("MEMTRACE_FLIGHT_EVENTS must be 1..2^40; using 1000000, not ", events);
    else
      config.flight_events = value;
  }
  config.map_file = parseFlag("MEMTRACE_MAP_FILE") != 0;
  config.oom_report = parseFlag("MEMTRACE_OOM_REPORT") != 0;
  config.snapshot_signal = SIGUSR1;
  if (const char* name = getenv("MEMTRACE_SNAPSHOT_SIGNAL"); name && *name) {
    if (!strcmp(name, "USR1") || !strcmp(name, "SIGUSR1"))
      config.snapshot_signal = SIGUSR1;
    else if (!strcmp(name, "USR2") || !strcmp(name, "SIGUSR2"))
      config.snapshot_signal = SIGUSR2;
    else if (!strcmp(name, "none") || !strcmp(name, "0"))
      config.snapshot_signal = 0;
    else
      warn("MEMTRACE_SNAPSHOT_SIGNAL must be USR1, USR2 or none; using USR1, not ", name);
  }
  // Note [Times in microseconds] in records.h.
  config.time_unit_ns = 1000;
  if (const char* resolution = getenv("MEMTRACE_TIME_RESOLUTION"); resolution && *resolution) {
    if (!strcmp(resolution, "ns"))
      config.time_unit_ns = 1;
    else if (strcmp(resolution, "us") != 0)
      warn("MEMTRACE_TIME_RESOLUTION must be us or ns; using us, not ", resolution);
  }
  return config;
}

}  // namespace memtrace
