// PyTorch's caching allocator, seen from the hooks: which CUDA calls it makes, and the bridge
// that records its tensors from inside it (Note [PyTorch's own allocator] in
// tracer/format/records.h; the bridge itself is torch_bridge/).
#include "allocator/torch_allocator.h"

#include <dlfcn.h>
#include <link.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "allocator/torch_bridge/bridge.h"
#include "tracer/format/caching_allocator.h"
#include "tracer/recorder/config.h"
#include "tracer/recorder/memtrace.h"
#include "tracer/recorder/native_stack.h"
#include "tracer/recorder/recorder.h"

namespace memtrace::hooks {
namespace {

// Note [Attaching to PyTorch's allocator]
// PyTorch's allocator makes its device allocators when CUDA is first used, and its first
// allocation on a device always makes a segment first (nothing is cached yet): so the first
// cudaMalloc (or cuMemCreate, under expandable segments) that libc10_cuda.so makes is the
// moment it exists and has allocated nothing. There, before that call's own trace entries, the
// bridge for the running torch release is loaded and its tracker attached, to every device's
// allocator at once; everything PyTorch's allocator does after it is recorded from inside it.
// The calling thread holds that device's allocator lock, which is recursive: attaching takes it
// again. It attaches in two steps:
//   preparing: the bridge found, loaded and asked whether it would attach (memtrace_torch_check:
//     the release, the allocator's kind), with no lock of PyTorch's taken. Another thread's call
//     from PyTorch's allocator waits for this step: it decides whether the tracker or the hooks
//     record PyTorch's memory, and it can never wait for that thread's locks;
//   attaching: the tracker attached to each device's allocator in turn, under each one's lock.
//     Another thread whose first segment is on another device at this moment cannot be waited
//     for: it holds its device's lock, which the attach needs, and waiting would hang both. Its
//     calls are recorded by nobody then, and Note [Tensors made while the tracker attaches] says
//     how what it made is recorded once the tracker is attached.
// Which release runs is read from torch/version.py beside the loaded libc10_cuda.so; the bridge
// built for it is libmemtrace-torch-<release>.so beside libmemtrace.so (MEMTRACE_TORCH_BRIDGE
// names another file). No bridge, one that does not load, or an allocator that is not PyTorch's
// caching allocator: one line on stderr, and PyTorch's calls are recorded as segments.
//
// Note [Tensors made while the tracker attaches]
// A thread (B) whose first segment is on device 1 while thread A attaches holds device 1's lock
// from before its cudaMalloc to after its tensor's trace entry. If it took that lock before A's
// attach reached device 1, the attach waits for it, and B's segment and first tensor (and any
// tensor B makes on device 1 before the attach gets the lock) pass before the tracker is there;
// if after, the tracker records them. Its hooks cannot tell which, so they record nothing while
// the state is kAttaching and count the call. Once the tracker is on every device, if any call
// was counted, A reads PyTorch's own snapshot of its allocator (through the bridge, each device
// under its lock, as memory_snapshot() does) and records each segment and each live tensor the
// recorder does not know yet: the ones the tracker never saw. Their thread is unknown, so they
// carry no stacks (thread 0), and one mark in the trace says how many there were. A tensor
// known to the recorder is left as it is, so nothing is counted twice.
// The snapshot is a copy: between it and a tensor's recording, device 1 may change (a tensor
// of the snapshot freed, and its free, of an address not yet known, dropped). So the recorder
// counts each tracker call that changes a device's memory on that device, under its own lock,
// with the call's event (trackerEventCounts in tracer/recorder/recorder.h; a free it drops is
// counted too). The counts are read, under the recorder's lock, before the snapshot; a held
// allocation is recorded only if, under the recorder's lock, its device's count has not moved
// since; otherwise the snapshot is read again (at most kHeldAttempts times). That is enough:
// PyTorch calls the tracker with the device's lock held, right after the change it tells, and
// the snapshot reads each device under that lock. So a change the snapshot shows was made
// either before the counts were read (its event recorded by then, or its call still holding the
// device's lock, which the snapshot then waits for: the count moves before the check) or after
// them (its event recorded before the check moves the count); a change the snapshot does not
// show is made after it, and its event, recorded before the check or after the held
// allocation, applies to it in order. (Each call counted itself twice before, at its start and
// its end, outside the recorder's lock: two stores more an event on the tracker's path.)
// The kFailed outcome after kAttaching (PyTorch refusing the tracker after memtrace_torch_check
// accepted it) loses the counted calls' segments: one line on stderr says so.
// The package's attach (memtrace_torch_attach, Note [Attaching from the package] in
// python/mem_tracer/tracing.py) records everything PyTorch held before it the same way, with
// the same checks and retries, and no mark: those are allocations made before tracing.

enum State : int { kUnknown, kPreparing, kAttaching, kAttached, kFailed };
std::atomic<int> g_state{kUnknown};
// Calls from PyTorch's allocator that no one recorded while the state was kAttaching.
std::atomic<int> g_unrecorded{0};

// Callers seen, by return address: a program calls CUDA from few places, and dladdr (a walk of
// the loaded objects under the loader's lock) is paid once for each.
constexpr int kKnownCallers = 32;
struct KnownCaller {
  std::atomic<const void*> address;
  std::atomic<bool> torch;
};
KnownCaller g_callers[kKnownCallers];
std::atomic<int> g_caller_count{0};
// libc10_cuda.so, once a call came from it.
std::atomic<const void*> g_c10_base{nullptr};
char g_c10_path[4096];

bool isC10Cuda(const char* path) {
  const char* slash = path ? strrchr(path, '/') : nullptr;
  const char* name = slash ? slash + 1 : path;
  return name && strncmp(name, "libc10_cuda.so", 14) == 0;
}

bool fromC10Cuda(const void* caller) {
  if (!caller) return false;
  int count = g_caller_count.load(std::memory_order_acquire);
  for (int i = 0; i < count && i < kKnownCallers; ++i)
    if (g_callers[i].address.load(std::memory_order_relaxed) == caller)
      return g_callers[i].torch.load(std::memory_order_relaxed);
  Dl_info info;
  bool torch = dladdr(caller, &info) && isC10Cuda(info.dli_fname);
  if (torch && !g_c10_base.load(std::memory_order_acquire)) {
    snprintf(g_c10_path, sizeof(g_c10_path), "%s", info.dli_fname);
    g_c10_base.store(info.dli_fbase, std::memory_order_release);
  }
  int slot = g_caller_count.fetch_add(1, std::memory_order_acq_rel);
  if (slot < kKnownCallers) {
    g_callers[slot].torch.store(torch, std::memory_order_relaxed);
    g_callers[slot].address.store(caller, std::memory_order_relaxed);
  }
  return torch;
}

// The torch release beside libc10_cuda.so (".../torch/lib/libc10_cuda.so" and
// ".../torch/version.py"): "2.14.1" of `__version__ = '2.14.1+cu130'`. False when unreadable.
bool torchRelease(char* release, size_t size) {
  char path[4200];
  snprintf(path, sizeof(path), "%s", g_c10_path);
  char* slash = strrchr(path, '/');
  if (!slash) return false;
  *slash = '\0';  // .../torch/lib
  slash = strrchr(path, '/');
  if (!slash) return false;
  snprintf(slash, sizeof(path) - (slash - path), "/version.py");
  FILE* file = fopen(path, "re");
  if (!file) return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof(line), file)) {
    if (strncmp(line, "__version__", 11) != 0) continue;
    const char* quote = strpbrk(line, "'\"");
    if (!quote) break;
    size_t length = strcspn(quote + 1, "+'\"\n");
    if (length == 0 || length >= size) break;
    memcpy(release, quote + 1, length);
    release[length] = '\0';
    found = true;
  }
  fclose(file);
  return found;
}

