#include "recorder/recorder_state.h"

#include <stdio.h>

namespace memtrace::detail {

// The definitions stay together and in this order: g_writer is constructed from g_file.
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;

Config g_config;
TraceFile g_file;
RecordWriter g_writer(g_file);
format::LiveTable<LiveBlock> g_live;
uint64_t g_current[kMaxDevices + 1];
uint64_t g_peak[kMaxDevices + 1];
bool g_file_wanted = false;
bool g_write_failed = false;
bool g_exiting = false;
bool g_flusher_running = false;
int g_open_phases = 0;
char g_path_pattern[4096];
char g_last_error[512];

std::atomic<bool> g_tracing{false};

void setError(const char* message, const char* detail) {
  snprintf(g_last_error, sizeof(g_last_error), "%s%s", message, detail ? detail : "");
}

}  // namespace memtrace::detail
