// The bridge to PyTorch's caching allocator (Note [PyTorch's own allocator] in
// tracer/format/records.h), built once for each torch release found at build time, from that
// release's headers only: it links nothing of torch, so that loading it can never bind to another
// release's symbols. The allocator is found by name in the libc10_cuda.so the process loaded.
#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>
#include <stdio.h>

#include <exception>
#include <string>

#include "allocator/torch_bridge/bridge.h"

namespace {

namespace allocator = c10::cuda::CUDACachingAllocator;
using allocator::TraceEntry;

// The sink is libmemtrace.so's, which is never unloaded (-z nodelete): a copy outlives nothing.
MemtraceTorchSink g_sink;

uint64_t streamOf(const TraceEntry& entry) {
  return reinterpret_cast<uintptr_t>(entry.stream_);
}

// Called by PyTorch on the allocating thread with the device's allocator lock held (its
// recursive mutex): it calls nothing of PyTorch, and nothing that could wait for that lock.
// A tensor's entries come first, each tested alone (ALLOC, then FREE_COMPLETED, then the
// FREE_REQUESTED dropped): a switch over all the actions tested ranges before them.
void onTraceEntry(const TraceEntry& entry) {
  TraceEntry::Action action = entry.action_;
  int device = entry.device_;
  if (action == TraceEntry::ALLOC) {
    g_sink.tensor_alloc(device, streamOf(entry), entry.addr_, entry.size_);
    return;
  }
  if (action == TraceEntry::FREE_COMPLETED) {
    g_sink.tensor_free(device, streamOf(entry), entry.addr_);
    return;
  }
  if (action == TraceEntry::FREE_REQUESTED) return;  // the free completes later, or at once
  switch (action) {
    case TraceEntry::SEGMENT_ALLOC:
    case TraceEntry::SEGMENT_FREE:
    case TraceEntry::SEGMENT_MAP:
    case TraceEntry::SEGMENT_UNMAP: {
      int action = entry.action_ == TraceEntry::SEGMENT_ALLOC  ? 0
                   : entry.action_ == TraceEntry::SEGMENT_FREE ? 1
                   : entry.action_ == TraceEntry::SEGMENT_MAP  ? 2
                                                               : 3;
      g_sink.segment(action, device, entry.addr_, entry.size_, entry.mempool_.first,
                     entry.mempool_.second);
      return;
    }
    case TraceEntry::OOM:
      // addr_ is the device's free memory for this action (CachingDeviceAllocator.h).
      g_sink.out_of_memory(device, streamOf(entry), entry.size_, entry.addr_);
      return;
    default:
      // SNAPSHOT, and what a later release adds: nothing changes in memory.
      return;
  }
}

// PyTorch's native caching allocator in the process's libc10_cuda.so, or null with `error` said
// and *code set (-2: another allocator; -1: anything else).
allocator::CUDAAllocator* nativeAllocator(void* c10_cuda, char* error, size_t error_size,
                                          int* code) {
  *code = -1;
  // The allocator pointer, by its mangled name in the process's own libc10_cuda.so.
  auto* pointer = static_cast<std::atomic<allocator::CUDAAllocator*>*>(
      dlsym(c10_cuda, "_ZN3c104cuda20CUDACachingAllocator9allocatorE"));
  if (!pointer) {
    snprintf(error, error_size, "libc10_cuda.so has no caching allocator");
    return nullptr;
  }
  allocator::CUDAAllocator* instance = pointer->load();
  if (!instance) {
    snprintf(error, error_size, "PyTorch's CUDA allocator is not set up");
    return nullptr;
  }
  try {
    // Only the native caching allocator has trackers: cudaMallocAsync's refuses (the program's
    // events are then its own cudaMallocAsync calls), a pluggable one is memtrace's or another's.
    std::string name = instance->name();
    if (name != "native") {
      snprintf(error, error_size, "PyTorch's CUDA allocator is '%s', not its caching allocator",
               name.c_str());
      *code = -2;
      return nullptr;
    }
    if (!instance->initialized()) {
      snprintf(error, error_size, "PyTorch's caching allocator is not initialized yet");
      return nullptr;
    }
  } catch (const std::exception& failure) {
    snprintf(error, error_size, "PyTorch's allocator could not be asked: %s", failure.what());
    return nullptr;
  } catch (...) {
    snprintf(error, error_size, "PyTorch's allocator could not be asked");
    return nullptr;
  }
  return instance;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int memtrace_torch_check(
    void* c10_cuda, const MemtraceTorchSink* sink, char* error, size_t error_size) {
  if (!sink || sink->version != MEMTRACE_TORCH_SINK_VERSION) {
    snprintf(error, error_size, "the bridge was built for another memtrace");
    return -1;
  }
  int code;
  return nativeAllocator(c10_cuda, error, error_size, &code) ? 0 : code;
}

extern "C" __attribute__((visibility("default"))) int memtrace_torch_attach(
    void* c10_cuda, const MemtraceTorchSink* sink, char* error, size_t error_size) {
  if (!sink || sink->version != MEMTRACE_TORCH_SINK_VERSION) {
    snprintf(error, error_size, "the bridge was built for another memtrace");
    return -1;
  }
  int code;
  allocator::CUDAAllocator* instance = nativeAllocator(c10_cuda, error, error_size, &code);
  if (!instance) return code;
  g_sink = *sink;
  try {
    instance->attachAllocatorTraceTracker(onTraceEntry);
  } catch (const std::exception& failure) {
    snprintf(error, error_size, "PyTorch refused the tracker: %s", failure.what());
    return -1;
  } catch (...) {
    snprintf(error, error_size, "PyTorch refused the tracker");
    return -1;
  }
  return 0;
}

extern "C" __attribute__((visibility("default"))) int memtrace_torch_snapshot(
    void* c10_cuda, const MemtraceTorchHeld* held, char* error, size_t error_size) {
  int code;
  allocator::CUDAAllocator* instance = nativeAllocator(c10_cuda, error, error_size, &code);
  if (!instance || !held) return instance ? -1 : code;
  try {
    // Each device's part is read under that device's lock, as memory_snapshot() reads it; the
    // arguments left to their defaults, which every release has (all pools).
    allocator::SnapshotInfo snapshot = instance->snapshot();
    for (const allocator::SegmentInfo& segment : snapshot.segments) {
      held->segment(held->context, segment.device, segment.address, segment.total_size,
                    segment.is_expandable ? 1 : 0,
                    static_cast<uint64_t>(segment.owner_private_pool_id.first),
                    static_cast<uint64_t>(segment.owner_private_pool_id.second));
      // A block's address is its segment's plus the sizes before it, as torch/csrc/cuda/
      // Module.cpp's memory_snapshot() counts it: the blocks come in address order.
      uint64_t address = segment.address;
      for (const allocator::BlockInfo& block : segment.blocks) {
        if (block.allocated || block.active)
          held->tensor(held->context, segment.device, reinterpret_cast<uintptr_t>(segment.stream),
                       address, block.requested_size ? block.requested_size : block.size);
        address += block.size;
      }
    }
  } catch (const std::exception& failure) {
    snprintf(error, error_size, "PyTorch's allocator gave no snapshot: %s", failure.what());
    return -1;
  } catch (...) {
    snprintf(error, error_size, "PyTorch's allocator gave no snapshot");
    return -1;
  }
  return 0;
}
