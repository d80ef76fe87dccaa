#include "core/base/log_limiter.h"

#include <gtest/gtest.h>

namespace parallax {
namespace {

TEST(LogLimiterTest, LetsOneLineThroughPerIntervalAndCountsTheOnesHeldBack) {
  FakeClock clock;
  LogLimiter limiter(&clock, 10'000);
  int64_t held = -1;
  EXPECT_TRUE(limiter.Allow(&held));
  EXPECT_EQ(held, 0);
  EXPECT_FALSE(limiter.Allow(&held));
  clock.Advance(9'999);
  EXPECT_FALSE(limiter.Allow(&held));
  clock.Advance(1);
  EXPECT_TRUE(limiter.Allow(&held));
  EXPECT_EQ(held, 2);
  EXPECT_FALSE(limiter.Allow(&held));
}

}  // namespace
}  // namespace parallax
