#include "estimator/passes/replay_caching_allocator.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_set>

// Note [Caching allocator replay]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The model follows c10/cuda/CUDACachingAllocator.cpp for one device and one stream with the
// default configuration (no max_split_size_mb, no expandable segments, no garbage collection
// threshold) and as much device memory as it asks for, so no cached segment is ever released:
//   - a request of n bytes becomes a block of round_size(n): n rounded up to a multiple of
//     kMinBlockSize, and at least that;
//   - blocks of at most kSmallSize come from the small pool, larger ones from the large pool;
//   - get_free_block takes the smallest free block of the pool that is large enough, the
//     lowest address among equal sizes (BlockComparatorSize orders by size, then address);
//   - without one, alloc_block asks for a new segment of get_allocation_size(): kSmallBuffer
//     for small blocks, kLargeBuffer below kMinLargeAlloc, else a multiple of kRoundLarge;
//   - should_split: the block found is split if what remains is at least kMinBlockSize (small
//     pool) or more than kSmallSize (large pool); otherwise the whole block is handed out and
//     allocated_bytes counts all of it, while requested_bytes counts only n;
//   - free_block merges a released block with the free neighbours of its segment;
//   - with a memory limit (a --budget), a segment that would not fit makes the allocator
//     release every cached segment that is wholly free (release_cached_blocks, after
//     release_available_cached_blocks, which does nothing without max_split_size_mb) and try
//     again; if it still does not fit, the allocation fails with out of memory.
// A zero-byte request allocates nothing (the allocator returns a null pointer for it).
// The numbers come from the device profile (estimator/profiles/), not from this file; the rules
// themselves are shared with the report (Note [PyTorch's caching allocator rules] in
// tracer/format/caching_allocator.h).

// Note [The cuBLASLt workspace]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// addmm with a 1-d bias (what nn.Linear runs for 2-d and contiguous 3-d inputs, and GPT-2's
// Conv1D calls itself) runs through cuBLASLt, with the bias fused (at::native's
// addmm_out_cuda_impl: useLtInterface, unless DISABLE_ADDMM_CUDA_LT=1); so does
// _addmm_activation. Its workspace comes from at::cuda::getCUDABlasLtWorkspace()
// (aten/src/ATen/cuda/CublasHandlePool.cpp), which first takes the cuBLAS handle (and with it
// the cuBLAS workspace, if this is the first cuBLAS call), then:
//   - torch 2.9 to 2.11: allocates a workspace of its own per (handle, stream) through the
//     caching allocator, CUBLASLT_WORKSPACE_SIZE KiB (default 1024), capped at the cuBLAS
//     workspace's size from 2.11 on, and keeps it: 1 MiB more than cuBLAS's on every model with
//     a biased linear layer, as an H200 with torch 2.11 showed (docs/gpu-record-h200.md);
//   - torch 2.12 and later (TORCH_CUBLASLT_UNIFIED_WORKSPACE unset counts as 1; checked in the
//     machine code of 2.14.1's libtorch_cuda.so): hands out the cuBLAS workspace itself, so
//     nothing is allocated beside it. TORCH_CUBLASLT_UNIFIED_WORKSPACE=0 brings the 2.11
//     behaviour back (a profile of one's own without "last_torch_release").
// The profile says the size and the last release that allocates it (applyTorchRelease). A
// graph file records no op's inputs: there an addmm is taken to have its bias (what
// F.linear dispatches to), an mm not.

namespace memtrace::estimator {

namespace {

class CachingAllocatorModel {
 public:
  static constexpr int32_t kNoBlock = -1;

  CachingAllocatorModel(const CachingAllocatorRules& rules, std::optional<int64_t> limit)
      : rules_(rules), limit_(limit) {}

  int32_t allocate(int64_t bytes) {
    if (bytes <= 0) return kNoBlock;
    int64_t size = roundSize(bytes);
    bool small = format::smallPool(rules_, size);
    Pool& pool = small ? small_pool_ : large_pool_;
    int32_t block;
    auto found = pool.lower_bound({size, std::numeric_limits<int64_t>::min(), 0});
    if (found != pool.end()) {
      block = std::get<2>(*found);
      pool.erase(found);
    } else {
      int64_t segment_bytes = segmentSize(size);
      if (limit_ && reserved_ + segment_bytes > *limit_) {
        releaseCachedSegments();
        if (reserved_ + segment_bytes > *limit_) {
          out_of_memory_ = true;
          return kNoBlock;
        }
      }
      block = newBlock(next_segment_address_, segment_bytes, small);
      next_segment_address_ += segment_bytes;
      reserved_ += segment_bytes;
      peak_reserved_ = std::max(peak_reserved_, reserved_);
      ++segments_;
    }
    if (shouldSplit(blocks_[block], size)) {
      Block& original = blocks_[block];
      int32_t remainder = newBlock(original.address + size, original.size - size, small);
      // newBlock may have moved the vector: index again.
      Block& head = blocks_[block];
      Block& tail = blocks_[remainder];
      tail.previous = block;
      tail.next = head.next;
      if (head.next != kNoBlock) blocks_[head.next].previous = remainder;
      head.next = remainder;
      head.size = size;
      pool.insert(key(remainder));
    }
    Block& chosen = blocks_[block];
    chosen.allocated = true;
    chosen.requested = bytes;
    allocated_ += chosen.size;
    requested_ += bytes;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    peak_requested_ = std::max(peak_requested_, requested_);
    return block;
  }

