#include "tracer/common/byte_format.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace memtrace::testing {
namespace {

// The report's precision (these were report::humanBytes's cases).
TEST(FormatBytes, FourSignificantDigits) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(1023), "1023 B");
  EXPECT_EQ(formatBytes(1024), "1.000 KiB");
  EXPECT_EQ(formatBytes(5 << 20), "5.000 MiB");
  EXPECT_EQ(formatBytes(uint64_t{13540} << 20), "13.22 GiB");
  EXPECT_EQ(formatBytes(uint64_t{200} << 30), "200.0 GiB");
}

// The estimator's precision (estimator::formatBytes's format).
TEST(FormatBytes, ThreeSignificantDigits) {
  EXPECT_EQ(formatBytes(1000, 3), "1000 B");
  EXPECT_EQ(formatBytes(1536, 3), "1.50 KiB");
  EXPECT_EQ(formatBytes(10433332, 3), "9.95 MiB");
  EXPECT_EQ(formatBytes(uint64_t{15} << 30, 3), "15.0 GiB");
  EXPECT_EQ(formatBytes(uint64_t{200} << 30, 3), "200 GiB");
}

TEST(FormatBytes, LargestUnitIsPebibytes) {
  EXPECT_EQ(formatBytes(uint64_t{1} << 50), "1.000 PiB");
  EXPECT_EQ(formatBytes(uint64_t{2048} << 50), "2048.0 PiB");
  EXPECT_EQ(formatBytes(UINT64_MAX), "16384.0 PiB");
}

TEST(FormatSignedBytes, NegativeCountsKeepTheirSign) {
  EXPECT_EQ(formatSignedBytes(-5, 3), "-5 B");
  EXPECT_EQ(formatSignedBytes(-1536, 3), "-1.50 KiB");
  EXPECT_EQ(formatSignedBytes(int64_t{3} << 20), "3.000 MiB");
  EXPECT_EQ(formatSignedBytes(INT64_MIN), "-8192.0 PiB");
}

}  // namespace
}  // namespace memtrace::testing
