// Sees every storage that meta-device kernels allocate and release while an op runs.
//
// Note [Meta allocations]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The front end runs each op on meta tensors: PyTorch's own kernels compute output shapes,
// strides, dtypes and aliasing without touching data. Composite ops (matmul, linear, reshape)
// run their CompositeImplicitAutograd decomposition on meta exactly as on CUDA, so a
// temporary they make, such as the contiguous copy matmul takes of a transposed operand, is a
// meta storage allocated and released inside the op. Meta storages come from the allocator
// registered for DeviceType::Meta (at::empty_meta -> GetAllocator(kMeta)); installing a
// recording allocator there shows those allocations, in order, with their sizes. Meta data
// pointers are null either way: the recorder hands out null pointers with a context whose
// deleter reports the release.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <vector>

namespace memtrace::estimator::torchscript {

struct MetaAllocationEvent {
  bool allocate;  // false: released
  uint64_t id;    // MetaAllocationRecorder::allocationId() of the storage
  int64_t bytes;
};

// Installs itself as the meta allocator for its lifetime and restores the previous one after.
// Not thread-safe: the front end is single-threaded, and so is the recording.
class MetaAllocationRecorder {
 public:
  MetaAllocationRecorder();
  ~MetaAllocationRecorder();
  MetaAllocationRecorder(const MetaAllocationRecorder&) = delete;
  MetaAllocationRecorder& operator=(const MetaAllocationRecorder&) = delete;

  // Events between begin() and end() are returned by end(); others are not kept.
  void begin();
  std::vector<MetaAllocationEvent> end();

  // The id of a storage allocated while this recorder was installed; 0 for any other.
  static uint64_t allocationId(const c10::DataPtr& data);

 private:
  c10::Allocator* previous_;
};

// The recording of one op: begin() when made, end() by events(), or by the destructor when the
// op throws (what it allocated is then not kept).
class MetaAllocationScope {
 public:
  explicit MetaAllocationScope(MetaAllocationRecorder& recorder) : recorder_(recorder) {
    recorder_.begin();
  }
  ~MetaAllocationScope() {
    if (open_) recorder_.end();
  }
  MetaAllocationScope(const MetaAllocationScope&) = delete;
  MetaAllocationScope& operator=(const MetaAllocationScope&) = delete;

  // Ends the recording: what the op allocated and released, in order.
  std::vector<MetaAllocationEvent> events() {
    open_ = false;
    return recorder_.end();
  }

 private:
  MetaAllocationRecorder& recorder_;
  bool open_ = true;
};

}  // namespace memtrace::estimator::torchscript