// The sink's functions: what the tracker says, as events of the recorder. A tensor's is one
// call into the recorder (Note [One call from PyTorch's tracker] in tracer/recorder/recorder.cpp),
// with the sink's return address, in PyTorch's std::function (the bridge's onTraceEntry calls
// the sink last): native stacks start there.
EventSource torchSource(int device, uint64_t stream, const void* caller) {
  return EventSource{format::Api::kTorchAllocator, format::Level::kTensor, device, stream, caller};
}

void tensorAlloc(int device, uint64_t stream, uint64_t address, uint64_t size) {
  recordTrackerAlloc(device, stream, address, size, __builtin_return_address(0));
}

void tensorFree(int device, uint64_t stream, uint64_t address) {
  recordTrackerFree(device, stream, address, __builtin_return_address(0));
}

void segment(int action, int device, uint64_t address, uint64_t size, uint64_t graph_pool,
             uint64_t user_pool) {
  if (action < 0 || action >= static_cast<int>(format::SegmentAction::kCount)) return;
  RecursionGuard guard;
  recordSegment(guard, SegmentChange{static_cast<format::SegmentAction>(action), device,
                                     static_cast<uintptr_t>(address), size, graph_pool, user_pool});
}

void outOfMemory(int device, uint64_t stream, uint64_t size, uint64_t) {
  RecursionGuard guard;
  recordFailedAlloc(guard, torchSource(device, stream, __builtin_return_address(0)), size);
}

