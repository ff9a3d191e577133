#include "simulator/core/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "simulator/core/simgpu_api.h"

// Note [Device profiles]
// A profile (simulator/profiles/*.json) is a card as its vendor publishes it: the name CUDA
// reports, the memory, the compute capability, the multiprocessors and the per-architecture
// limits PyTorch, Triton and the libraries read (shared memory per block, threads per
// multiprocessor, ...). What PyTorch sizes from these (a reduction's staging buffer from the
// multiprocessor count, cub's temporary storage from the architecture) then comes out as on
// the card. The profile also names the estimator's profile for the same card, so that a
// simulated run and memtrace-estimate's prediction are made for one device.

// Note [Device memory]
// Device memory is host address space that nothing ever touches: each allocation is an
// mmap(PROT_NONE, MAP_NORESERVE), which costs no host memory however large, and faults if
// host code dereferences it (as a device pointer would on a host without unified memory).
// Kernels do nothing, copies to the device are skipped and copies back write zeros
// (Note [Reads of device values]), so no byte of it is ever needed. What counts against the
// device is what the driver would take: requests of 2 MiB and more round up to 2 MiB (the
// granularity of device memory on the cards profiled), smaller ones to 512 bytes, as
// PyTorch's segments (whole multiples of 2 MiB) make no difference between the two.

