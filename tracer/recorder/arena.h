// An append-only arena over mmap'd blocks for the recorder's strings and frame metadata:
// pointers into it stay valid until reset(), and it never calls malloc (see flat_map.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tracer/common/flat_map.h"

namespace memtrace {

class Arena {
 public:
  static constexpr size_t kBlockBytes = 1 << 20;

  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() { reset(); }

  // `bytes` of zeroed memory aligned to 8, or nullptr when no memory can be mapped.
  void* allocate(size_t bytes) {
    bytes = (bytes + 7) & ~size_t{7};
    if (!head_ || used_ + bytes > capacity_) {
      size_t capacity = bytes + sizeof(Block) > kBlockBytes ? bytes + sizeof(Block) : kBlockBytes;
      auto* block = static_cast<Block*>(mapPages(capacity));
      if (!block) return nullptr;
      block->previous = head_;
      block->capacity = capacity;
      head_ = block;
      used_ = sizeof(Block);
      capacity_ = capacity;
    }
    void* result = reinterpret_cast<uint8_t*>(head_) + used_;
    used_ += bytes;
    return result;
  }

  const char* copyString(const char* data, size_t size) {
    auto* copy = static_cast<char*>(allocate(size + 1));
    if (copy) std::memcpy(copy, data, size);
    return copy;
  }

  void reset() {
    while (head_) {
      Block* previous = head_->previous;
      unmapPages(head_, head_->capacity);
      head_ = previous;
    }
    used_ = capacity_ = 0;
  }

 private:
  struct Block {
    Block* previous;
    size_t capacity;
  };
  Block* head_ = nullptr;
  size_t used_ = 0;
  size_t capacity_ = 0;
};

}  // namespace memtrace
