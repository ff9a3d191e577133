// The one offline replay of the live set. The reader hands a free with size 0 (the file does
// not repeat the size); LiveReplay keeps the live allocations by address, applies the live
// set's rule (tracer/format/live_table.h, docs/trace-format.md "Anomalies") once, and hands its
// consumer every event already resolved: a free carries the allocation it frees, and an
// allocation over a live address comes with the free it implies. Every view that needs sizes
// or the live set reads through it; memory is the live set, never the file.
#pragma once

#include <cstdint>
#include <vector>

#include "tracer/format/live_table.h"
#include "tracer/reader/reader.h"

namespace memtrace::reader {

// A live allocation, as the event that made it said.
struct Allocation {
  uint64_t size;
  uint64_t stream;
  uint32_t python_stack;
  uint32_t native_stack;
  uint32_t module;  // string id of the nn.Module (0: none); a kOwnerModule record replaces it
  int32_t device;
  bool traced;
  // As told so far (kCategory records); kUnknown when none was.
  format::Category category = format::Category::kUnknown;
  // The training phase the trace was in when it was made (kTrainingPhase records, a section's
  // phase): which of the step's calls made it (Note [The step's own calls] in
  // estimator/passes/attribute_peak.h).
  format::TrainingPhase phase = format::TrainingPhase::kNone;
  uint64_t index = 0;  // the event that made it
  // Its size is a simulated library's answer that was not exact (kSimulatedSize, Note [Sizes
  // in the trace]): then `size_at_most` is how large it could have been (UINT64_MAX: no bound).
  bool unknown_size = false;
  uint64_t size_at_most = 0;
};

inline Allocation allocationOf(const Event& event) {
  Allocation allocation{event.size,   event.context->stream, event.python_stack, event.native_stack,
                        event.module, event.context->device, event.traced};
  allocation.index = event.index;
  return allocation;
}

// What a consumer of LiveReplay receives; derive from it and hide the members you need
// (called statically, like RecordVisitor's). For each event, in this order:
//   stopBefore(event)  true: stop reading before the event changes anything (a replay
//                      to a point); the live set stays as it was after the previous one
//   onEvent(event)     every event, as read (RecordVisitor's)
//   then one of
//   onAlloc(event, allocation)           an allocation; when its address was live,
//     preceded by onImpliedFree(event, replaced): the free the recorder never saw
//   onFree(event, freed)                 a free of a live allocation
//   onUnmatchedFree(event)               a free of an address not live (ignored by the rule)
//   onFailedAlloc(event)                 a failed allocation (the live set is unchanged)
// and for a kCategory record, onCategory(address, category, allocation): the live allocation
// it now applies to, already updated, or nullptr when the address starts none (ignored); the
// same for a kOwnerModule record, onOwnerModule(address, module, allocation); for a
// kSimulatedSize record, onSizeAnswer(size, linked, newly): the live allocation at its address
// (marked unknown_size; `newly` when it was not before), or nullptr (an answer told at the
// question links to the asking thread's next allocation of its bytes, which onAlloc then
// receives marked: Note [Sizes in the trace]).
struct LiveVisitor : RecordVisitor {
  void onCategory(uint64_t /*address*/, format::Category, const Allocation* /*allocation*/) {}
  void onOwnerModule(uint64_t /*address*/, uint32_t /*module*/, const Allocation* /*allocation*/) {}
  void onSizeAnswer(const SimulatedSize&, const Allocation* /*linked*/, bool /*newly*/) {}
  bool stopBefore(const Event&) { return false; }
  void onAlloc(const Event&, const Allocation&) {}
  void onImpliedFree(const Event& /*allocation*/, const Allocation& /*replaced*/) {}
  void onFree(const Event&, const Allocation&) {}
  void onUnmatchedFree(const Event&) {}
  void onFailedAlloc(const Event&) {}
};

// A RecordVisitor for TraceReader::read(): forwards every record to `consumer` and replays
// the live set. After read(), live() is the live set at the end (or where stopBefore()
// stopped). Throws TraceError when the live set cannot grow.
template <typename Consumer>
class LiveReplay {
 public:
  explicit LiveReplay(Consumer& consumer) : consumer_(consumer) {}

  const format::LiveTable<Allocation>& live() const { return live_; }