  void release(int32_t block) {
    if (block == kNoBlock) return;
    Block& freed = blocks_[block];
    freed.allocated = false;
    allocated_ -= freed.size;
    requested_ -= freed.requested;
    freed.requested = 0;
    Pool& pool = freed.small ? small_pool_ : large_pool_;
    int32_t merged = block;
    int32_t previous = freed.previous;
    if (previous != kNoBlock && !blocks_[previous].allocated) {
      pool.erase(key(previous));
      absorbNext(previous);
      merged = previous;
    }
    int32_t next = blocks_[merged].next;
    if (next != kNoBlock && !blocks_[next].allocated) {
      pool.erase(key(next));
      absorbNext(merged);
    }
    pool.insert(key(merged));
    if (!rules_.caches_freed_blocks) releaseCachedSegments();
  }

  int64_t requested() const { return requested_; }
  int64_t allocated() const { return allocated_; }
  int64_t reserved() const { return reserved_; }
  int64_t peakRequested() const { return peak_requested_; }
  int64_t peakAllocated() const { return peak_allocated_; }
  int64_t peakReserved() const { return peak_reserved_; }
  // torch.cuda.reset_peak_memory_stats(): the peaks start again from what is held now.
  void resetPeaks() {
    peak_requested_ = requested_;
    peak_allocated_ = allocated_;
    peak_reserved_ = reserved_;
  }
  int64_t segments() const { return segments_; }
  bool outOfMemory() const { return out_of_memory_; }

 private:
  struct Block {
    int64_t address;
    int64_t size;
    int64_t requested = 0;
    bool small;
    bool allocated = false;
    int32_t previous = kNoBlock;
    int32_t next = kNoBlock;
  };
  // Free blocks by (size, address, index): the first not below (size, -inf) is the best fit.
  using Pool = std::set<std::tuple<int64_t, int64_t, int32_t>>;

  int64_t roundSize(int64_t bytes) const { return format::roundRequest(rules_, bytes); }

  int64_t segmentSize(int64_t size) const { return format::segmentSize(rules_, size); }

  bool shouldSplit(const Block& block, int64_t size) const {
    return format::shouldSplit(rules_, block.small, block.size - size);
  }

  int32_t newBlock(int64_t address, int64_t size, bool small) {
    blocks_.push_back(Block{address, size, 0, small});
    return static_cast<int32_t>(blocks_.size() - 1);
  }

  std::tuple<int64_t, int64_t, int32_t> key(int32_t block) const {
    return {blocks_[block].size, blocks_[block].address, block};
  }

  // Gives back every segment that is one free block (a block with no neighbours).
  void releaseCachedSegments() {
    for (Pool* pool : {&small_pool_, &large_pool_}) {
      for (auto entry = pool->begin(); entry != pool->end();) {
        const Block& block = blocks_[std::get<2>(*entry)];
        if (block.previous == kNoBlock && block.next == kNoBlock) {
          reserved_ -= block.size;
          --segments_;
          entry = pool->erase(entry);
        } else {
          ++entry;
        }
      }
    }
  }

  // Grows `block` over its (free) successor, which leaves the segment's chain.
  void absorbNext(int32_t block) {
    Block& head = blocks_[block];
    int32_t next = head.next;
    head.size += blocks_[next].size;
    head.next = blocks_[next].next;
    if (head.next != kNoBlock) blocks_[head.next].previous = block;
  }

