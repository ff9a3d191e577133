// Internal to recorder/: the flight recorder (MEMTRACE_MODE=flight; Note [The flight
// recorder's file] in tracer/format/records.h, flight.cpp), and the run's counters it and the
// reports the library writes itself (reports.cpp) share. Everything here is called with
// the recorder's lock held.
#pragma once

#include <cstdint>

#include "tracer/recorder/recorder_state.h"

namespace memtrace::detail {

// A file is about to be opened: before its first record (the flight recorder keeps its table
// records from the first on).
void runPreparing();
// The file opened (its opening chunk, with the snapshot of what is live, is written): the
// flight recorder starts its first frame. False when that failed.
bool runOpened(uint64_t time_ns);
// The number the next memory event of this file gets (LiveBlock::serial).
uint64_t flightSerial();
// An allocation was written (`block` as the live table holds it now; `time_ns` its time).
// False when a write the flight recorder needed failed.
bool runAllocated(uint64_t address, const LiveBlock& block, uint64_t time_ns);
// A free was written of `block`, live at `address` until now.
void runFreed(uint64_t address, const LiveBlock& block);
// A failed allocation was written.
void runFailed(uint64_t time_ns, uint64_t size, uint32_t python_stack, uint32_t native_stack,
               const EventContext& context, uint32_t module, bool traced);
// A training step ended: the flight recorder writes its peak (kStepPeak) instead of the
// kStepEnd the full trace has. False when that failed.
bool flightStepEnd(uint64_t time_ns, uint64_t step);
// The process forked (the child's file is its own) or the file is closed.
void flightForget();

// The most bytes live at once in this file (all devices), and when.
struct RunPeak {
  uint64_t bytes;
  uint64_t time_ns;
};
RunPeak runPeak();

}  // namespace memtrace::detail
