// The simulated GPU's one state: its devices (from a profile), their memory, and what the
// libraries built on it share (the calling thread's device, the reads of device values, the
// one-line refusals). libmemtrace-simgpu.so holds it; the libraries that stand in for CUDA's
// (libcuda.so.1, libcudart.so.13, cuBLAS, cuDNN, NCCL, ...) link it. Nothing here knows of
// memtrace's recorder: memtrace finds the observer entry points of simgpu_api.h by dlsym.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <mutex>
#include <string>
#include <vector>

#define SIMGPU_EXPORT __attribute__((visibility("default")))

namespace simgpu {

// A card, as a profile describes it (simulator/profiles/*.json; Note [Device profiles]).
struct Profile {
  std::string name;         // "h100-80gb"
  std::string file;         // where it was read from
  std::string device_name;  // what cudaGetDeviceProperties names it
  uint64_t memory_bytes = 0;
  bool memory_overridden = false;  // MEMTRACE_GPU_MEMORY replaced the profile's size
  int major = 0;
  int minor = 0;
  int multiprocessors = 0;
  int l2_cache_bytes = 0;
  int memory_bus_width_bits = 0;
  int clock_khz = 0;
  int memory_clock_khz = 0;
  int shared_memory_per_block_optin = 0;
  int shared_memory_per_multiprocessor = 0;
  int max_threads_per_multiprocessor = 0;
  int max_blocks_per_multiprocessor = 0;
  int max_cluster_size = 0;
  std::string estimator_profile;
};

// The profile the process runs on: MEMTRACE_GPU_PROFILE (a file), sized by MEMTRACE_GPU_MEMORY
// when set. nullptr when it cannot be read; error() then says why in one line.
const Profile* profile();
const std::string& profileError();
// Whether the simulated cards are joined for multicast (NVLink SHARP over NVSwitch:
// CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED): MEMTRACE_GPU_MULTICAST=1; otherwise not, as on the
// machine the H200's rows were measured on. PyTorch offers NCCL's memory allocator
// (ProcessGroupNCCL's mem_allocator) only where it is (Note [NCCL's memory through the driver]
// in simulator/libraries/nccl.cpp).
bool multicastSupported();
int deviceCount();  // MEMTRACE_GPU_COUNT (1); 0 without a profile

// The calling thread's current device (a context's device, shared by runtime and driver).
int currentDevice();
void setCurrentDevice(int device);
// The calling thread's stream capture mode (cudaStreamCaptureMode's numbering, the driver's
// too), shared by runtime and driver as CUDA's runtime forwards it to the driver; exchanging
// it returns the previous mode.
int captureMode();
int exchangeCaptureMode(int mode);

// ---- Memory -----------------------------------------------------------------------------

enum class MemoryKind : uint8_t {
  kDevice,   // device memory: address space that is never touched (Note [Device memory])
  kManaged,  // managed memory: host memory the program may touch, counted as the device's
  kHost,     // page-locked host memory (cudaHostAlloc): ordinary host memory, not counted
};

enum class Status : uint8_t { kSuccess, kOutOfMemory, kInvalidValue, kInvalidDevice };

struct Pointer {
  bool found = false;
  MemoryKind kind = MemoryKind::kDevice;
  int device = -1;
  uintptr_t start = 0;
  size_t size = 0;
};

// Allocates `size` bytes of `kind` on `device`. Device and managed memory count against the
// device (the driver's rounding of `size`, chargedBytes) unless `counted` is false (a pool's
// allocation: the pool counts its reserve); fails with kOutOfMemory past the profile's memory.
Status allocate(void** pointer, size_t size, int device, MemoryKind kind, bool counted = true);
size_t chargedBytes(size_t size);
Status release(void* pointer);
Pointer find(const void* pointer);
// Whether `pointer` is in device memory (not managed, page-locked or the program's own).
bool isDeviceAddress(const void* pointer);
// Bytes counted on the device: allocations, pools' reserve, physical memory of the virtual
// memory calls, and what libraries keep (NCCL's buffers).
uint64_t usedBytes(int device);
uint64_t totalBytes(int device);
// Counts bytes against the device without an allocation (a pool growing, physical memory
// made by cuMemCreate); false when the device has not that much left.
bool charge(int device, uint64_t bytes);
void uncharge(int device, uint64_t bytes);

// Reserves address space that is never touched (PROT_NONE, MAP_NORESERVE), aligned.
void* reserveAddressSpace(size_t size, size_t alignment);
void releaseAddressSpace(void* start, size_t size);

// ---- Copies, and what the program reads back (Note [Values on the simulated device]) -------

// Copies of at most this many bytes into and within device memory are carried out.
inline constexpr size_t kKeptBytes = size_t{64} << 10;
// A copy of `bytes` from `src` to `dst`, either in device memory or the host's, as the
// simulated device makes it; one from device memory to the host is counted and handed to the
// read observer memtrace registers. False (nothing copied) for a read past the limit
// MEMTRACE_GPU_MAX_READS sets (Note [A run that waits on a value]).
bool copy(void* dst, const void* src, size_t bytes);
// A memset of device or host memory.
void fill(void* dst, int value, size_t bytes);
// Sets device memory (at most kKeptBytes, inside one allocation) to `src`'s bytes, or to zeros
// when `src` is null, for memtrace: not a copy the program made, so not counted. False, setting
// nothing, otherwise.
bool setValues(void* dst, const void* src, size_t bytes);
// Reads what device memory holds (at most kKeptBytes, inside one allocation) for memtrace, not
// for the program: not counted, not observed. False, reading nothing, otherwise.
bool readValues(void* dst, const void* src, size_t bytes);
uint64_t readsBack();

// ---- Refusals ---------------------------------------------------------------------------

// A call the simulated device cannot answer: one line on stderr the first time each function
// is refused, naming it and the library; returns `status`, the library's "not supported".
int refuse(const char* library, const char* function, int status, const char* why = nullptr);
// A call answered by an approximation (a workspace size nobody measured): one line the first
// time, then silence.
void approximate(const char* library, const char* function, const char* how);

}  // namespace simgpu

namespace simgpu {
// The device's primary context: made by the runtime's first call that needs it (or the
// driver's cuDevicePrimaryCtxRetain), current on the threads that used it. Making it counts
// MEMTRACE_GPU_CONTEXT_BYTES against the device (0 by default): what a card spends on a
// context and the libraries' modules outside any allocation call.
void activate(int device);
bool active(int device);
}  // namespace simgpu
