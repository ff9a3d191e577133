// The flight recorder (MEMTRACE_MODE=flight): a trace file whose size follows what is live,
// not how long the program ran (Note [The flight recorder's file], tracer/format/records.h).
//
// Note [Keeping the peak without its events]
// The live set at the peak is what the report is about, and the events that made it are
// dropped as the file is compacted. Copying the live set at every new peak would cost
// O(live set) on every allocation of a rising curve; instead the live table says, for each
// allocation, the event that made it (LiveBlock::serial), and the allocations live at the
// peak that were freed since are kept aside (freed_since_peak, cleared at each new peak: each
// allocation enters it at most once). The live set at the peak is then, at any moment, the
// live allocations made at or before the peak's event plus freed_since_peak: O(1) per event,
// O(live set) only when a compaction writes it. Categories told after the peak (a .grad is
// named when the optimizer's step begins) reach it too: the live table's entry carries them.
//
// Note [When the flight recorder compacts]
// A frame (kSection kFrame) starts every N events (or four times the live set, whichever is
// more, so that copying the live set at each frame stays a fraction of an event's cost); the
// frame's start keeps a copy of the live set, the only copy the recorder holds. At a frame's
// start, when the file has grown to twice what it held after the last compaction (and by
// kMinimumGrowth), it is written again: the table records (kept, as written, in table_log),
// the peak and out-of-memory sections whose events would be dropped, the live set at the
// previous frame's start (kWindow), then the file's own bytes from that frame on, copied as
// whole chunks (copy_file_range); the new file is renamed over the old. Each compaction copies
// O(tables + live set + N) bytes once the file has grown by as much: a bounded number of
// copies per byte written. It runs on the thread whose event starts the frame, under the
// recorder's lock, so other threads' events wait for it (milliseconds, every few N events;
// docs/performance.md). A compaction that fails (a full disk, a directory that refuses the
// new file) is said once and not tried again: the file then keeps every event from there on.
#include "tracer/recorder/flight.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "tracer/recorder/growable_array.h"

