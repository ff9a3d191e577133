// An open-addressing hash map (linear probing, backward-shift deletion) whose memory comes
// from mmap, never from malloc: the recorder uses it inside allocation hooks, where calling
// malloc could re-enter a hooked allocator or deadlock on its lock. The reader uses it too,
// because it is several times faster than std::unordered_map for the live set.
//
// Keys and values must be trivially copyable. Growth (doubling at 1/2 load) is the only
// operation that maps memory; it can fail, and then insert() returns nullptr, which the
// recorder treats like any other failure to record: it keeps the host running.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace memtrace {

// Page memory for tables and arenas; zero-filled. Returns nullptr on failure.
inline void* mapPages(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
inline void unmapPages(void* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

// The finalizer of MurmurHash3: spreads every input bit over the output, so keys that
// differ only in their low or high bits (aligned addresses, small ids) still scatter. For the
// tables' composite keys (python_stack.h, record_writer.h).
inline uint64_t mixBits(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Note [One multiply for a key]
// A table's slot is taken from the *high* bits of its hash (FlatMap::indexOf), and the hash of
// a plain key (an address, an id) is one multiply by 2^64 divided by the golden ratio
// (Fibonacci hashing, Knuth 6.4): every bit of the key reaches the product's high bits, and
// keys in arithmetic progression (aligned addresses, counted ids) land spread evenly over the
// table (the three-distance theorem); the product's low bits would not do, as they depend on
// the key's low bits only, the zeros of an aligned address.
// It replaced MurmurHash3's finalizer (two multiplies, three shifts, three xors) on the record
// path's live table, which hashes an address twice an event and again for each slot its
// backward-shift deletion moves: 10 instructions an event fewer in bench/record_instructions.cpp
// (recordAlloc and recordFree, 292.5 -> 282.5).
// A composite key's hash (mixBits) is mixed in every bit, so its high bits serve as well.
inline constexpr uint64_t kFibonacciMultiplier = 0x9e3779b97f4a7c15ULL;

template <typename Key>
struct FlatHash {
  uint64_t operator()(const Key& key) const {
    static_assert(std::is_integral_v<Key> || std::is_pointer_v<Key>);
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(key)) * kFibonacciMultiplier;
  }
};
template <>
struct FlatHash<uint64_t> {
  uint64_t operator()(uint64_t key) const { return key * kFibonacciMultiplier; }
};

template <typename Key, typename Value, typename Hash = FlatHash<Key>>
class FlatMap {
  static_assert(std::is_trivially_copyable_v<Key> && std::is_trivially_copyable_v<Value>);

 public:
  FlatMap() = default;
  FlatMap(const FlatMap&) = delete;
  FlatMap& operator=(const FlatMap&) = delete;
  FlatMap(FlatMap&& other) noexcept { swap(other); }
  FlatMap& operator=(FlatMap&& other) noexcept {
    swap(other);
    return *this;
  }
  ~FlatMap() { unmapPages(slots_, capacity_ * sizeof(Slot)); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  Value* find(const Key& key) {
    if (!capacity_) return nullptr;
    for (size_t i = indexOf(key);; i = next(i)) {
      Slot& slot = slots_[i];
      if (!slot.used) return nullptr;
      if (slot.key == key) return &slot.value;
    }
  }
  const Value* find(const Key& key) const { return const_cast<FlatMap*>(this)->find(key); }

  // Returns the value slot for `key`, inserting `value` if the key was absent;
  // *inserted says which. nullptr when the table could not grow. Always inlined: the recorder's
  // live table inserts on every allocation (bench/record_instructions.cpp) from two places, and
  // GCC inlines a function of this size only while it has one caller (a call cost 24
  // instructions an allocation more); growth, the rare part, stays a call.
  [[gnu::always_inline]] Value* insert(const Key& key, const Value& value,
                                       bool* inserted = nullptr) {
    bool absent = false;
    Value* slot = slotFor(key, &absent);
    if (slot && absent) *slot = value;
    if (inserted) *inserted = absent;
    return slot;
  }
  // The value slot for `key`, the key inserted if it was absent (*inserted true: its value is
  // then unset, for the caller to write in place, Note [The live block written in place]);
  // nullptr when the table could not grow.
  [[gnu::always_inline]] Value* slotFor(const Key& key, bool* inserted) {
    if ((size_ + 1) * 2 > capacity_ && !grow()) return nullptr;
    for (size_t i = indexOf(key);; i = next(i)) {
      Slot& slot = slots_[i];
      if (!slot.used) {
        slot.used = true;
        slot.key = key;
        ++size_;
        *inserted = true;
        return &slot.value;
      }
      if (slot.key == key) {
        *inserted = false;
        return &slot.value;
      }
    }
  }

  // Removes `key`, copying its value to *removed. Returns whether it was there.
  bool erase(const Key& key, Value* removed = nullptr) {
    return eraseWith(key, [removed](const Value& value) {
      if (removed) *removed = value;
    });
  }
  // Removes `key`, handing its value to `take(const Value&)` in place before it goes (Note [The
  // live block written in place]). Returns whether it was there.
  template <typename Take>
  [[gnu::always_inline]] bool eraseWith(const Key& key, Take take) {
    if (!capacity_) return false;
    size_t i = indexOf(key);
    for (;; i = next(i)) {
      if (!slots_[i].used) return false;
      if (slots_[i].key == key) break;
    }
    take(static_cast<const Value&>(slots_[i].value));
    // Backward-shift deletion: pull later members of the probe run into the hole, so
    // lookups never need tombstones and the table never degrades with churn.
    size_t hole = i;
    for (size_t j = next(i);; j = next(j)) {
      Slot& slot = slots_[j];
      if (!slot.used) break;
      size_t home = indexOf(slot.key);
      // Move the slot if its home is not in (hole, j] (cyclically).
      bool stays = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (!stays) {
        slots_[hole] = slot;
        hole = j;
      }
    }
    slots_[hole].used = false;
    --size_;
    return true;
  }

  void clear() {
    if (capacity_) std::memset(static_cast<void*>(slots_), 0, capacity_ * sizeof(Slot));
    size_ = 0;
  }

  // Calls fn(key, value) for every entry, in table order.
  template <typename Fn>
  void forEach(Fn&& fn) const {
    for (size_t i = 0; i < capacity_; ++i)
      if (slots_[i].used) fn(slots_[i].key, slots_[i].value);
  }
  // The same, where fn may change the values (not the keys).
  template <typename Fn>
  void forEachValue(Fn&& fn) {
    for (size_t i = 0; i < capacity_; ++i)
      if (slots_[i].used) fn(slots_[i].key, slots_[i].value);
  }

  // Reserves room for `count` entries without growing again.
  bool reserve(size_t count) {
    while (count * 2 > capacity_)
      if (!grow()) return false;
    return true;
  }

 private:
  struct Slot {
    Key key;
    Value value;
    bool used;
  };

  // The hash's high bits (Note [One multiply for a key]); only with a capacity (shift_ < 64).
  size_t indexOf(const Key& key) const { return Hash{}(key) >> shift_; }
  size_t next(size_t i) const { return (i + 1) & (capacity_ - 1); }

  bool grow() {
    size_t new_capacity = capacity_ ? capacity_ * 2 : 1024;
    auto* new_slots = static_cast<Slot*>(mapPages(new_capacity * sizeof(Slot)));
    if (!new_slots) return false;
    Slot* old_slots = slots_;
    size_t old_capacity = capacity_;
    slots_ = new_slots;
    capacity_ = new_capacity;
    shift_ = 64 - __builtin_ctzll(new_capacity);
    for (size_t i = 0; i < old_capacity; ++i) {
      if (!old_slots[i].used) continue;
      size_t j = indexOf(old_slots[i].key);
      while (slots_[j].used) j = next(j);
      slots_[j] = old_slots[i];
    }
    unmapPages(old_slots, old_capacity * sizeof(Slot));
    return true;
  }

  void swap(FlatMap& other) {
    std::swap(slots_, other.slots_);
    std::swap(capacity_, other.capacity_);
    std::swap(size_, other.size_);
    std::swap(shift_, other.shift_);
  }

  Slot* slots_ = nullptr;
  size_t capacity_ = 0;  // a power of two, or 0
  size_t size_ = 0;
  unsigned shift_ = 64;  // 64 - log2(capacity_): indexOf keeps the hash's top bits
};

}  // namespace memtrace
