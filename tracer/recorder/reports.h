// Internal to recorder/: the reports the library writes itself, beside the trace (Note
// [Reports the library writes itself], reports.cpp).
#pragma once

#include <cstdint>

#include "tracer/recorder/recorder_state.h"

namespace memtrace::detail {

// After a failed allocation was written (the recorder's lock held): TRACE.oom.txt, the failing
// request and what was live, by line.
void writeOutOfMemoryReport(uint64_t time_ns, uint64_t size, const EventContext& context,
                            uint32_t python_stack, uint32_t module);

// At initialization: the snapshot signal's handler (g_recorder.config.snapshot_signal), where the
// program left the signal at its default.
void installSnapshotSignal();
// The flusher's, every period: a snapshot the signal asked for (TRACE.snapshot-N.txt and an
// annotation in the trace). Takes the recorder's lock.
void writeSnapshotIfAsked();

}  // namespace memtrace::detail