namespace simgpu {
namespace {

constexpr size_t kLargePage = size_t{2} << 20;

struct Allocation {
  size_t size;
  size_t charged;
  size_t mapped;  // bytes of address space behind it (0: malloc'd host memory)
  int device;
  MemoryKind kind;
  // The bytes copies wrote, [dirty_begin, dirty_end) from the start: zeroed again when it is
  // freed (Note [Values on the simulated device]).
  size_t dirty_begin = 0;
  size_t dirty_end = 0;
};

struct State {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;
  std::vector<uint64_t> used;
  uint64_t reads = 0;
  std::set<std::string> refused;
};

State& state() {
  static State* instance = new State;  // immortal: libraries call in from static destructors
  return *instance;
}

thread_local int t_device = 0;

std::string g_profile_error;

uint64_t parseBytes(const char* text, bool* ok) {
  char* end = nullptr;
  double value = strtod(text, &end);
  *ok = end != text && value > 0;
  std::string unit(end ? end : "");
  uint64_t scale = 1;
  if (unit == "" || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = uint64_t{1} << 10;
  else if (unit == "MiB")
    scale = uint64_t{1} << 20;
  else if (unit == "GiB")
    scale = uint64_t{1} << 30;
  else if (unit == "TiB")
    scale = uint64_t{1} << 40;
  else if (unit == "KB")
    scale = 1000;
  else if (unit == "MB")
    scale = 1000 * 1000;
  else if (unit == "GB")
    scale = 1000 * 1000 * 1000;
  else
    *ok = false;
  return static_cast<uint64_t>(value * static_cast<double>(scale));
}

Profile* loadProfile() {
  const char* path = getenv("MEMTRACE_GPU_PROFILE");
  if (!path || !*path) {
    g_profile_error =
        "no device profile: MEMTRACE_GPU_PROFILE names none (memtrace run --gpu PROFILE sets it)";
    return nullptr;
  }
  auto* profile = new Profile;
  try {
    std::ifstream file(path);
    if (!file) throw std::runtime_error("cannot be read");
    nlohmann::json json = nlohmann::json::parse(file);
    profile->file = path;
    profile->name = json.at("name").get<std::string>();
    profile->device_name = json.at("device_name").get<std::string>();
    profile->memory_bytes = json.at("memory_bytes").get<uint64_t>();
    profile->major = json.at("compute_capability").at(0).get<int>();
    profile->minor = json.at("compute_capability").at(1).get<int>();
    profile->multiprocessors = json.at("multiprocessors").get<int>();
    profile->l2_cache_bytes = json.at("l2_cache_bytes").get<int>();
    profile->memory_bus_width_bits = json.at("memory_bus_width_bits").get<int>();
    profile->clock_khz = json.at("clock_khz").get<int>();
    profile->memory_clock_khz = json.at("memory_clock_khz").get<int>();
    profile->shared_memory_per_block_optin = json.at("shared_memory_per_block_optin").get<int>();
    profile->shared_memory_per_multiprocessor =
        json.at("shared_memory_per_multiprocessor").get<int>();
    profile->max_threads_per_multiprocessor = json.at("max_threads_per_multiprocessor").get<int>();
    profile->max_blocks_per_multiprocessor = json.at("max_blocks_per_multiprocessor").get<int>();
    profile->max_cluster_size = json.at("max_cluster_size").get<int>();
    profile->estimator_profile = json.value("estimator_profile", "");
  } catch (const std::exception& error) {
    g_profile_error = std::string("the device profile ") + path + " " + error.what();
    delete profile;
    return nullptr;
  }
  if (const char* memory = getenv("MEMTRACE_GPU_MEMORY"); memory && *memory) {
    bool ok = false;
    uint64_t bytes = parseBytes(memory, &ok);
    if (!ok) {
      g_profile_error = std::string("MEMTRACE_GPU_MEMORY=") + memory +
                        " is not a size (write 24GiB, 80GB or a number of bytes)";
      delete profile;
      return nullptr;
    }
    profile->memory_bytes = bytes;
    profile->memory_overridden = true;
  }
  return profile;
}

}  // namespace

const Profile* profile() {
  static const Profile* loaded = loadProfile();
  return loaded;
}

const std::string& profileError() {
  profile();
  return g_profile_error;
}

int deviceCount() {
  if (!profile()) return 0;
  static const int count = [] {
    const char* text = getenv("MEMTRACE_GPU_COUNT");
    int value = text && *text ? atoi(text) : 1;
    return value >= 1 && value <= 64 ? value : 1;
  }();
  return count;
}

bool multicastSupported() {
  static const bool supported = [] {
    const char* text = getenv("MEMTRACE_GPU_MULTICAST");
    return text && strcmp(text, "1") == 0;
  }();
  return supported;
}

int currentDevice() {
  return t_device;
}

void setCurrentDevice(int device) {
  t_device = device;
}

namespace {
thread_local int t_capture_mode = 0;  // cudaStreamCaptureModeGlobal
}

int captureMode() {
  return t_capture_mode;
}

int exchangeCaptureMode(int mode) {
  int previous = t_capture_mode;
  t_capture_mode = mode;
  return previous;
}

uint64_t totalBytes(int device) {
  const Profile* card = profile();
  return card && device >= 0 && device < deviceCount() ? card->memory_bytes : 0;
}

namespace {

// state().mutex held.
std::vector<uint64_t>& usedLocked() {
  State& s = state();
  if (s.used.empty()) s.used.resize(64, 0);
  return s.used;
}

}  // namespace

uint64_t usedBytes(int device) {
  std::lock_guard<std::mutex> lock(state().mutex);
  return device >= 0 && device < 64 ? usedLocked()[device] : 0;
}

bool charge(int device, uint64_t bytes) {
  if (device < 0 || device >= deviceCount()) return false;
  std::lock_guard<std::mutex> lock(state().mutex);
  uint64_t& used = usedLocked()[device];
  if (used + bytes > totalBytes(device)) return false;
  used += bytes;
  return true;
}

void uncharge(int device, uint64_t bytes) {
  if (device < 0 || device >= 64) return;
  std::lock_guard<std::mutex> lock(state().mutex);
  uint64_t& used = usedLocked()[device];
  used = used >= bytes ? used - bytes : 0;
}

void* reserveAddressSpace(size_t size, size_t alignment) {
  size_t length = size + alignment;
  // Readable and writable, but reserving nothing: a page costs host memory only once a copy
  // writes it (Note [Values on the simulated device]).
  void* range = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return nullptr;
  uintptr_t start = reinterpret_cast<uintptr_t>(range);
  uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
  if (aligned > start) munmap(range, aligned - start);
  uintptr_t end = aligned + size;
  if (start + length > end) munmap(reinterpret_cast<void*>(end), start + length - end);
  return reinterpret_cast<void*>(aligned);
}

void releaseAddressSpace(void* start, size_t size) {
  munmap(start, size);
}

size_t chargedBytes(size_t size) {
  return size >= kLargePage ? (size + kLargePage - 1) & ~(kLargePage - 1)
                            : (size + 511) & ~size_t{511};
}

// Note [Device address space]
// Device addresses come from one range of address space reserved when the first is needed
// (PROT_NONE, MAP_NORESERVE: no host memory, however large), carved without a system call: an
// allocation takes a freed range of its own rounded size if there is one, else the next one
// (a bump pointer); small allocations (under 2 MiB, 512-byte steps) and large ones (2 MiB steps,
// 2 MiB aligned, as the driver aligns them) have a half each. Programs allocate the same sizes
// over and over (PyTorch's segments, a model's tensors), so freed ranges are reused and the
// range grows with the live set, not with the run. An mmap of its own per allocation, which the
// first version made, cost two system calls per allocation: under PyTorch's cudaMallocAsync
// backend (one allocation a tensor, what memtrace's LD_PRELOAD mode runs) that doubled the CPU
// time of a GPT-2 forward, which the simulated device must not add where the card adds nothing.
// Should the range run out, allocations fall back to an mmap each.
namespace {

class AddressSpace {
 public:
  // state().mutex held.
  uintptr_t take(size_t rounded) {
    if (!reserve()) return 0;
    auto free = free_.find(rounded);
    if (free != free_.end() && !free->second.empty()) {
      uintptr_t address = free->second.back();
      free->second.pop_back();
      return address;
    }
    bool large = rounded >= kLargePage;
    uintptr_t& next = large ? large_next_ : small_next_;
    uintptr_t end = large ? end_ : middle_;
    if (next + rounded > end) return 0;
    uintptr_t address = next;
    next += rounded;
    return address;
  }
  // state().mutex held.
  void give(uintptr_t address, size_t rounded) { free_[rounded].push_back(address); }
  bool contains(uintptr_t address) const { return address >= base_ && address < end_; }

