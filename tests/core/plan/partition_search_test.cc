#include "core/plan/partition_search.h"

#include <gtest/gtest.h>

#include <cmath>

namespace parallax::plan {
namespace {

// Runs the search against a cost curve; returns the chosen P.
template <typename Curve>
uint32_t Search(Curve curve, PartitionSearchOptions options, PartitionSearch* out = nullptr) {
  PartitionSearch search(options);
  int guard = 0;
  while (auto p = search.Next()) {
    search.Record(*p, curve(*p));
    EXPECT_LT(++guard, 20);
    if (guard >= 20) break;
  }
  if (out != nullptr) *out = search;
  return search.Best();
}

TEST(PartitionSearchTest, FitRecoversTheCurve) {
  PartitionFit truth{.a = 0.05, .b = 8, .c = 1};
  std::vector<Trial> trials;
  for (uint32_t p : {1u, 2u, 4u, 8u, 16u}) trials.push_back({p, truth.At(p)});
  StatusOr<PartitionFit> fit = FitPartitionCurve(trials);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->a, 0.05, 1e-9);
  EXPECT_NEAR(fit->b, 8, 1e-9);
  EXPECT_NEAR(fit->c, 1, 1e-9);
  EXPECT_FALSE(FitPartitionCurve({{1, 2.0}, {2, 1.5}}).ok());
  EXPECT_FALSE(FitPartitionCurve({{1, 2.0}, {2, 1.5}, {2, 1.4}}).ok());
}

TEST(PartitionSearchTest, FindsTheOptimumOfSyntheticCurves) {
  struct Case {
    double a, b, c;
  };
  for (Case k : {Case{0.05, 8, 1}, Case{0.001, 50, 0.2}, Case{0.5, 2, 0}, Case{0.01, 1, 0.1}}) {
    auto curve = [k](uint32_t p) { return k.b / p + k.a * (p - 1) + k.c; };
    const double star = std::sqrt(k.b / k.a);
    PartitionSearch search({});
    const uint32_t chosen = Search(curve, {.start = 1, .max = 4096}, &search);
    SCOPED_TRACE(search.Describe());
    EXPECT_GE(search.trials().size(), 3u);
    // Within one doubling step of the true optimum.
    EXPECT_GE(chosen, std::max(1.0, std::floor(star / 2)));
    EXPECT_LE(chosen, std::ceil(star * 2));
  }
}

TEST(PartitionSearchTest, NoisyTimingsStayWithinOneDoubling) {
  // ±3% deterministic "noise" on t(P) = 40/P + 0.1(P−1) + 2 (optimum P = 20).
  int i = 0;
  auto curve = [&i](uint32_t p) {
    const double noise = 1 + 0.03 * std::sin(12.9898 * (++i));
    return (40.0 / p + 0.1 * (p - 1) + 2) * noise;
  };
  const uint32_t chosen = Search(curve, {.start = 2, .max = 1024});
  EXPECT_GE(chosen, 10u);
  EXPECT_LE(chosen, 40u);
}

TEST(PartitionSearchTest, OptimumAtTheStartStillTriesThree) {
  auto curve = [](uint32_t p) { return 1.0 / p + 1.0 * (p - 1) + 1; };
  PartitionSearch search({});
  EXPECT_EQ(Search(curve, {.start = 1, .max = 64}, &search), 1u);
  EXPECT_EQ(search.trials().size(), 3u);
  EXPECT_NE(search.Describe().find("chosen P=1"), std::string::npos) << search.Describe();
}

TEST(PartitionSearchTest, RespectsTheMaximum) {
  auto curve = [](uint32_t p) { return 100.0 / p; };  // always better with more
  EXPECT_LE(Search(curve, {.start = 1, .max = 16}), 16u);
}

}  // namespace
}  // namespace parallax::plan
