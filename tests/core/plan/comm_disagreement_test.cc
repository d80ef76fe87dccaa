// The detector of a sustained disagreement between measured and predicted
// communication time per step (core/plan/comm_disagreement.h): warm-up,
// window, factor, both directions, a noisy interval, one report per attempt.
#include "core/plan/comm_disagreement.h"

#include <gtest/gtest.h>

#include <optional>

namespace parallax::plan {
namespace {

class DisagreementDetectorTest : public ::testing::Test {
 protected:
  // Predicted 10 ms/step: 6 ms collectives, 4 ms PS.
  static constexpr PredictedComm kPredicted{.total_s = 0.010, .dense_s = 0.006, .sparse_s = 0.004};
  static DisagreementOptions Options() {
    return {.factor = 2.0, .after_steps = 100, .window_steps = 100, .min_intervals = 2};
  }
  // The interval of `steps` steps after the previous one fed, measuring
  // `ms` per step (split 60/40 between collectives and PS).
  CommInterval Next(double ms, int64_t steps = 50) {
    CommInterval i{.first_step = next_, .last_step = next_ + steps - 1,
                   .dense_s = 0.6 * ms / 1e3, .sparse_s = 0.4 * ms / 1e3};
    next_ += steps;
    return i;
  }
  // Feeds `n` intervals of `ms` per step; the first report, if any.
  std::optional<Disagreement> Feed(DisagreementDetector* d, int n, double ms,
                                   int64_t steps = 50) {
    std::optional<Disagreement> first;
    for (int k = 0; k < n; ++k) {
      std::optional<Disagreement> got = d->Add(Next(ms, steps));
      if (got && !first) first = got;
    }
    return first;
  }
  int64_t next_ = 0;
};

TEST_F(DisagreementDetectorTest, SustainedSlowerThanPredictedFiresAfterWarmupAndWindow) {
  DisagreementDetector d(kPredicted, Options());
  // Steps 0-99: warm-up, far off but not compared.
  EXPECT_FALSE(Feed(&d, 2, 100.0));
  // Steps 100-149: one interval is not a window.
  EXPECT_FALSE(d.Add(Next(31.0)));
  std::optional<Disagreement> got = d.Add(Next(31.0));  // steps 150-199
  ASSERT_TRUE(got);
  EXPECT_EQ(got->first_step, 100);
  EXPECT_EQ(got->last_step, 199);
  EXPECT_NEAR(got->measured_s, 0.031, 1e-12);
  EXPECT_NEAR(got->measured_dense_s, 0.0186, 1e-12);
  EXPECT_NEAR(got->measured_sparse_s, 0.0124, 1e-12);
  EXPECT_NEAR(got->ratio(), 3.1, 1e-9);
  EXPECT_EQ(got->Describe(),
            "measured communication 31 ms/step, predicted 10 ms/step (3.1x) over steps 100-199");
  EXPECT_TRUE(d.reported());
}

TEST_F(DisagreementDetectorTest, FasterThanPredictedFiresToo) {
  DisagreementDetector d(kPredicted, Options());
  EXPECT_FALSE(Feed(&d, 2, 10.0));
  std::optional<Disagreement> got = Feed(&d, 2, 4.0);
  ASSERT_TRUE(got);
  EXPECT_NEAR(got->ratio(), 0.4, 1e-9);
}

TEST_F(DisagreementDetectorTest, WithinTheFactorNeverFires) {
  DisagreementDetector d(kPredicted, Options());
  // 2x either way is inside the band (more than `factor` times is needed).
  EXPECT_FALSE(Feed(&d, 10, 20.0));
  EXPECT_FALSE(Feed(&d, 10, 5.0));
  EXPECT_FALSE(Feed(&d, 10, 12.0));
  EXPECT_FALSE(d.reported());
}

TEST_F(DisagreementDetectorTest, OneNoisyIntervalNeverFires) {
  DisagreementDetector d(kPredicted, Options());
  EXPECT_FALSE(Feed(&d, 2, 10.0));
  // A long stall in one interval, each time followed by a normal one.
  for (int k = 0; k < 5; ++k) {
    EXPECT_FALSE(d.Add(Next(500.0, 200)));
    EXPECT_FALSE(d.Add(Next(10.0)));
  }
}

TEST_F(DisagreementDetectorTest, AnIntervalInsideTheBandStartsTheWindowOver) {
  DisagreementDetector d(kPredicted, Options());
  EXPECT_FALSE(Feed(&d, 2, 10.0));
  EXPECT_FALSE(d.Add(Next(40.0, 60)));  // steps 100-159
  EXPECT_FALSE(d.Add(Next(10.0)));      // 160-209: back in the band
  EXPECT_FALSE(d.Add(Next(40.0, 60)));  // 210-269
  std::optional<Disagreement> got = d.Add(Next(40.0, 60));  // 270-329
  ASSERT_TRUE(got);
  EXPECT_EQ(got->first_step, 210);
}

TEST_F(DisagreementDetectorTest, SwitchingSidesStartsTheWindowOver) {
  DisagreementDetector d(kPredicted, Options());
  EXPECT_FALSE(Feed(&d, 2, 10.0));
  EXPECT_FALSE(d.Add(Next(40.0, 60)));
  EXPECT_FALSE(d.Add(Next(1.0, 60)));  // below: a new run of one interval
  std::optional<Disagreement> got = d.Add(Next(1.0, 60));
  ASSERT_TRUE(got);
  EXPECT_LT(got->ratio(), 0.5);
  EXPECT_EQ(got->first_step, 160);
}

TEST_F(DisagreementDetectorTest, TheWindowNeedsItsSteps) {
  DisagreementDetector d(kPredicted, Options());
  EXPECT_FALSE(Feed(&d, 2, 10.0));
  // 10-step intervals: the window of 100 steps takes 10 of them.
  for (int k = 0; k < 9; ++k) EXPECT_FALSE(d.Add(Next(40.0, 10))) << k;
  EXPECT_TRUE(d.Add(Next(40.0, 10)));
}

TEST_F(DisagreementDetectorTest, ReportsOncePerAttempt) {
  DisagreementDetector d(kPredicted, Options());
  EXPECT_FALSE(Feed(&d, 2, 10.0));
  EXPECT_TRUE(Feed(&d, 2, 40.0));
  // It stays off, and comes back, and goes off again: nothing more.
  EXPECT_FALSE(Feed(&d, 4, 40.0));
  EXPECT_FALSE(Feed(&d, 4, 10.0));
  EXPECT_FALSE(Feed(&d, 4, 1.0));
}

TEST_F(DisagreementDetectorTest, WarmupCountsFromTheAttemptsFirstStep) {
  // A resumed attempt starts at step 1000: its warm-up is steps 1000-1099.
  next_ = 1000;
  DisagreementDetector d(kPredicted, Options());
  EXPECT_FALSE(Feed(&d, 2, 40.0));
  EXPECT_FALSE(d.Add(Next(40.0)));
  std::optional<Disagreement> got = d.Add(Next(40.0));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->first_step, 1100);
}

TEST_F(DisagreementDetectorTest, AnIntervalOutOfOrderIsIgnored) {
  DisagreementDetector d(kPredicted, Options());
  EXPECT_FALSE(Feed(&d, 3, 40.0));  // 0-149: warm-up, then one interval off
  EXPECT_FALSE(d.Add({.first_step = 120, .last_step = 149, .dense_s = 1, .sparse_s = 1}));
  EXPECT_TRUE(d.Add(Next(40.0)));
}

TEST_F(DisagreementDetectorTest, NothingPredictedAndSomethingMeasured) {
  DisagreementDetector d({}, {.factor = 2.0, .after_steps = 0, .window_steps = 10,
                              .min_intervals = 2});
  EXPECT_FALSE(d.Add(Next(0.0, 10)));  // nothing either way: in the band
  EXPECT_FALSE(d.Add(Next(3.0, 10)));
  std::optional<Disagreement> got = d.Add(Next(3.0, 10));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->Describe(),
            "measured communication 3 ms/step, predicted 0 ms/step (nothing predicted) over "
            "steps 10-29");
}

}  // namespace
}  // namespace parallax::plan
