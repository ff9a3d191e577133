#include "tracer/recorder/recorder_state.h"

#include <stdio.h>

#include "tracer/recorder/immortal.h"

namespace memtrace::detail {

namespace {
// Constructed before every constructor of the library without a priority (allocator/'s
// library_init.cpp, which starts the recorder), whatever the order of the objects at link time;
// value-initialized: every field without an initializer starts at zero. Never destroyed (Note
// [The recorder's state outlives every thread]).
Immortal<Recorder> g_recorder_storage __attribute__((init_priority(101)));
}  // namespace
Recorder& g_recorder = g_recorder_storage.value;

bool writeSimulatedDeviceIfNew() {
  if (!g_recorder.simulated.known || !g_recorder.file.isOpen() ||
      g_recorder.writer.simulatedWritten())
    return true;
  return g_recorder.writer.writeSimulatedDevice(SimulatedDeviceFields{
      g_recorder.simulated.profile_name, g_recorder.simulated.profile_file,
      g_recorder.simulated.memory_bytes, g_recorder.simulated.memory_set_by_user,
      g_recorder.simulated.device_count});
}

void setError(const char* message, const char* detail) {
  snprintf(g_recorder.last_error, sizeof(g_recorder.last_error), "%s%s", message,
           detail ? detail : "");
}

}  // namespace memtrace::detail