const MemtraceTorchSink kSink{MEMTRACE_TORCH_SINK_VERSION, tensorAlloc, tensorFree, segment,
                              outOfMemory};

// The bridge's file for `release`: MEMTRACE_TORCH_BRIDGE, or the one beside this library.
void bridgePath(const char* release, char* path, size_t size) {
  const char* chosen = getenv("MEMTRACE_TORCH_BRIDGE");
  if (chosen && *chosen) {
    snprintf(path, size, "%s", chosen);
    return;
  }
  Dl_info self;
  const char* library =
      dladdr(reinterpret_cast<void*>(&bridgePath), &self) && self.dli_fname ? self.dli_fname : "";
  const char* slash = strrchr(library, '/');
  int folder = slash ? static_cast<int>(slash - library) : 0;
  snprintf(path, size, "%.*s%slibmemtrace-torch-%s.so", folder, library, slash ? "/" : "", release);
}

// Why the last attach failed (memtrace_torch_attach's error).
char g_refusal[1400];

// A failed attach: said once on stderr under LD_PRELOAD (the hooks then record segments); the
// package's attach says it itself.
void refuse(const char* why, const char* detail, bool say = true) {
  // The detail (a path, a message) cut to 1,200 bytes: the refusal stays one line of its buffer.
  snprintf(g_refusal, sizeof(g_refusal), "%s%.1200s", why, detail);
  if (!say) return;
  char line[1500];
  snprintf(line, sizeof(line),
           "%s; PyTorch's allocator is recorded by its segments, not its tensors", g_refusal);
  warn(line);
}

// Settings that change the caching allocator's rounding or splitting are marked in the trace
// (Note [Allocated bytes, replayed] in tracer/report/block_replay.h: its replay follows the
// default rules, and must know when they do not hold). Read, never changed.
void markAllocatorSettings() {
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    const char* settings = getenv(name);
    if (!settings ||
        (!strstr(settings, "roundup_power2_divisions") && !strstr(settings, "max_split_size_mb")))
      continue;
    char mark[1024];
    snprintf(mark, sizeof(mark), "%s%s=%s", format::kAllocatorSettingsMark, name, settings);
    memtrace_annotate(mark);
  }
}

// The bridge, loaded and willing to attach (the preparing step of Note [Attaching to PyTorch's
// allocator]).
struct Bridge {
  MemtraceTorchAttach attach = nullptr;
  MemtraceTorchSnapshot snapshot = nullptr;
  void* c10 = nullptr;
};

bool prepare(Bridge* bridge, bool say) {
  Config config = readConfig();
  if (!config.torch_tracker) {  // MEMTRACE_TORCH_TRACKER=0: segments, as asked
    snprintf(g_refusal, sizeof(g_refusal), "MEMTRACE_TORCH_TRACKER=0 asks for segments only");
    return false;
  }
  char release[64];
  if (!torchRelease(release, sizeof(release))) {
    refuse("cannot tell which torch release runs beside ", g_c10_path, say);
    return false;
  }
  char path[4200];
  bridgePath(release, path, sizeof(path));
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!library) {
    char detail[1200];
    snprintf(detail, sizeof(detail), "%s (%s)", release, dlerror());
    refuse("no bridge to PyTorch's allocator for torch ", detail, say);
    return false;
  }
  bridge->attach = reinterpret_cast<MemtraceTorchAttach>(dlsym(library, MEMTRACE_TORCH_ATTACH));
  auto check = reinterpret_cast<MemtraceTorchAttach>(dlsym(library, MEMTRACE_TORCH_CHECK));
  bridge->snapshot =
      reinterpret_cast<MemtraceTorchSnapshot>(dlsym(library, MEMTRACE_TORCH_SNAPSHOT));
  bridge->c10 = dlopen(g_c10_path, RTLD_NOW | RTLD_NOLOAD);
  char error[512] = "";
  if (!bridge->attach || !check || !bridge->snapshot || !bridge->c10 ||
      check(bridge->c10, &kSink, error, sizeof(error)) != 0) {
    refuse("cannot attach to PyTorch's allocator: ",
           *error ? error : "the bridge or libc10_cuda.so could not be opened", say);
    return false;
  }
  return true;
}

