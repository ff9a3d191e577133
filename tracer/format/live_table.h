// The live set's rule, written once for both sides of the file (docs/trace-format.md,
// "Anomalies"): a free of an address that is not live is ignored; an allocation at an
// address that is live replaces the old allocation, as if the free we never saw had come
// first. The recorder applies it in the traced process (so it never writes such a free),
// the reader applies it again offline (tracer/reader/live_set.h) so that every view agrees.
//
// Header-only, no exceptions, no malloc: FlatMap's memory comes from mmap, and a table that
// cannot grow is reported (kNoMemory), never thrown, so the recorder can call it from inside
// an allocation hook.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tracer/common/flat_map.h"

namespace memtrace::format {

// What an allocation did to the live set.
enum class AllocOutcome : uint8_t {
  kNew,       // the address was not live
  kReplaced,  // the address was live: the old allocation was freed (implied) and replaced
  kNoMemory,  // the table could not grow: the allocation is not in the live set
};

// Live allocations by address; Value is what each keeps (trivially copyable).
template <typename Value>
class LiveTable {
 public:
  // `address` becomes live with `value`. On kReplaced, *replaced (if given) receives the
  // allocation that was live there. Always inlined: the recorder calls it on every allocation
  // (bench/record_instructions.cpp), from two places (an allocation, and one read from
  // PyTorch's snapshot), and GCC, which inlined it while it had one caller, stopped there.
  [[gnu::always_inline]] AllocOutcome allocate(uint64_t address, const Value& value,
                                               Value* replaced = nullptr) {
    bool inserted = false;
    Value* slot = live_.insert(address, value, &inserted);
    if (!slot) return AllocOutcome::kNoMemory;
    if (inserted) return AllocOutcome::kNew;
    if (replaced) *replaced = *slot;
    *slot = value;
    return AllocOutcome::kReplaced;
  }

  // The same, the value written in place by `fill(Value& slot, bool replacing)` (Note [The live
  // block written in place] in tracer/recorder/recorder.cpp): where `replacing`, the slot holds
  // the allocation that was live there until `fill` writes it. `fill` is not called on
  // kNoMemory.
  template <typename Fill>
  [[gnu::always_inline]] AllocOutcome allocateInPlace(uint64_t address, Fill fill) {
    bool inserted = false;
    Value* slot = live_.slotFor(address, &inserted);
    if (!slot) return AllocOutcome::kNoMemory;
    fill(*slot, !inserted);
    return inserted ? AllocOutcome::kNew : AllocOutcome::kReplaced;
  }

  // `address` is freed: true, with its allocation in *freed (if given), when it was live;
  // false (and nothing changes) when it was not.
  bool free(uint64_t address, Value* freed = nullptr) { return live_.erase(address, freed); }
  // The same, the allocation handed to `take(const Value&)` in place, before it leaves.
  template <typename Take>
  [[gnu::always_inline]] bool freeWith(uint64_t address, Take take) {
    return live_.eraseWith(address, take);
  }

  const Value* find(uint64_t address) const { return live_.find(address); }
  Value* find(uint64_t address) { return live_.find(address); }
  size_t size() const { return live_.size(); }

  // Calls fn(address, value) for every live allocation, in no particular order.
  template <typename Fn>
  void forEach(Fn&& fn) const {
    live_.forEach(fn);
  }
  // The same, where fn may change the values.
  template <typename Fn>
  void forEachValue(Fn&& fn) {
    live_.forEachValue(fn);
  }

 private:
  FlatMap<uint64_t, Value> live_;
};

}  // namespace memtrace::format