 private:
  // The whole range, 8 TiB: a 47-bit address space has 128 TiB; the small half 1 TiB.
  static constexpr size_t kSize = size_t{8} << 40;
  static constexpr size_t kSmall = size_t{1} << 40;

  bool reserve() {
    if (base_) return true;
    if (failed_) return false;
    void* range = reserveAddressSpace(kSize, kLargePage);
    if (!range) {
      failed_ = true;
      return false;
    }
    base_ = small_next_ = reinterpret_cast<uintptr_t>(range);
    middle_ = large_next_ = base_ + kSmall;
    end_ = base_ + kSize;
    return true;
  }

  uintptr_t base_ = 0, middle_ = 0, end_ = 0;
  uintptr_t small_next_ = 0, large_next_ = 0;
  bool failed_ = false;
  std::unordered_map<size_t, std::vector<uintptr_t>> free_;
};

AddressSpace& addressSpace() {
  static AddressSpace* instance = new AddressSpace;  // immortal, as the state
  return *instance;
}

}  // namespace

bool isDeviceAddress(const void* pointer) {
  uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  if (addressSpace().contains(address)) return true;
  Pointer found =
      find(pointer);  // an allocation made outside the range (Note [Device address space])
  return found.found && found.kind == MemoryKind::kDevice;
}

Status allocate(void** pointer, size_t size, int device, MemoryKind kind, bool counted) {
  if (!pointer) return Status::kInvalidValue;
  *pointer = nullptr;
  if (kind != MemoryKind::kHost && (device < 0 || device >= deviceCount()))
    return Status::kInvalidDevice;
  if (size == 0) return Status::kSuccess;
  size_t rounded = chargedBytes(size);
  size_t charged = counted && kind != MemoryKind::kHost ? rounded : 0;
  if (kind == MemoryKind::kDevice) {
    std::lock_guard<std::mutex> lock(state().mutex);
    uint64_t& used = usedLocked()[device];
    if (charged && used + charged > totalBytes(device)) return Status::kOutOfMemory;
    if (uintptr_t address = addressSpace().take(rounded)) {
      used += charged;
      state().allocations[address] = Allocation{size, charged, 0, device, kind};
      *pointer = reinterpret_cast<void*>(address);
      return Status::kSuccess;
    }
  }
  if (charged && !charge(device, charged)) return Status::kOutOfMemory;
  void* memory = nullptr;
  size_t mapped = 0;
  if (kind == MemoryKind::kDevice) {
    // Outside the range (it ran out): address space of its own, aligned as the driver does.
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mapped = (rounded + page - 1) & ~(page - 1);
    memory = reserveAddressSpace(mapped, size >= kLargePage ? kLargePage : page);
  } else {
    // Managed and page-locked memory is the program's to touch: real host memory.
    memory = aligned_alloc(4096, (size + 4095) & ~size_t{4095});
    if (memory) memset(memory, 0, size);
  }
  if (!memory) {
    if (charged) uncharge(device, charged);
    return Status::kOutOfMemory;
  }
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().allocations[reinterpret_cast<uintptr_t>(memory)] =
        Allocation{size, charged, mapped, device, kind};
  }
  *pointer = memory;
  return Status::kSuccess;
}

Status release(void* pointer) {
  if (!pointer) return Status::kSuccess;
  Allocation allocation;
  uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    auto it = state().allocations.find(address);
    if (it == state().allocations.end()) return Status::kInvalidValue;
    allocation = it->second;
    state().allocations.erase(it);
    if (allocation.dirty_end > allocation.dirty_begin && allocation.kind == MemoryKind::kDevice)
      memset(reinterpret_cast<void*>(address + allocation.dirty_begin), 0,
             allocation.dirty_end - allocation.dirty_begin);
    if (allocation.kind == MemoryKind::kDevice && addressSpace().contains(address)) {
      addressSpace().give(address, chargedBytes(allocation.size));
      uint64_t& used = usedLocked()[allocation.device];
      used = used >= allocation.charged ? used - allocation.charged : 0;
      return Status::kSuccess;
    }
  }
  if (allocation.charged) uncharge(allocation.device, allocation.charged);
  if (allocation.mapped)
    munmap(pointer, allocation.mapped);
  else
    free(pointer);
  return Status::kSuccess;
}