  CachingAllocatorRules rules_;
  std::optional<int64_t> limit_;
  bool out_of_memory_ = false;
  std::vector<Block> blocks_;
  Pool small_pool_;
  Pool large_pool_;
  int64_t next_segment_address_ = 0;
  int64_t requested_ = 0;
  int64_t allocated_ = 0;
  int64_t reserved_ = 0;
  int64_t peak_requested_ = 0;
  int64_t peak_allocated_ = 0;
  int64_t peak_reserved_ = 0;
  int64_t segments_ = 0;
};

bool contains(const std::vector<std::string>& names, std::string_view op) {
  return std::find(names.begin(), names.end(), op) != names.end();
}

size_t dimensions(const Graph& graph, ValueId value) {
  return graph.value(value).shape.size();
}

// Whether the node runs through cuBLASLt: Note [The cuBLASLt workspace].
bool runsThroughCublasLt(const Graph& graph, const Node& node, const DeviceProfile& profile) {
  if (!contains(profile.cublaslt_ops, node.op)) return false;
  if (node.inputs.empty()) return node.op != "aten::linear";  // a graph file: addmm has its bias
  if (node.op == "aten::linear") {
    // linear(input, weight, bias): a bias, and an input addmm takes (2-d, or 3-d flattened).
    return node.inputs.size() >= 3 && dimensions(graph, node.inputs[2]) == 1 &&
           (dimensions(graph, node.inputs[0]) == 2 || dimensions(graph, node.inputs[0]) == 3);
  }
  return dimensions(graph, node.inputs[0]) == 1;  // addmm(self, ...): self is the bias
}

// Note [cuBLAS workspaces of a training step]
// cuBLAS keeps a workspace per (handle, stream), and PyTorch a cuBLAS handle per thread
// (CublasHandlePool.cpp): the forward runs on the caller's thread, the backward on the autograd
// engine's thread for the device, so a step that multiplies matrices in both holds two
// workspaces. A recorded step is the steady state: step 1 made them, so they exist before the
// step starts. (Seen on an H200: before step 2 of GPT-2 and BERT-base, 68 MiB above the
// weights, the optimizer state and the inputs; docs/gpu-record-h200.md.) The cuBLASLt workspace
// of the torch releases that keep one (Note [The cuBLASLt workspace]) is per handle too: one per
// thread that runs a cuBLASLt op. Returns the step's workspaces, cuBLAS's then cuBLASLt's, each
// with the first node of its thread that needs it (where step 1 took it).
std::vector<Workspace> stepWorkspaces(const Graph& graph, const DeviceProfile& profile) {
  NodeId first[2];     // the first cuBLAS op on: the caller's thread, autograd's
  NodeId lt_first[2];  // the first cuBLASLt op on them
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    const Node& node = graph.nodes[index];
    bool lt = runsThroughCublasLt(graph, node, profile);
    if (profile.cublas_workspace_bytes == 0 || !(lt || contains(profile.cublas_ops, node.op)))
      continue;
    int thread = node.phase == format::TrainingPhase::kBackward ? 1 : 0;
    if (!first[thread].valid()) first[thread] = NodeId(index);
    if (lt && profile.cublaslt_workspace_bytes > 0 && !lt_first[thread].valid())
      lt_first[thread] = NodeId(index);
  }
  std::vector<Workspace> workspaces;
  for (NodeId node : first)
    if (node.valid()) workspaces.push_back({"cuBLAS", profile.cublas_workspace_bytes, node});
  for (NodeId node : lt_first)
    if (node.valid()) workspaces.push_back({"cuBLASLt", profile.cublaslt_workspace_bytes, node});
  return workspaces;
}

// Note [The steps before the measured one]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A training step is measured in the steady state, after steps that shaped the caching
// allocator's pools: step 1 made the optimizer's state in its optimizer phase (AdamW's
// exp_avg and exp_avg_sq, zeros_like each parameter, allocated while that step's gradients
// were held), and each step's gradients and activations were carved from the segments the
// weights and that state left. Which free block a later request finds, and whether it is split
// (Note [Caching allocator replay]), follows from that history: pp_lcnet_v4's AdamW step on
// the simulated H100 finds a 2 MiB tail of the 20 MiB segment that holds its four 1,179,648-B
// weights, their state and their gradients, and takes it whole for the first such gradient
// (917,504 B more allocated than requested, every step after the first); with the weights
// and the state allocated together before the step, no such tail was free and the estimate
// was 917,504 B (−1.45 %) under max_memory_allocated with requested_bytes exact. So a training
// step's replay runs the step twice before the measured one, as the card ran it: once making
// the optimizer's state when its optimizer phase starts (step 1), once as recorded (step 2);
// what a step leaves allocated at its end is freed as the next begins; then the peaks start
// again (reset_peak_memory_stats) and the step is replayed and measured. Against the card
// (tests/estimator/referee.py --case ...): pp_lcnet_v4's, pp_ocrv6_small_rec's and
// pp_ocrv6_tiny_rec's steps −1.45 % → 0 (max_memory_reserved too), mobilenet_v3_small's
// −0.82 %, swin_t's +0.63 %, poolformer's +0.57 %, nemotron_h's −0.43 % → 0. Assumed: step 1
// allocates as the steady step does but for the state (its cuBLAS workspaces are taken before
// it, as for the measured step: Note [cuBLAS workspaces of a training step]).
void replayEarlierStep(const Graph& graph, const std::vector<TimelineEvent>& timeline,
                       CachingAllocatorModel& model, std::vector<int32_t>& blocks,
                       bool make_state) {
  auto make_optimizer_state = [&] {
    for (size_t index = 0; index < graph.storages.size(); ++index) {
      if (graph.storages[index].origin == StorageOrigin::kOptimizerState) {
        blocks[index] = model.allocate(graph.storages[index].bytes);
      }
    }
    make_state = false;
  };
  for (const TimelineEvent& event : timeline) {
    if (make_state && graph.node(event.node).phase == format::TrainingPhase::kOptimizer) {
      make_optimizer_state();
    }
    if (event.kind == MemoryEventKind::kAllocate) {
      blocks[event.storage.value] = model.allocate(graph.storage(event.storage).bytes);
    } else {
      model.release(blocks[event.storage.value]);
      blocks[event.storage.value] = CachingAllocatorModel::kNoBlock;
    }
  }
  if (make_state) make_optimizer_state();  // a step without an optimizer phase
  for (size_t index = 0; index < graph.storages.size(); ++index) {
    StorageOrigin origin = graph.storages[index].origin;
    if ((origin == StorageOrigin::kActivation || origin == StorageOrigin::kHost) &&
        blocks[index] != CachingAllocatorModel::kNoBlock) {
      model.release(blocks[index]);
      blocks[index] = CachingAllocatorModel::kNoBlock;
    }
  }
}

}  // namespace