  void onProcessInfo(const ProcessInfo& info) { consumer_.onProcessInfo(info); }
  void onDistributed(const DistributedInfo& info) { consumer_.onDistributed(info); }
  void onString(uint32_t id, std::string_view text) { consumer_.onString(id, text); }
  void onPythonFrame(uint32_t id, const PythonFrame& frame) { consumer_.onPythonFrame(id, frame); }
  void onPythonStack(uint32_t id, const StackNode& node) { consumer_.onPythonStack(id, node); }
  void onNativeStack(uint32_t id, const NativeNode& node) { consumer_.onNativeStack(id, node); }
  void onLoadedObject(uint32_t id, const LoadedObject& object) {
    consumer_.onLoadedObject(id, object);
  }
  void onDevice(const Device& device) { consumer_.onDevice(device); }
  void onContext(const Context& context) { consumer_.onContext(context); }
  void onModuleScope(int64_t thread, uint32_t module) { consumer_.onModuleScope(thread, module); }
  void onMarker(const Marker& marker) { consumer_.onMarker(marker); }
  void onTrainingPhase(uint64_t time_ns, format::TrainingPhase phase) {
    if (!stopped_) phase_ = phase;
    consumer_.onTrainingPhase(time_ns, phase);
  }
  void onStepEnd(uint64_t time_ns, uint64_t step) { consumer_.onStepEnd(time_ns, step); }
  void onMemoryMap(const MemoryMap& map) { consumer_.onMemoryMap(map); }
  void onMemoryUnmap(const AddressRange& range) { consumer_.onMemoryUnmap(range); }
  void onAddressReserve(const AddressRange& range) { consumer_.onAddressReserve(range); }
  void onAddressFree(const AddressRange& range) { consumer_.onAddressFree(range); }
  void onDeviceMemory(const DeviceMemory& reading) { consumer_.onDeviceMemory(reading); }
  void onSimulatedDevice(const SimulatedDeviceInfo& info) { consumer_.onSimulatedDevice(info); }
  void onDeviceRead(const DeviceRead& read) { consumer_.onDeviceRead(read); }
  void onSimulatedSize(const SimulatedSize& size) {
    if (stopped_) return;
    consumer_.onSimulatedSize(size);
    Allocation* linked = nullptr;
    bool newly = false;
    if (size.address) {
      linked = live_.find(size.address);
      if (linked) {
        newly = !linked->unknown_size;
        linked->unknown_size = true;
        linked->size_at_most = size.at_most;
      }
    } else if (size.bytes) {
      // Answers waiting for their allocation are few: one or two a library call.
      if (pending_.size() >= 64) pending_.erase(pending_.begin());
      pending_.push_back(PendingSize{size.context->thread_id, size.bytes, size.at_most,
                                     format::kSizeLinkAllocations});
    }
    consumer_.onSizeAnswer(size, static_cast<const Allocation*>(linked), newly);
  }

  void onAssumedValue(const AssumedValue& value) { consumer_.onAssumedValue(value); }
  void onSection(const Section& section) {
    if (!stopped_) phase_ = section.phase;
    consumer_.onSection(section);
  }
  void onStepPeak(const StepPeak& step) { consumer_.onStepPeak(step); }
  void onGeneratedCode(const GeneratedCode& code) { consumer_.onGeneratedCode(code); }
  void onSegment(const Segment& segment) {
    if (!stopped_) consumer_.onSegment(segment);
  }
  void onCategory(uint64_t address, format::Category category) {
    if (stopped_) return;
    Allocation* allocation = live_.find(address);
    if (allocation) allocation->category = category;
    consumer_.onCategory(address, category, static_cast<const Allocation*>(allocation));
  }
  void onOwnerModule(uint64_t address, uint32_t module) {
    if (stopped_) return;
    Allocation* allocation = live_.find(address);
    if (allocation) allocation->module = module;
    consumer_.onOwnerModule(address, module, static_cast<const Allocation*>(allocation));
  }

  void onEvent(const Event& event) {
    if (consumer_.stopBefore(event)) {
      stopped_ = true;
      return;
    }
    consumer_.onEvent(event);
    switch (event.kind) {
      case EventKind::kAlloc: {
        Allocation allocation = allocationOf(event);
        allocation.phase = phase_;
        if (!pending_.empty()) linkPending(event, &allocation);
        Allocation replaced;
        switch (live_.allocate(event.address, allocation, &replaced)) {
          case format::AllocOutcome::kNoMemory:
            throw TraceError("out of memory for the live set");
          case format::AllocOutcome::kReplaced:
            consumer_.onImpliedFree(event, replaced);
            break;
          case format::AllocOutcome::kNew:
            break;
        }
        consumer_.onAlloc(event, allocation);
        return;
      }
      case EventKind::kFree: {
        Allocation freed;
        if (live_.free(event.address, &freed))
          consumer_.onFree(event, freed);
        else
          consumer_.onUnmatchedFree(event);
        return;
      }
      case EventKind::kFailedAlloc:
        consumer_.onFailedAlloc(event);
        return;
    }
  }

  bool done() const { return stopped_ || consumer_.done(); }

 private:
  // A kSimulatedSize answer told at the question, waiting for the allocation that holds it.
  struct PendingSize {
    int64_t thread_id;
    uint64_t bytes;
    uint64_t at_most;
    int allocations_left;  // of its thread's, before it is given up
  };

  // The asking thread's allocation of exactly the answer's bytes is the one that holds it.
  void linkPending(const Event& event, Allocation* allocation) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->thread_id != event.context->thread_id) {
        ++it;
        continue;
      }
      if (it->bytes == event.size && !allocation->unknown_size) {
        allocation->unknown_size = true;
        allocation->size_at_most = it->at_most;
        it = pending_.erase(it);
        continue;
      }
      it = --it->allocations_left <= 0 ? pending_.erase(it) : it + 1;
    }
  }

  Consumer& consumer_;
  format::LiveTable<Allocation> live_;
  std::vector<PendingSize> pending_;
  format::TrainingPhase phase_ = format::TrainingPhase::kNone;
  bool stopped_ = false;
};

}  // namespace memtrace::reader
