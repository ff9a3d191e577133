// The codec shared by writer and reader: LEB128 varints, zigzag for signed deltas,
// little-endian fixed-width integers and CRC-32C. Nothing here allocates or throws, so
// the recorder can use it on the hot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace memtrace::codec {

// A varint holds 7 bits a byte, low bits first; the top bit says "more follows".
inline constexpr size_t kMaxVarintBytes = 10;

inline uint8_t* putVarint(uint8_t* out, uint64_t value) {
  while (value >= 0x80) {
    *out++ = static_cast<uint8_t>(value) | 0x80;
    value >>= 7;
  }
  *out++ = static_cast<uint8_t>(value);
  return out;
}

// Zigzag maps signed to unsigned so that small magnitudes stay short:
// 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...
inline uint64_t zigzag(int64_t value) {
  return (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
}
inline int64_t unzigzag(uint64_t value) {
  return static_cast<int64_t>(value >> 1) ^ -static_cast<int64_t>(value & 1);
}

inline uint8_t* putZigzag(uint8_t* out, int64_t value) {
  return putVarint(out, zigzag(value));
}

inline uint8_t* putBytes(uint8_t* out, const void* data, size_t size) {
  out = putVarint(out, size);
  std::memcpy(out, data, size);
  return out + size;
}

inline void putU32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
inline uint32_t getU32(const uint8_t* in) {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 | uint32_t{in[3]} << 24;
}

// Reads one varint from [*cursor, end). Returns false, leaving *cursor alone, when the
// bytes end first or the varint is longer than 64 bits can hold (a corrupt input).
inline bool getVarint(const uint8_t** cursor, const uint8_t* end, uint64_t* value) {
  const uint8_t* p = *cursor;
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return false;
    uint8_t byte = *p++;
    result |= uint64_t{byte & 0x7fu} << shift;
    if (!(byte & 0x80)) {
      if (shift == 63 && byte > 1) return false;
      *cursor = p;
      *value = result;
      return true;
    }
  }
  return false;
}

// CRC-32C (Castagnoli); the SSE4.2 instruction where the CPU has it.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace memtrace::codec
