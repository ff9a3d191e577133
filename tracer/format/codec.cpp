#include "tracer/format/codec.h"

namespace memtrace::codec {
namespace {

// Table-driven CRC-32C, one byte a step; the fallback where SSE4.2 is missing.
struct Crc32cTable {
  uint32_t entries[256];
  constexpr Crc32cTable() : entries() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
      entries[i] = crc;
    }
  }
};
constexpr Crc32cTable kTable;

uint32_t crc32cPortable(const uint8_t* p, size_t size, uint32_t crc) {
  while (size--) crc = kTable.entries[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32cHardware(const uint8_t* p, size_t size,
                                                          uint32_t crc) {
  uint64_t crc64 = crc;
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc64 = __builtin_ia32_crc32di(crc64, word);
    p += 8;
    size -= 8;
  }
  crc = static_cast<uint32_t>(crc64);
  while (size--) crc = __builtin_ia32_crc32qi(crc, *p++);
  return crc;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  crc = has_sse42 ? crc32cHardware(p, size, crc) : crc32cPortable(p, size, crc);
#else
  crc = crc32cPortable(p, size, crc);
#endif
  return ~crc;
}

}  // namespace memtrace::codec
