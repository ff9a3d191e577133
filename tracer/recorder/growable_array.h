// A growable array over mmap'd memory (mremap doubles it): what the recorder keeps by index
// or in order (the tables by id, the flight recorder's live-set copies and its table log)
// without calling malloc inside an allocation hook (see flat_map.h). Elements must be
// trivially copyable; growth can fail, and then push() returns false.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "tracer/common/flat_map.h"

namespace memtrace {

template <typename T>
class GrowableArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  GrowableArray() = default;
  GrowableArray(const GrowableArray&) = delete;
  GrowableArray& operator=(const GrowableArray&) = delete;
  ~GrowableArray() { unmapPages(data_, capacity_ * sizeof(T)); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  bool reserve(size_t count) {
    if (count <= capacity_) return true;
    size_t capacity = capacity_ ? capacity_ : 4096 / sizeof(T) + 1;
    while (capacity < count) capacity *= 2;
    void* grown = data_ ? mremap(data_, capacity_ * sizeof(T), capacity * sizeof(T), MREMAP_MAYMOVE)
                        : mapPages(capacity * sizeof(T));
    if (!grown || grown == MAP_FAILED) return false;
    data_ = static_cast<T*>(grown);
    capacity_ = capacity;
    return true;
  }

  bool push(const T& value) {
    if (size_ == capacity_ && !reserve(size_ + 1)) return false;
    data_[size_++] = value;
    return true;
  }
  // Appends `count` elements; false (nothing appended) when it cannot grow.
  bool append(const T* values, size_t count) {
    if (!reserve(size_ + count)) return false;
    std::memcpy(static_cast<void*>(data_ + size_), values, count * sizeof(T));
    size_ += count;
    return true;
  }
  void clear() { size_ = 0; }
  void resize(size_t size) {  // only down, or within reserve()
    size_ = size;
  }
  void swap(GrowableArray& other) {
    T* data = data_;
    data_ = other.data_;
    other.data_ = data;
    size_t value = size_;
    size_ = other.size_;
    other.size_ = value;
    value = capacity_;
    capacity_ = other.capacity_;
    other.capacity_ = value;
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace memtrace
