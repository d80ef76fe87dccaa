#include "core/base/time_format.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace parallax {
namespace {

class TimeFormatTest : public ::testing::Test {};

TEST_F(TimeFormatTest, EpochIsMidnightUtc) {
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339Millis(0), "1970-01-01T00:00:00.000Z");
}

TEST_F(TimeFormatTest, SecondsFormatTruncatesMillis) {
  // 2001-09-09T01:46:40Z is 1e9 seconds.
  EXPECT_EQ(FormatRfc3339(1000000000999), "2001-09-09T01:46:40Z");
  EXPECT_EQ(FormatRfc3339Millis(1000000000999), "2001-09-09T01:46:40.999Z");
  EXPECT_EQ(FormatRfc3339Millis(1000000000007), "2001-09-09T01:46:40.007Z");
}

TEST_F(TimeFormatTest, LeapDay) {
  // 2024-02-29T12:00:00Z.
  EXPECT_EQ(FormatRfc3339(1709208000000), "2024-02-29T12:00:00Z");
}

TEST_F(TimeFormatTest, NegativeMillisRoundTowardThePast) {
  EXPECT_EQ(FormatRfc3339Millis(-1), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(FormatRfc3339(-1), "1969-12-31T23:59:59Z");
  EXPECT_EQ(FormatRfc3339Millis(-1000), "1969-12-31T23:59:59.000Z");
  EXPECT_EQ(FormatRfc3339Millis(-1001), "1969-12-31T23:59:58.999Z");
}

TEST_F(TimeFormatTest, SystemNowIsAfter2020) {
  const int64_t jan_1_2020 = 1577836800000;
  EXPECT_GT(SystemNowMillis(), jan_1_2020);
  EXPECT_EQ(FormatRfc3339(SystemNowMillis()).size(), 20u);
}

}  // namespace
}  // namespace parallax