Pointer find(const void* pointer) {
  uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  std::lock_guard<std::mutex> lock(state().mutex);
  auto& allocations = state().allocations;
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin()) return Pointer{};
  --it;
  if (address >= it->first + std::max<size_t>(it->second.size, 1)) return Pointer{};
  return Pointer{true, it->second.kind, it->second.device, it->first, it->second.size};
}

// Note [Values on the simulated device]
// Nothing runs on the simulated device, so no kernel computes a value. What device memory
// holds is what small copies put there: a copy of at most kKeptBytes (64 KiB) into device
// memory, within it, or back to the host is carried out, so the metadata programs move through
// the device (the shapes DistributedDataParallel checks across ranks, the pickled objects of
// torch.distributed.all_gather_object, a count copied back) arrives as it would; a larger one
// is skipped (weights, activations, inputs: no host memory is spent on them), and copied back
// it gives zeros. Untouched device memory reads as zeros. So a value the program reads back is
// the one it put there, or zeros where a kernel would have computed it on the card: what the
// program does next (a loop that stops at an end token, MoE routing, nonzero's size) may differ
// from the card. Every copy back to the host is counted and handed to the observer (memtrace's
// recorder, which names the Python line) so that the report can say where a simulated run may
// part from the card's. Under `memtrace run`, PyTorch programs get more: what they determine
// themselves is computed on the host beside the card and kept in device memory, and the reads
// of it are not counted (simgpu_set_reads_known, simgpu_set_values: Note [Known values on the
// simulated card] in python/mem_tracer/simulated_gpu/values.py).
// Note [A run that waits on a value]
// A loop that runs until the device computes a value never ends on the simulated device, where
// nothing is computed: transformers' generate() reads `unfinished.max() == 0` back after every
// token, which was always false here (it ran 22 minutes, 181,062 reads of that line, before it
// was killed; under `memtrace run` the test is now known once the length limit is reached:
// Note [Known values on the simulated card] in python/mem_tracer/simulated_gpu/values.py, but a
// loop on a value only a kernel computes stays). So the simulated device can be given a limit on
// the reads a program makes
// (MEMTRACE_GPU_MAX_READS; `memtrace run --gpu` sets 100,000 by default): a read past it fails
// (cudaErrorNotPermitted, CUDA_ERROR_NOT_PERMITTED) after one line on stderr saying why, so the
// program stops with its own error at the line that read, and memtrace's report lists the reads
// by line. Without the variable there is no limit.
namespace {
SimgpuReadObserver g_observer = nullptr;

// Reads made while the program's values are known on the host (simgpu_set_reads_known: Note
// [Known values on the simulated card] in python/mem_tracer/simulated_gpu/values.py): neither
// counted against the limit nor handed to the observer, since they read what the card would.
thread_local bool t_reads_known = false;

uint64_t readLimit() {
  static const uint64_t limit = [] {
    const char* text = getenv("MEMTRACE_GPU_MAX_READS");
    return text && *text ? strtoull(text, nullptr, 10) : 0;
  }();
  return limit;
}

// False: past the limit (the read is refused, and said once).
bool noteRead(const void* device_source, size_t bytes) {
  if (t_reads_known) return true;
  uint64_t reads;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    reads = ++state().reads;
  }
  uint64_t limit = readLimit();
  if (limit && reads > limit) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      fprintf(stderr,
              "memtrace simulated GPU: the program read device values %llu times, past the "
              "limit (MEMTRACE_GPU_MAX_READS=%llu): values a kernel computes are zeros here, so "
              "a loop waiting on one (an end token, generate()'s stop test) never ends; this read "
              "and every later one fail. Raise the limit (memtrace run --gpu-max-reads) if the "
              "program really reads that often\n",
              static_cast<unsigned long long>(reads), static_cast<unsigned long long>(limit));
    return false;
  }
  SimgpuReadObserver observer = __atomic_load_n(&g_observer, __ATOMIC_ACQUIRE);
  if (observer) observer(device_source, bytes);
  return true;
}
}  // namespace

