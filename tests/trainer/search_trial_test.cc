// TrialTimer: the step times of a partition-search trial attempt
// (trainer/search_trial.h).
#include "trainer/search_trial.h"

#include <gtest/gtest.h>

namespace parallax::trainer {
namespace {

TEST(TrialTimerTest, MedianOfTheStepsAfterTheWarmUp) {
  TrialTimer timer(/*warmup_steps=*/2, /*steps=*/5);
  // The warm-up steps (slow: start-up) do not count.
  EXPECT_FALSE(timer.Add(9.0));
  EXPECT_FALSE(timer.Add(8.0));
  for (double s : {0.3, 0.1, 0.5, 0.2}) EXPECT_FALSE(timer.Add(s));
  EXPECT_TRUE(timer.Add(0.4));  // the last timed step
  EXPECT_DOUBLE_EQ(timer.Median(), 0.3);
  EXPECT_FALSE(timer.Add(0.1)) << "true exactly once";
  EXPECT_DOUBLE_EQ(timer.Median(), 0.3);
}

TEST(TrialTimerTest, EvenCountAveragesTheMiddleTwo) {
  TrialTimer timer(0, 4);
  for (double s : {0.4, 0.1, 0.3}) EXPECT_FALSE(timer.Add(s));
  EXPECT_TRUE(timer.Add(0.2));
  EXPECT_DOUBLE_EQ(timer.Median(), 0.25);
}

TEST(TrialTimerTest, InactiveOutsideATrial) {
  TrialTimer timer;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(timer.Add(1.0));
}

TEST(SearchSpecTest, NothingToReadWithoutACoordinator) {
  SessionOptions o;
  o.num_shards = 2;
  o.job_id = 1;
  ASSERT_TRUE(ApplySearchSpec(nullptr, &o).ok());
  EXPECT_EQ(o.config.ps.partitions, 0);
  EXPECT_EQ(o.trial_steps, 0);
}

}  // namespace
}  // namespace parallax::trainer