// Note [Tensors made while the tracker attaches]: the snapshot read again when a device changed.
constexpr int kHeldAttempts = 100;

// One reading of the snapshot: each device's tracker calls counted before it, and what it
// recorded.
struct HeldReading {
  uint64_t counted[format::kMaxDevices];
  int recorded = 0;
  uint64_t recorded_bytes = 0;
  bool stale = false;
};

// Asked under the recorder's lock.
bool deviceUnchanged(const void* context, int device) {
  if (device < 0 || device >= format::kMaxDevices) return true;  // never counted: nothing to see
  const auto* reading = static_cast<const HeldReading*>(context);
  return trackerEventsLocked(device) == reading->counted[device];
}

void heldSegment(void* context, int device, uint64_t address, uint64_t size, int expandable,
                 uint64_t graph_pool, uint64_t user_pool) {
  auto* reading = static_cast<HeldReading*>(context);
  if (reading->stale) return;
  // An expandable segment's range is its mapped pages, as the tracker's SEGMENT_MAP says them.
  SegmentChange change{expandable ? format::SegmentAction::kMap : format::SegmentAction::kAlloc,
                       device,
                       static_cast<uintptr_t>(address),
                       size,
                       graph_pool,
                       user_pool};
  RecursionGuard guard;
  if (recordHeldSegment(guard, change, HeldCheck{deviceUnchanged, reading}) == HeldOutcome::kStale)
    reading->stale = true;
}

void heldTensor(void* context, int device, uint64_t stream, uint64_t address, uint64_t size) {
  auto* reading = static_cast<HeldReading*>(context);
  if (reading->stale) return;
  RecursionGuard guard;
  switch (recordHeldAlloc(guard, torchSource(device, stream, nullptr),
                          reinterpret_cast<const void*>(address), size,
                          HeldCheck{deviceUnchanged, reading})) {
    case HeldOutcome::kRecorded:
      ++reading->recorded;
      reading->recorded_bytes += size;
      return;
    case HeldOutcome::kKnown:
      return;
    case HeldOutcome::kStale:
      reading->stale = true;
      return;
  }
}

// Records what the allocator holds that the recorder does not know yet (Note [Tensors made
// while the tracker attaches]; the package's attach, Note [Attaching from the package] in
// python/mem_tracer/tracing.py, records all it held before). `during_attach`: those are the
// tensors made while the tracker attached, which the mark then counts.
void recordHeld(const Bridge& bridge, bool during_attach) {
  int recorded = 0;
  uint64_t recorded_bytes = 0;
  bool stale = true;
  for (int attempt = 0; attempt < kHeldAttempts && stale; ++attempt) {
    HeldReading reading;
    trackerEventCounts(reading.counted);
    MemtraceTorchHeld held{&reading, heldSegment, heldTensor};
    char error[512] = "";
    if (bridge.snapshot(bridge.c10, &held, error, sizeof(error)) != 0) {
      char line[700];
      snprintf(line, sizeof(line), "PyTorch's allocator gave no snapshot (%s); %s", error,
               during_attach ? "the tensors made on another device while memtrace attached to "
                               "it are not in the trace"
                             : "what it held before tracing is not in the trace");
      warn(line);
      return;
    }
    recorded += reading.recorded;
    recorded_bytes += reading.recorded_bytes;
    stale = reading.stale;
    if (stale) sched_yield();
  }
  if (stale)
    warn(during_attach
             ? "PyTorch's allocator kept changing while memtrace read what it made during the "
               "attach; a tensor made then may be missing from the trace"
             : "PyTorch's allocator kept changing while memtrace read what it held before "
               "tracing; a tensor it held then may be missing from the trace");
  if (recorded == 0 || !during_attach) return;
  char mark[256];
  snprintf(mark, sizeof(mark), "%s%d tensor%s (%llu bytes), without their stacks",
           format::kHeldDuringAttachMark, recorded, recorded == 1 ? "" : "s",
           static_cast<unsigned long long>(recorded_bytes));
  memtrace_annotate(mark);
}