AllocatorReplay replayCachingAllocator(const Graph& graph,
                                       const std::vector<TimelineEvent>& timeline,
                                       const DeviceProfile& profile,
                                       std::optional<int64_t> memory_limit_bytes) {
  CachingAllocatorModel model(profile.allocator, memory_limit_bytes);
  std::vector<int32_t> blocks(graph.storages.size(), CachingAllocatorModel::kNoBlock);

  // Module.to(device) moves the weights before anything else, then (training) the first
  // optimizer step makes the optimizer's state, then the caller makes inputs. A training step
  // makes the state in the steps replayed before it (Note [The steps before the measured one]).
  bool earlier_steps = graph.training_step;
  for (StorageOrigin first : {StorageOrigin::kParameter, StorageOrigin::kOptimizerState}) {
    if (earlier_steps && first == StorageOrigin::kOptimizerState) continue;
    for (size_t index = 0; index < graph.storages.size(); ++index) {
      StorageOrigin origin = graph.storages[index].origin;
      if (first == StorageOrigin::kParameter ? isWeight(origin) : origin == first) {
        blocks[index] = model.allocate(graph.storages[index].bytes);
      }
    }
  }
  AllocatorReplay result;
  bool cublas_workspace_allocated = false;
  bool cublaslt_workspace_allocated = false;
  // The workspaces live now: the library's ones, kept for the process's lifetime, and a
  // convolution's while its call runs.
  std::vector<Workspace> live_workspaces;
  if (graph.training_step) {
    cublas_workspace_allocated = cublaslt_workspace_allocated = true;
    // Kept for the process's lifetime: the cuBLAS workspaces, then the cuBLASLt ones.
    for (const Workspace& workspace : stepWorkspaces(graph, profile)) {
      bool lt = std::string_view(workspace.library) == "cuBLASLt";
      (lt ? result.cublaslt_workspace_bytes : result.cublas_workspace_bytes) += workspace.bytes;
      NodeId& first = lt ? result.cublaslt_workspace_node : result.cublas_workspace_node;
      if (!first.valid() || workspace.node.value < first.value) first = workspace.node;
      model.allocate(workspace.bytes);
      live_workspaces.push_back(workspace);
    }
  }
  for (size_t index = 0; index < graph.storages.size(); ++index) {
    if (graph.storages[index].origin == StorageOrigin::kInput) {
      blocks[index] = model.allocate(graph.storages[index].bytes);
    }
  }

  if (earlier_steps) {
    replayEarlierStep(graph, timeline, model, blocks, /*make_state=*/true);
    replayEarlierStep(graph, timeline, model, blocks, /*make_state=*/false);
    model.resetPeaks();
  }

  auto finish = [&](NodeId failed_at) {
    result.out_of_memory = model.outOfMemory();
    result.out_of_memory_node = failed_at;
    result.peak_requested_bytes = model.peakRequested();
    result.peak_allocated_bytes = model.peakAllocated();
    result.peak_reserved_bytes = model.peakReserved();
    result.segments = model.segments();
    return result;
  };
  if (model.outOfMemory()) return finish(NodeId());  // the weights and inputs alone
  result.baseline_requested_bytes = model.requested();
  result.baseline_allocated_bytes = model.allocated();
  result.baseline_reserved_bytes = model.reserved();
  result.convolution_workspace_bound_bytes = profile.convolution_workspace_bound_bytes.value_or(0);

  int64_t best_allocated = model.allocated();
  int64_t best_requested = model.requested();
  size_t applied = 0;  // timeline events applied so far
  result.peak_requested_workspaces = live_workspaces;
  auto note_peaks = [&](NodeId node) {
    if (model.allocated() > best_allocated) {
      best_allocated = model.allocated();
      result.peak_allocated_node = node;
    }
    if (model.requested() > best_requested) {
      best_requested = model.requested();
      result.peak_requested_node = node;
      result.peak_requested_events = applied;
      result.peak_requested_workspaces = live_workspaces;
    }
  };

  size_t position = 0;
  for (size_t index = 0; index < graph.nodes.size(); ++index) {
    NodeId node(index);
    size_t begin = position;
    while (position < timeline.size() && timeline[position].node == node) ++position;
    size_t end = position;
    // Library workspaces are taken once the op has its outputs (at::mm allocates the result,
    // then fetches the cuBLAS handle), before it drops its own temporaries.
    size_t workspace_point = begin;
    for (size_t at = begin; at < end; ++at) {
      if (timeline[at].inside_node && timeline[at].kind == MemoryEventKind::kAllocate) {
        workspace_point = at + 1;
      }
    }
    const std::string& op = graph.nodes[index].op;
    int32_t convolution_workspace = CachingAllocatorModel::kNoBlock;
    for (size_t at = begin; at <= end; ++at) {
      if (at == workspace_point) {
        bool through_cublaslt = runsThroughCublasLt(graph, graph.nodes[index], profile);
        if (!cublas_workspace_allocated && profile.cublas_workspace_bytes > 0 &&
            (through_cublaslt || contains(profile.cublas_ops, op))) {
          model.allocate(profile.cublas_workspace_bytes);  // kept for the process's lifetime
          if (model.outOfMemory()) return finish(node);
          cublas_workspace_allocated = true;
          result.cublas_workspace_bytes = profile.cublas_workspace_bytes;
          result.cublas_workspace_node = node;
          live_workspaces.push_back({"cuBLAS", profile.cublas_workspace_bytes, node});
          note_peaks(node);
        }
        if (!cublaslt_workspace_allocated && profile.cublaslt_workspace_bytes > 0 &&
            through_cublaslt) {
          model.allocate(profile.cublaslt_workspace_bytes);  // kept, after cuBLAS's
          if (model.outOfMemory()) return finish(node);
          cublaslt_workspace_allocated = true;
          result.cublaslt_workspace_bytes = profile.cublaslt_workspace_bytes;
          result.cublaslt_workspace_node = node;
          live_workspaces.push_back({"cuBLASLt", profile.cublaslt_workspace_bytes, node});
          note_peaks(node);
        }
        if (result.convolution_workspace_bound_bytes > 0 && contains(profile.convolution_ops, op)) {
          convolution_workspace = model.allocate(result.convolution_workspace_bound_bytes);
          if (model.outOfMemory()) return finish(node);
          live_workspaces.push_back(
              {"convolution", result.convolution_workspace_bound_bytes, node});
          note_peaks(node);
        }
      }
      if (at == end) break;
      const TimelineEvent& event = timeline[at];
      if (!event.inside_node && convolution_workspace != CachingAllocatorModel::kNoBlock) {
        model.release(convolution_workspace);  // the call returned
        convolution_workspace = CachingAllocatorModel::kNoBlock;
        live_workspaces.pop_back();
      }
      applied = at + 1;
      if (event.kind == MemoryEventKind::kAllocate) {
        blocks[event.storage.value] = model.allocate(graph.storage(event.storage).bytes);
        if (model.outOfMemory()) return finish(node);
        note_peaks(node);
      } else {
        model.release(blocks[event.storage.value]);
        blocks[event.storage.value] = CachingAllocatorModel::kNoBlock;
      }
    }
    if (convolution_workspace != CachingAllocatorModel::kNoBlock) live_workspaces.pop_back();
    model.release(convolution_workspace);
  }

  return finish(NodeId());
}

}  // namespace memtrace::estimator
