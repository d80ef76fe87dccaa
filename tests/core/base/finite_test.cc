#include "core/base/finite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace parallax {
namespace {

// Every position of arrays longer and shorter than the vectorized block,
// so both the block loop and the tail find what they must.
TEST(FiniteTest, FindsTheFirstNaNOrInfinityAnywhere) {
  for (size_t n : {0u, 1u, 15u, 16u, 17u, 40u}) {
    std::vector<float> v(n, 1.5f);
    EXPECT_FALSE(AnyNonFinite(v.data(), n)) << n;
    EXPECT_EQ(FirstNonFinite(v.data(), n), n) << n;
    for (size_t at = 0; at < n; ++at) {
      for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()}) {
        std::vector<float> w = v;
        w[at] = bad;
        if (at + 1 < n) w[n - 1] = bad;  // a later one too: the first is reported
        EXPECT_TRUE(AnyNonFinite(w.data(), n)) << n << " " << at;
        EXPECT_EQ(FirstNonFinite(w.data(), n), at) << n << " " << at;
      }
    }
  }
  const float large[] = {std::numeric_limits<float>::max(), -0.0f,
                         std::numeric_limits<float>::denorm_min()};
  EXPECT_FALSE(AnyNonFinite(large, 3));
}

}  // namespace
}  // namespace parallax