// The bridge attached (written before the state leaves kPreparing).
Bridge g_bridge;

// Attaches once per process (the first caller does; the others see its outcome, waiting for it
// only while it prepares: Note [Attaching to PyTorch's allocator]).
int attachOnce(bool say) {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kUnknown && g_state.compare_exchange_strong(state, kPreparing)) {
    // The tracker's calls do not check it (Note [One call from PyTorch's tracker]).
    ensureRecorderInitialized();
    Bridge& bridge = g_bridge;
    if (!prepare(&bridge, say)) {
      g_state.store(kFailed, std::memory_order_release);
      return kFailed;
    }
    g_state.store(kAttaching, std::memory_order_seq_cst);
    char error[512] = "";
    if (bridge.attach(bridge.c10, &kSink, error, sizeof(error)) != 0) {
      refuse("cannot attach to PyTorch's allocator: ", error, say);
      if (g_unrecorded.load(std::memory_order_seq_cst) > 0)
        warn(
            "the segments PyTorch's allocator made on another thread during the failed attach "
            "are not in the trace");
      g_state.store(kFailed, std::memory_order_release);
      return kFailed;
    }
    markAllocatorSettings();
    // A call that saw kAttaching was counted before it made anything: one not counted by now
    // came after the tracker reached every device, which records it.
    if (g_unrecorded.load(std::memory_order_seq_cst) > 0) recordHeld(bridge, true);
    g_state.store(kAttached, std::memory_order_release);
    return kAttached;
  }
  while (state == kPreparing) {
    sched_yield();
    state = g_state.load(std::memory_order_acquire);
  }
  return state;
}

int findC10Cuda(dl_phdr_info* info, size_t, void*) {
  if (!isC10Cuda(info->dlpi_name)) return 0;
  snprintf(g_c10_path, sizeof(g_c10_path), "%s", info->dlpi_name);
  return 1;
}

// Note [NCCL's memory beneath PyTorch's allocator]
// A torch.cuda.MemPool on an allocator of its own (MemPool(backend.mem_allocator): NCCL's
// ncclMemAlloc; any CUDAPluggableAllocator) has PyTorch's caching allocator ask that allocator
// for its segments, and the allocator calls CUDA from its own library: NCCL maps memory by
// cuMemCreate, cuMemAddressReserve and cuMemMap from libnccl (Note [NCCL's memory through the
// driver] in simulator/libraries/nccl.cpp). The caching allocator reports each such segment (the
// bridge records it, with its MemPool) and the tensors in it, and the hooks, seeing calls from
// libnccl, recorded the same memory again: each byte twice. So a memory call whose caller is
// not libc10_cuda.so but which is made beneath it (a frame of libc10_cuda.so on the calling
// thread's native stack) is PyTorch's allocator's, as if it had made it: its tracker's to
// record once attached (the hook records nothing), a segment without one. Only the calls that
// make or free memory look (cudaMalloc's kind and the virtual memory calls: a few per segment,
// none per tensor), and only once libc10_cuda.so is loaded; each then costs one unwind of the
// calling thread. Whether it is loaded is looked for in the loader's whole list of objects again
// only once an object was loaded or unloaded since (the loader's counts of both, read at the
// list's first object): a program that is not PyTorch's walked the whole list on each such call
// before (bench/hook_instructions, 20 loaded objects: 2,700 of the 3,844 instructions a
// cudaMalloc or cudaFree took under LD_PRELOAD; 249 of 1,413 after: docs/performance.md).
// PyTorch's allocator makes no other memory call beneath itself (its host allocator lives in
// libtorch_cuda.so), so nothing is lost that it does not report.

// The executable segments of libc10_cuda.so, once it is loaded.
struct TextRanges {
  uintptr_t start[native::kMaxSegments];
  uintptr_t end[native::kMaxSegments];
  int count = 0;
};
TextRanges g_c10_text;
std::atomic<int> g_c10_text_state{0};  // 0: not found yet, 1: being written, 2: written

int findC10Text(dl_phdr_info* info, size_t, void* data) {
  if (!isC10Cuda(info->dlpi_name)) return 0;
  auto* ranges = static_cast<TextRanges*>(data);
  for (int i = 0; i < info->dlpi_phnum && static_cast<size_t>(ranges->count) < native::kMaxSegments;
       ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_LOAD || !(header.p_flags & PF_X)) continue;
    ranges->start[ranges->count] = info->dlpi_addr + header.p_vaddr;
    ranges->end[ranges->count] = info->dlpi_addr + header.p_vaddr + header.p_memsz;
    ++ranges->count;
  }
  return 1;
}

