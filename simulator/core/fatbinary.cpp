#include "simulator/core/fatbinary.h"

#include <stdint.h>
#include <string.h>

// Note [Reading a fatbinary]
// nvcc puts a kernel's images for every architecture it was compiled for into one fatbinary,
// and the driver picks the one to load by CUDA's compatibility rules: machine code (SASS) for
// sm_XY runs on devices of the same major version and a minor version of Y or more; PTX for
// compute_XY is compiled for any device of XY or newer; machine code is preferred. PyTorch's
// wheels carry SASS for sm_75, 80, 86, 90, 100 and 120 and no PTX, so an sm_89 card (L4, RTX
// 4090) runs the sm_86 images, and cub, which sizes its temporary storage by the tuning policy
// of the architecture the kernel was compiled for (cudaFuncGetAttributes's ptxVersion), must be
// told 86 there, not 89: it refuses an architecture it has no policy for.
// Layout (read from the fatbinaries nvcc writes; little endian): the wrapper a program
// registers is {u32 magic 0x466243b1, u32 version, const void* fatbinary, ...}; a fatbinary
// is a header {u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries}
// and entries {u16 kind (1 PTX, 2 machine code), u16, u32 header size, u64 payload size, ...,
// u32 architecture at byte 28}, each followed by its payload.

namespace simgpu {
namespace {

constexpr uint32_t kWrapperMagic = 0x466243b1;
constexpr uint32_t kFatbinaryMagic = 0xBA55ED50;
constexpr uint16_t kPtx = 1;
constexpr uint16_t kMachineCode = 2;
// Entries a fatbinary may hold before the reader stops (a damaged size cannot make it loop).
constexpr int kMaxEntries = 4096;

template <typename T>
T read(const unsigned char* at) {
  T value;
  memcpy(&value, at, sizeof(value));
  return value;
}

}  // namespace

int loadedArchitecture(const void* fatbinary, int device) {
  if (!fatbinary) return -1;
  const auto* bytes = static_cast<const unsigned char*>(fatbinary);
  if (read<uint32_t>(bytes) == kWrapperMagic) bytes = read<const unsigned char*>(bytes + 8);
  if (!bytes || read<uint32_t>(bytes) != kFatbinaryMagic) return -1;
  uint16_t header = read<uint16_t>(bytes + 6);
  uint64_t size = read<uint64_t>(bytes + 8);
  const unsigned char* entry = bytes + header;
  const unsigned char* end = entry + size;
  int best_code = 0, best_ptx = 0;
  for (int i = 0; i < kMaxEntries && entry + 32 <= end; ++i) {
    uint16_t kind = read<uint16_t>(entry);
    uint32_t entry_header = read<uint32_t>(entry + 4);
    uint64_t payload = read<uint64_t>(entry + 8);
    int arch = static_cast<int>(read<uint32_t>(entry + 28));
    if (kind == kMachineCode && arch / 10 == device / 10 && arch <= device && arch > best_code)
      best_code = arch;
    if (kind == kPtx && arch <= device && arch > best_ptx) best_ptx = arch;
    if (entry_header == 0) break;
    entry += entry_header + payload;
  }
  return best_code ? best_code : best_ptx;
}

}  // namespace simgpu
