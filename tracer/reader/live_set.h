// The one offline replay of the live set. The reader hands a free with size 0 (the file does
// not repeat the size); LiveReplay keeps the live allocations by address, applies the live
// set's rule (tracer/format/live_table.h, docs/trace-format.md "Anomalies") once, and hands its
// consumer every event already resolved: a free carries the allocation it frees, and an
// allocation over a live address comes with the free it implies. Every view that needs sizes
// or the live set reads through it; memory is the live set, never the file.
#pragma once

#include <cstdint>

#include "tracer/format/live_table.h"
#include "tracer/reader/reader.h"

namespace memtrace::reader {

// A live allocation, as the event that made it said.
struct Allocation {
  uint64_t size;
  uint64_t stream;
  uint32_t python_stack;
  uint32_t native_stack;
  uint32_t module;  // string id of the nn.Module (0: none)
  int32_t device;
  bool traced;
  // As told so far (kCategory records); kUnknown when none was.
  format::Category category = format::Category::kUnknown;
};

inline Allocation allocationOf(const Event& event) {
  return Allocation{event.size,   event.context->stream, event.python_stack, event.native_stack,
                    event.module, event.context->device, event.traced};
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
// it now applies to, already updated, or nullptr when the address starts none (ignored).
struct LiveVisitor : RecordVisitor {
  void onCategory(uint64_t /*address*/, format::Category, const Allocation* /*allocation*/) {}
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
  void onAssumedValue(const AssumedValue& value) { consumer_.onAssumedValue(value); }
  void onSection(const Section& section) { consumer_.onSection(section); }
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

  void onEvent(const Event& event) {
    if (consumer_.stopBefore(event)) {
      stopped_ = true;
      return;
    }
    consumer_.onEvent(event);
    switch (event.kind) {
      case EventKind::kAlloc: {
        Allocation allocation = allocationOf(event);
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
  Consumer& consumer_;
  format::LiveTable<Allocation> live_;
  bool stopped_ = false;
};

}  // namespace memtrace::reader
