#include "estimator/torchscript/meta_allocation_recorder.h"

#include <utility>

namespace memtrace::estimator::torchscript {

namespace {

struct AllocationRecord {
  uint64_t id;
  int64_t bytes;
};

// Where events go while recording; null otherwise. A storage may outlive the recording (the
// front end keeps its values), so its deleter must not depend on the recorder being alive.
std::vector<MetaAllocationEvent>* g_current_log = nullptr;
uint64_t g_next_allocation_id = 1;

void releaseRecord(void* context) {
  auto* record = static_cast<AllocationRecord*>(context);
  if (g_current_log) g_current_log->push_back({false, record->id, record->bytes});
  delete record;
}

class RecordingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    auto* record = new AllocationRecord{g_next_allocation_id++, static_cast<int64_t>(bytes)};
    if (g_current_log) g_current_log->push_back({true, record->id, record->bytes});
    return {nullptr, record, &releaseRecord, c10::Device(c10::DeviceType::Meta)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {}
};

// c10::SetAllocator keeps the pointer: the allocator must outlive every storage it made.
RecordingAllocator g_recording_allocator;
std::vector<MetaAllocationEvent> g_log;

}  // namespace

MetaAllocationRecorder::MetaAllocationRecorder()
    : previous_(c10::GetAllocator(c10::DeviceType::Meta)) {
  // Priority 0 is what REGISTER_ALLOCATOR gives the default meta allocator; equal priority
  // may replace it, and lets us put it back.
  c10::SetAllocator(c10::DeviceType::Meta, &g_recording_allocator, 0);
}

MetaAllocationRecorder::~MetaAllocationRecorder() {
  g_current_log = nullptr;
  c10::SetAllocator(c10::DeviceType::Meta, previous_, 0);
}

void MetaAllocationRecorder::begin() {
  g_log.clear();
  g_current_log = &g_log;
}

std::vector<MetaAllocationEvent> MetaAllocationRecorder::end() {
  g_current_log = nullptr;
  return std::exchange(g_log, {});
}

uint64_t MetaAllocationRecorder::allocationId(const c10::DataPtr& data) {
  if (data.get_deleter() != &releaseRecord) return 0;
  return static_cast<const AllocationRecord*>(data.get_context())->id;
}

}  // namespace memtrace::estimator::torchscript