namespace memtrace::detail {
namespace {

using format::SectionKind;

// A compaction waits until the file grew by this much at least (a small window would
// otherwise compact every frame).
constexpr uint64_t kMinimumGrowth = 256 << 10;
constexpr uint64_t kMinimumFrame = FlightState::kMinimumFrame;
using Frame = FlightState::Frame;
using SegmentEntry = FlightState::SegmentEntry;

// The flight recorder's state is the recorder's (Recorder::flight; Note [One recorder state]).
inline FlightState& state() {
  return g_recorder.flight;
}

void stopCompacting(const char* why, int error) {
  state().now.compaction_off = true;
  if (state().compaction_warned) return;
  state().compaction_warned = true;
  char detail[600];
  snprintf(detail, sizeof(detail),
           "%s (%s); the flight recorder's file keeps every event from here", why,
           strerror(error ? error : EIO));
  warn("cannot compact the trace file: ", detail);
}

// Copies the live table into `out`, sorted by address (a section's address deltas stay short).
bool copyLive(GrowableArray<FlightEntry>& out) {
  out.clear();
  if (!out.reserve(g_recorder.live.size())) return false;
  g_recorder.live.forEach([&](uint64_t address, const LiveBlock& block) {
    out.push(FlightEntry{address, block});
  });
  std::sort(out.begin(), out.end(),
            [](const FlightEntry& a, const FlightEntry& b) { return a.address < b.address; });
  return true;
}

// Writes `entries` as allocations at `time_ns`, after a kSection (the reader's tracing is off
// there): each with its context, nn.Module, tracing state and category.
bool writeEntries(const FlightEntry* entries, size_t count, uint64_t time_ns) {
  bool tracing = false;
  int32_t scope_thread = 0;
  uint32_t scope_module = 0;
  bool scoped = false;
  for (size_t i = 0; i < count; ++i) {
    const FlightEntry& entry = entries[i];
    const LiveBlock& block = entry.block;
    EventContext context{block.thread_id, block.device, block.stream, block.api, block.level};
    if (!g_recorder.writer.setContext(context)) return false;
    if ((scoped || block.module) &&
        (!scoped || scope_thread != block.thread_id || scope_module != block.module)) {
      if (!g_recorder.writer.writeModuleScopeId(block.module)) return false;
      scoped = true;
      scope_thread = block.thread_id;
      scope_module = block.module;
    }
    if (block.traced != tracing) {
      tracing = block.traced;
      if (!g_recorder.writer.writeMarker(
              time_ns,
              tracing ? format::MarkerKind::kTracingStarted : format::MarkerKind::kTracingStopped,
              nullptr))
        return false;
    }
    if (!g_recorder.writer.writeAlloc(time_ns, entry.address, block.size, block.python_stack,
                                      block.native_stack))
      return false;
    if (block.category != format::Category::kUnknown &&
        !g_recorder.writer.writeCategory(entry.address, block.category))
      return false;
  }
  return true;
}

bool writeFrees(const FlightEntry* entries, size_t count, uint64_t time_ns) {
  for (size_t i = 0; i < count; ++i) {
    const LiveBlock& block = entries[i].block;
    EventContext context{block.thread_id, block.device, block.stream, block.api, block.level};
    if (!g_recorder.writer.setContext(context) ||
        !g_recorder.writer.writeFree(time_ns, entries[i].address, 0, 0))
      return false;
  }
  return true;
}

bool section(uint64_t time_ns, SectionKind kind, bool tracing, const SectionTotals& totals) {
  return g_recorder.writer.writeSection(time_ns, kind, tracing, g_recorder.phase,
                                        g_recorder.config.flight_events, totals);
}

// The live set at the peak (Note [Keeping the peak without its events]) into state().scratch, the
// allocation that reached the peak last.
bool livePeak() {
  GrowableArray<FlightEntry>& out = state().scratch;
  out.clear();
  if (!out.reserve(g_recorder.live.size() + state().freed_since_peak.size())) return false;
  g_recorder.live.forEach([&](uint64_t address, const LiveBlock& block) {
    if (block.serial <= state().now.peak_serial) out.push(FlightEntry{address, block});
  });
  out.append(state().freed_since_peak.data(), state().freed_since_peak.size());
  uint64_t peak = state().now.peak_serial;
  std::sort(out.begin(), out.end(), [peak](const FlightEntry& a, const FlightEntry& b) {
    bool a_last = a.block.serial == peak, b_last = b.block.serial == peak;
    return a_last != b_last ? b_last : a.address < b.address;
  });
  return true;
}

// Writes the compacted file's sections (Note [The flight recorder's file]), the events from
// the latest frame on excepted: the peak and the out-of-memory sections that frame's events
// no longer hold, in the order of their times, then the live set at the frame's start.
bool writeSections() {
  const Frame& kept = state().now.frame;
  bool peak = state().now.peak_serial != UINT64_MAX && state().now.peak_serial < kept.serial;
  bool oom = state().now.oom_seen && state().now.oom_serial < kept.serial;
  bool oom_first = oom && (!peak || state().now.oom_time_ns < state().now.peak_time_ns);
  for (int pass = 0; pass < 2; ++pass) {
    bool write_oom = (pass == 0) == oom_first;
    if (write_oom && oom) {
      const FlightEntry& failed = state().now.oom_failed;
      const LiveBlock& request = failed.block;
      EventContext context{request.thread_id, request.device, request.stream, request.api,
                           request.level};
      uint64_t time = state().now.oom_time_ns;
      if (!section(time, SectionKind::kOutOfMemory, false, kept.totals) ||
          !writeEntries(state().oom_live.data(), state().oom_live.size(), time) ||
          !g_recorder.writer.setContext(context) ||
          !g_recorder.writer.writeModuleScopeId(request.module) ||
          !g_recorder.writer.writeFailedAlloc(time, request.size, request.python_stack,
                                              request.native_stack) ||
          !writeFrees(state().oom_live.data(), state().oom_live.size(), time))
        return false;
    } else if (!write_oom && peak) {
      uint64_t time = state().now.peak_time_ns;
      if (!livePeak() || !section(time, SectionKind::kPeak, false, kept.totals) ||
          !writeEntries(state().scratch.data(), state().scratch.size(), time) ||
          !writeFrees(state().scratch.data(), state().scratch.size(), time))
        return false;
    }
  }
  if (!section(kept.time_ns, SectionKind::kWindow, false, kept.totals) ||
      !writeEntries(state().frame_live.data(), state().frame_live.size(), kept.time_ns))
    return false;
  // PyTorch's segments at the window's start, as a new file's (session.cpp): the kept frames'
  // own segment records follow.
  for (const SegmentEntry& entry : state().frame_segments)
    if (!g_recorder.writer.writeSegment(kept.time_ns, format::SegmentAction::kAlloc,
                                        entry.block.device, entry.address, entry.block.size,
                                        entry.block.graph_pool, entry.block.user_pool))
      return false;
  return true;
}

// Note [When the flight recorder compacts]. Called at a frame's start, before its kFrame is
// written (the caller writes it into whichever file is current after). False only when the
// current file failed; a compaction that cannot be made leaves the file as it was.
bool compact() {
  if (!g_recorder.file.flush()) return false;
  const Frame& kept = state().now.frame;
  char final_path[4096];
  snprintf(final_path, sizeof(final_path), "%s", g_recorder.file.path());
  char temporary[4200];
  snprintf(temporary, sizeof(temporary), "%s.compacting", final_path);
  const char* error = nullptr;
  if (state().next_file.open(temporary, &error, format::FileFlags::kFlight,
                             g_recorder.config.map_file) != TraceFile::OpenResult::kOpened) {
    stopCompacting("cannot open the compacted file", state().next_file.lastErrno());
    return true;
  }
  uint64_t old_end = g_recorder.file.bytesWritten();
  g_recorder.file.swap(
      state().next_file);  // the writer writes into the new file; state().next_file is the old
  g_recorder.writer.resetBases(kept.time_ns);
  bool ok =
      g_recorder.writer.writeLoggedRecords(state().table_log, kept.table_log_bytes) &&
      writeSections() &&
      g_recorder.file.appendChunksFrom(state().next_file.fd(), kept.offset, old_end - kept.offset);
  int failure = g_recorder.file.lastErrno();
  if (ok && rename(temporary, final_path) != 0) {
    ok = false;
    failure = errno;
  }
  if (!ok) {
    // Back to the old file, whole as it was: the caller's kFrame resets the writer's bases.
    g_recorder.file.abandon();
    unlink(temporary);
    g_recorder.file.swap(state().next_file);
    stopCompacting("cannot write the compacted file", failure);
    return true;
  }
  g_recorder.file.setPath(final_path);
  state().next_file.abandon();  // the old file, renamed over: only this process's view of it goes
  return true;
}

// A new frame at `time_ns` (Note [When the flight recorder compacts]). False when the file
// failed.
bool startFrame(uint64_t time_ns, bool first) {
  bool compacted = false;
  if (!first && !state().now.compaction_off &&
      g_recorder.file.bytesWritten() >= 2 * state().now.compacted_bytes &&
      g_recorder.file.bytesWritten() >= state().now.compacted_bytes + kMinimumGrowth) {
    if (!compact()) return false;
    compacted = !state().now.compaction_off;
  }
  // The frame starts a chunk: the next compaction copies whole chunks from it on.
  if (!g_recorder.file.flush()) return false;
  Frame& frame = state().now.frame;
  frame.offset = g_recorder.file.bytesWritten();
  frame.serial = state().now.serial;
  frame.time_ns = time_ns;
  frame.table_log_bytes = state().table_log.size();
  frame.totals = state().now.totals;
  if (!section(time_ns, SectionKind::kFrame, g_recorder.tracing.load(std::memory_order_relaxed),
               frame.totals))
    return false;
  if (!copyLive(state().frame_live)) {
    stopCompacting("out of memory for the live set's copy", ENOMEM);
  }
  state().frame_segments.clear();
  if (!state().frame_segments.reserve(g_recorder.segments.size())) {
    stopCompacting("out of memory for the segments' copy", ENOMEM);
  } else {
    g_recorder.segments.forEach([&](uint64_t address, const SegmentBlock& block) {
      state().frame_segments.push(SegmentEntry{address, block});
    });
  }
  uint64_t length = 4 * static_cast<uint64_t>(g_recorder.live.size());
  if (length < g_recorder.config.flight_events) length = g_recorder.config.flight_events;
  if (length < kMinimumFrame) length = kMinimumFrame;
  state().now.frame_length = length;
  if (first || compacted) state().now.compacted_bytes = g_recorder.file.bytesWritten();
  return true;
}

SectionTotals::Device* deviceTotals(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  int& slot = state().now.device_slot[device];
  if (slot < 0) {
    slot = state().now.totals.device_count++;
    state().now.totals.devices[slot] = SectionTotals::Device{device, 0, 0, 0};
  }
  return &state().now.totals.devices[slot];
}

bool afterEvent(uint64_t time_ns) {
  if (state().now.serial - state().now.frame.serial < state().now.frame_length) return true;
  return startFrame(time_ns, false);
}

}  // namespace

void runPreparing() {
  state().table_log.clear();
  g_recorder.writer.logTablesTo(g_recorder.config.flight ? &state().table_log : nullptr);
}

bool runOpened(uint64_t time_ns) {
  if (!g_recorder.config.flight) return true;
  FlightState::Now& flight = state().now;
  flight = FlightState::Now{};
  for (int& slot : flight.device_slot) slot = -1;
  state().freed_since_peak.clear();
  state().oom_live.clear();
  // The opening chunk's snapshot: its allocations are the file's first events.
  g_recorder.live.forEach([&](uint64_t, const LiveBlock& block) {
    ++flight.totals.events;
    ++flight.totals.allocations;
    ++flight.totals.untraced_allocations;
    flight.totals.allocated_bytes += block.size;
    if (SectionTotals::Device* device = deviceTotals(block.device))
      device->allocated_bytes += block.size;
  });
  flight.serial = flight.totals.events;
  flight.peak_bytes = g_recorder.current[0];
  if (flight.serial) {
    flight.peak_serial = flight.serial - 1;
    flight.peak_time_ns = time_ns;
  }
  for (int device = 0; device < kMaxDevices; ++device)
    if (SectionTotals::Device* totals =
            flight.device_slot[device] >= 0 ? deviceTotals(device) : nullptr) {
      totals->peak_bytes = g_recorder.current[device + 1];
      totals->peak_time_ns = time_ns;
    }
  flight.step_begin_ns = time_ns;
  // A flight file must be a file the recorder can write again and rename over.
  if (!g_recorder.file.mapped()) {
    warn("MEMTRACE_MODE=flight needs a trace that is a regular file it can map: ",
         "the trace keeps every event");
    flight.compaction_off = true;
  }
  return startFrame(time_ns, true);
}

uint64_t flightSerial() {
  return state().now.serial;
}

bool runAllocated(uint64_t address, const LiveBlock& block, uint64_t time_ns) {
  FlightState::Now& flight = state().now;
  uint64_t index = flight.serial++;
  ++flight.totals.events;
  ++flight.totals.allocations;
  flight.totals.allocated_bytes += block.size;
  if (!block.traced) ++flight.totals.untraced_allocations;
  if (SectionTotals::Device* device = deviceTotals(block.device)) {
    device->allocated_bytes += block.size;
    if (g_recorder.current[block.device + 1] > device->peak_bytes) {
      device->peak_bytes = g_recorder.current[block.device + 1];
      device->peak_time_ns = time_ns;
    }
  }
  uint64_t current = g_recorder.current[0];
  // Note [New peak]: strictly higher. Note [Keeping the peak without its events].
  if (current > flight.peak_bytes) {
    flight.peak_bytes = current;
    flight.peak_serial = index;
    flight.peak_time_ns = time_ns;
    state().freed_since_peak.clear();
  }
  if (current > flight.step_peak_bytes) {
    flight.step_peak_bytes = current;
    flight.step_peak_time_ns = time_ns;
    flight.step_phase = g_recorder.phase;
    flight.step_module = block.module;
  }
  (void)address;
  return afterEvent(time_ns);
}

void runFreed(uint64_t address, const LiveBlock& block) {
  FlightState::Now& flight = state().now;
  ++flight.serial;
  ++flight.totals.events;
  ++flight.totals.frees;
  if (flight.peak_serial != UINT64_MAX && block.serial <= flight.peak_serial &&
      !state().freed_since_peak.push(FlightEntry{address, block}))
    stopCompacting("out of memory for the live set at the peak", ENOMEM);
  // A frame starts on an allocation or a failure only: its time is the event's.
}

void runFailed(uint64_t time_ns, uint64_t size, uint32_t python_stack, uint32_t native_stack,
               const EventContext& context, uint32_t module, bool traced) {
  FlightState::Now& flight = state().now;
  uint64_t index = flight.serial++;
  ++flight.totals.events;
  ++flight.totals.failed_allocations;
  if (flight.oom_seen) return;
  flight.oom_seen = true;
  flight.oom_serial = index;
  flight.oom_time_ns = time_ns;
  LiveBlock request{};
  request.size = size;
  request.device = static_cast<int16_t>(context.device);
  request.level = context.level;
  request.api = context.api;
  request.python_stack = python_stack;
  request.native_stack = native_stack;
  request.module = module;
  request.thread_id = context.thread_id;
  request.stream = context.stream;
  request.traced = traced;
  flight.oom_failed = FlightEntry{0, request};
  if (!copyLive(state().oom_live)) {
    flight.oom_seen = false;
    stopCompacting("out of memory for the live set at the failed allocation", ENOMEM);
  }
}

bool flightStepEnd(uint64_t time_ns, uint64_t step) {
  FlightState::Now& flight = state().now;
  bool ok = g_recorder.writer.writeStepPeak(step, flight.step_begin_ns, time_ns,
                                            flight.step_peak_time_ns, flight.step_peak_bytes,
                                            flight.step_phase, flight.step_module);
  flight.step_begin_ns = time_ns;
  flight.step_peak_bytes = 0;
  flight.step_peak_time_ns = time_ns;
  flight.step_phase = g_recorder.phase;
  flight.step_module = 0;
  return ok;
}

RunPeak runPeak() {
  // Without the flight recorder the counters of memtrace_peak_bytes say it (since the load or
  // the last memtrace_reset_peak), without a time.
  if (!g_recorder.config.flight) return RunPeak{g_recorder.peak[0], 0};
  return RunPeak{state().now.peak_bytes, state().now.peak_time_ns};
}

void flightForget() {
  g_recorder.writer.logTablesTo(nullptr);
  state().table_log.clear();
  state().frame_live.clear();
  state().freed_since_peak.clear();
  state().oom_live.clear();
}

}  // namespace memtrace::detail
