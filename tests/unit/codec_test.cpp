#include "tracer/format/codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

namespace memtrace::codec {
namespace {

uint64_t roundTrip(uint64_t value, size_t* length) {
  uint8_t buffer[kMaxVarintBytes];
  uint8_t* end = putVarint(buffer, value);
  *length = static_cast<size_t>(end - buffer);
  const uint8_t* cursor = buffer;
  uint64_t decoded = ~value;
  EXPECT_TRUE(getVarint(&cursor, end, &decoded));
  EXPECT_EQ(cursor, end);
  return decoded;
}

TEST(Varint, RoundTripsBoundaries) {
  const uint64_t values[] = {0,
                             1,
                             127,
                             128,
                             16383,
                             16384,
                             (1ull << 32) - 1,
                             1ull << 32,
                             (1ull << 63) - 1,
                             1ull << 63,
                             std::numeric_limits<uint64_t>::max()};
  const size_t lengths[] = {1, 1, 1, 2, 2, 3, 5, 5, 9, 10, 10};
  for (size_t i = 0; i < std::size(values); ++i) {
    size_t length = 0;
    EXPECT_EQ(roundTrip(values[i], &length), values[i]);
    EXPECT_EQ(length, lengths[i]) << values[i];
  }
}

TEST(Varint, RoundTripsRandomValues) {
  std::mt19937_64 random(7);
  for (int i = 0; i < 100000; ++i) {
    uint64_t value = random() >> (random() % 64);
    size_t length;
    ASSERT_EQ(roundTrip(value, &length), value);
  }
}

TEST(Varint, RejectsTruncatedAndOverlongInput) {
  uint8_t buffer[kMaxVarintBytes];
  uint8_t* end = putVarint(buffer, 1ull << 40);
  for (const uint8_t* cut = buffer; cut < end; ++cut) {
    const uint8_t* cursor = buffer;
    uint64_t value;
    EXPECT_FALSE(getVarint(&cursor, cut, &value));
    EXPECT_EQ(cursor, buffer) << "a failed read must not move the cursor";
  }
  // Eleven continuation bytes, and a tenth byte carrying more than the 64th bit.
  uint8_t overlong[11];
  std::memset(overlong, 0xff, sizeof(overlong));
  const uint8_t* cursor = overlong;
  uint64_t value;
  EXPECT_FALSE(getVarint(&cursor, overlong + 11, &value));
  uint8_t too_big[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
  cursor = too_big;
  EXPECT_FALSE(getVarint(&cursor, too_big + 10, &value));
}

TEST(Zigzag, MapsSmallMagnitudesToSmallNumbers) {
  EXPECT_EQ(zigzag(0), 0u);
  EXPECT_EQ(zigzag(-1), 1u);
  EXPECT_EQ(zigzag(1), 2u);
  EXPECT_EQ(zigzag(-2), 3u);
  for (int64_t value : {int64_t{0}, int64_t{-1}, int64_t{1} << 40, -(int64_t{1} << 40),
                        std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()})
    EXPECT_EQ(unzigzag(zigzag(value)), value);
}

TEST(Crc32c, MatchesTheStandardCheckValue) {
  // The CRC-32C check value of "123456789" (RFC 3720, appendix B.4).
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Incremental use gives the same answer as one call.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(Crc32c, DetectsEveryFlippedBit) {
  uint8_t data[64];
  for (int i = 0; i < 64; ++i) data[i] = static_cast<uint8_t>(i * 37);
  uint32_t good = crc32c(data, sizeof(data));
  for (size_t bit = 0; bit < sizeof(data) * 8; ++bit) {
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(crc32c(data, sizeof(data)), good);
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace memtrace::codec