// The loader's count of objects loaded plus objects unloaded: it changes with every dlopen and
// dlclose that maps or unmaps one. Read from the first object alone (the walk stops there).
int readLoaderGeneration(dl_phdr_info* info, size_t size, void* data) {
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
    *static_cast<unsigned long long*>(data) = info->dlpi_adds + info->dlpi_subs;
  return 1;
}

// The loader's generation when libc10_cuda.so was last looked for and not found: until another
// object is loaded it cannot be there (Note [NCCL's memory beneath PyTorch's allocator]).
constexpr unsigned long long kNoGeneration = ~0ull;
std::atomic<unsigned long long> g_c10_absent_at{kNoGeneration};

// libc10_cuda.so's code, or false while it is not loaded.
bool c10Text(TextRanges* ranges) {
  if (g_c10_text_state.load(std::memory_order_acquire) == 2) {
    *ranges = g_c10_text;
    return true;
  }
  unsigned long long generation = kNoGeneration;
  dl_iterate_phdr(readLoaderGeneration, &generation);
  if (generation != kNoGeneration && generation == g_c10_absent_at.load(std::memory_order_relaxed))
    return false;
  *ranges = TextRanges{};
  if (!dl_iterate_phdr(findC10Text, ranges) || ranges->count == 0) {
    // Read before the walk: an object loaded during it moves the generation on, so it is looked
    // for again.
    g_c10_absent_at.store(generation, std::memory_order_relaxed);
    return false;
  }
  int expected = 0;
  if (g_c10_text_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    g_c10_text = *ranges;
    g_c10_text_state.store(2, std::memory_order_release);
  }
  return true;
}

// A return address into libc10_cuda.so on the calling thread's stack above `caller`, or null.
const void* c10FrameBeneath(const void* caller) {
  TextRanges text;
  if (!c10Text(&text) || !native::loadUnwinder()) return nullptr;
  uintptr_t ips[32];
  size_t count = native::captureStack(ips, 32, caller);
  for (size_t i = 0; i < count; ++i)
    for (int r = 0; r < text.count; ++r)
      if (ips[i] >= text.start[r] && ips[i] < text.end[r]) return reinterpret_cast<void*>(ips[i]);
  return nullptr;
}

}  // namespace

Caller callerOf(const void* caller) {
  if (!fromC10Cuda(caller)) return Caller::kOther;
  int state = attachOnce(/*say=*/true);
  if (state == kAttaching) {
    // Another thread is attaching the tracker right now: what this call makes is recorded from
    // PyTorch's snapshot once it is attached (Note [Tensors made while the tracker attaches]).
    g_unrecorded.fetch_add(1, std::memory_order_seq_cst);
    return Caller::kTorchTracked;
  }
  return state == kAttached ? Caller::kTorchTracked : Caller::kTorchUntracked;
}

Caller memoryCallerOf(const void* caller) {
  Caller direct = callerOf(caller);
  if (direct != Caller::kOther) return direct;
  const void* beneath = c10FrameBeneath(caller);
  return beneath ? callerOf(beneath) : Caller::kOther;
}

}  // namespace memtrace::hooks

using namespace memtrace::hooks;

extern "C" {

MEMTRACE_EXPORT int memtrace_torch_attach(void) {
  memtrace::ensureRecorderInitialized();
  if (g_state.load(std::memory_order_acquire) == kUnknown && !g_c10_base.load() &&
      !dl_iterate_phdr(findC10Cuda, nullptr)) {
    memtrace::setLastError("memtrace_torch_attach: PyTorch's libc10_cuda.so is not loaded");
    return -1;
  }
  int state = attachOnce(/*say=*/false);
  if (state == kAttached) {
    // What PyTorch held before (Note [Attaching from the package] in python/mem_tracer/
    // tracing.py), read as the hooks' attach reads it: a tensor freed after the snapshot is
    // not left live, one made after the attach is not recorded twice.
    recordHeld(g_bridge, /*during_attach=*/false);
    return 0;
  }
  memtrace::setLastError(state == kAttaching ? "another thread is attaching right now" : g_refusal);
  return -1;
}

}  // extern "C"