// Device memory a copy writes is remembered, so that it is zero again when it is freed: memory
// handed out again reads as zeros, as everything no copy wrote does.
void written(const void* dst, size_t bytes) {
  uintptr_t address = reinterpret_cast<uintptr_t>(dst);
  std::lock_guard<std::mutex> lock(state().mutex);
  auto& allocations = state().allocations;
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin()) return;
  --it;
  Allocation& allocation = it->second;
  if (address >= it->first + allocation.size) return;
  size_t begin = address - it->first;
  size_t end = std::min(allocation.size, begin + bytes);
  if (allocation.dirty_end == allocation.dirty_begin) {
    allocation.dirty_begin = begin;
    allocation.dirty_end = end;
  } else {
    allocation.dirty_begin = std::min(allocation.dirty_begin, begin);
    allocation.dirty_end = std::max(allocation.dirty_end, end);
  }
}

bool copy(void* dst, const void* src, size_t bytes) {
  if (!bytes || !dst || !src) return true;
  bool from_device = isDeviceAddress(src), to_device = isDeviceAddress(dst);
  if (!from_device && !to_device) {
    memmove(dst, src, bytes);
    return true;
  }
  if (from_device && !to_device && !noteRead(src, bytes)) return false;
  if (bytes <= kKeptBytes) {
    memmove(dst, src, bytes);
    if (to_device) written(dst, bytes);
  } else if (!to_device) {
    memset(dst, 0, bytes);
  }
  return true;
}

void fill(void* dst, int value, size_t bytes) {
  if (!bytes || !dst) return;
  bool device = isDeviceAddress(dst);
  if (device && bytes > kKeptBytes) return;
  memset(dst, value, bytes);
  if (device) written(dst, bytes);
}

namespace {
// Whether [address, address + bytes) is inside one allocation of device memory, of at most the
// kept bytes.
bool keptRange(const void* address, size_t bytes) {
  if (!address || bytes > kKeptBytes) return false;
  Pointer found = find(address);
  uintptr_t start = reinterpret_cast<uintptr_t>(address);
  return found.found && found.kind == MemoryKind::kDevice &&
         start + bytes <= found.start + found.size;
}
}  // namespace

