#include "tracer/recorder/recorder_state.h"

#include <stdio.h>

#include "tracer/recorder/immortal.h"

namespace memtrace::detail {

// The definitions stay together and in this order: g_writer is constructed from g_file.
// Never destroyed (Note [The recorder's state outlives every thread]).
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;

Config g_config;
namespace {
Immortal<TraceFile> g_file_storage;
Immortal<RecordWriter> g_writer_storage(g_file_storage.value);
Immortal<format::LiveTable<LiveBlock>> g_live_storage;
Immortal<FlatMap<uint64_t, Mapping>> g_mappings_storage;
Immortal<GeneratedCodeTable> g_generated_code_storage;
Immortal<FlatMap<uint64_t, SegmentBlock>> g_segments_storage;
}  // namespace
TraceFile& g_file = g_file_storage.value;
RecordWriter& g_writer = g_writer_storage.value;
format::LiveTable<LiveBlock>& g_live = g_live_storage.value;
FlatMap<uint64_t, Mapping>& g_mappings = g_mappings_storage.value;
GeneratedCodeTable& g_generated_code = g_generated_code_storage.value;
FlatMap<uint64_t, SegmentBlock>& g_segments = g_segments_storage.value;
uint64_t g_current[kMaxDevices + 1];
uint64_t g_peak[kMaxDevices + 1];
uint64_t g_reserved[kMaxDevices + 1];
uint64_t g_reserved_peak[kMaxDevices + 1];
bool g_file_wanted = false;
bool g_write_failed = false;
bool g_write_through = false;
uint64_t g_write_through_until_ns = 0;
bool g_flusher_running = false;
format::TrainingPhase g_phase = format::TrainingPhase::kNone;
int g_open_phases = 0;
char g_path_pattern[4096];
char g_last_error[512];

std::atomic<bool> g_tracing{false};
SimulatedDeviceCopy g_simulated;

uint64_t g_device_memory_read_ns[kMaxDevices];
uint32_t g_device_memory_file[kMaxDevices];

bool writeSimulatedDeviceIfNew() {
  if (!g_simulated.known || !g_file.isOpen() || g_writer.simulatedWritten()) return true;
  return g_writer.writeSimulatedDevice(SimulatedDeviceFields{
      g_simulated.profile_name, g_simulated.profile_file, g_simulated.memory_bytes,
      g_simulated.memory_set_by_user, g_simulated.device_count});
}

void setError(const char* message, const char* detail) {
  snprintf(g_last_error, sizeof(g_last_error), "%s%s", message, detail ? detail : "");
}

}  // namespace memtrace::detail