bool setValues(void* dst, const void* src, size_t bytes) {
  if (!bytes) return true;
  if (!keptRange(dst, bytes)) return false;
  if (src)
    memmove(dst, src, bytes);
  else
    memset(dst, 0, bytes);
  written(dst, bytes);
  return true;
}

bool readValues(void* dst, const void* src, size_t bytes) {
  if (!bytes) return true;
  if (!dst || !keptRange(src, bytes)) return false;
  memmove(dst, src, bytes);
  return true;
}

uint64_t readsBack() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().reads;
}

int refuse(const char* library, const char* function, int status, const char* why) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    first = state().refused.insert(function).second;
  }
  if (first)
    fprintf(stderr, "memtrace simulated GPU: %s's %s is not simulated%s%s; it returns %d\n",
            library, function, why ? ": " : "", why ? why : "", status);
  return status;
}

void approximate(const char* library, const char* function, const char* how) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    first = state().refused.insert(function).second;
  }
  if (first) fprintf(stderr, "memtrace simulated GPU: %s's %s: %s\n", library, function, how);
}

}  // namespace simgpu

// ---- The C API (simgpu_api.h) ----------------------------------------------------------------

extern "C" {

SIMGPU_EXPORT const char* simgpu_profile_name(void) {
  const simgpu::Profile* card = simgpu::profile();
  return card ? card->name.c_str() : nullptr;
}

SIMGPU_EXPORT const char* simgpu_profile_file(void) {
  const simgpu::Profile* card = simgpu::profile();
  return card ? card->file.c_str() : nullptr;
}

SIMGPU_EXPORT uint64_t simgpu_memory_bytes(void) {
  const simgpu::Profile* card = simgpu::profile();
  return card ? card->memory_bytes : 0;
}

SIMGPU_EXPORT int simgpu_memory_overridden(void) {
  const simgpu::Profile* card = simgpu::profile();
  return card && card->memory_overridden ? 1 : 0;
}

SIMGPU_EXPORT int simgpu_device_count(void) {
  return simgpu::deviceCount();
}

SIMGPU_EXPORT void simgpu_set_read_observer(SimgpuReadObserver observer) {
  __atomic_store_n(&simgpu::g_observer, observer, __ATOMIC_RELEASE);
}

SIMGPU_EXPORT uint64_t simgpu_reads_back(void) {
  return simgpu::readsBack();
}

SIMGPU_EXPORT int simgpu_set_reads_known(int known) {
  bool previous = simgpu::t_reads_known;
  simgpu::t_reads_known = known != 0;
  return previous ? 1 : 0;
}

SIMGPU_EXPORT int simgpu_set_values(void* device, const void* host, size_t bytes) {
  return simgpu::setValues(device, host, bytes) ? 0 : -1;
}

SIMGPU_EXPORT int simgpu_read_values(void* host, const void* device, size_t bytes) {
  return simgpu::readValues(host, device, bytes) ? 0 : -1;
}

SIMGPU_EXPORT uint64_t simgpu_used_bytes(int device) {
  return simgpu::usedBytes(device);
}

SIMGPU_EXPORT int simgpu_refuse(const char* library, const char* function, int status) {
  return simgpu::refuse(library, function, status);
}

}  // extern "C"

namespace simgpu {
namespace {
std::atomic<uint64_t> g_active{0};
}

void activate(int device) {
  if (device < 0 || device >= 64) return;
  uint64_t bit = uint64_t{1} << device;
  // Read first: every launch calls this, and the bit is set once.
  if (g_active.load(std::memory_order_relaxed) & bit) return;
  if (g_active.fetch_or(bit) & bit) return;  // another thread made it meanwhile
  static const uint64_t context_bytes = [] {
    const char* text = getenv("MEMTRACE_GPU_CONTEXT_BYTES");
    return text && *text ? strtoull(text, nullptr, 10) : 0;
  }();
  // Charged once, never given back (a primary context lives as long as the process here); a
  // context that does not fit is not counted.
  if (context_bytes) charge(device, context_bytes);
}

bool active(int device) {
  return device >= 0 && device < 64 && (g_active.load() >> device & 1);
}
}  // namespace simgpu
