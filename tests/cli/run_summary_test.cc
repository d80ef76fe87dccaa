// `parallax run`'s closing line (cli/run.h RunSummary).
#include <gtest/gtest.h>

#include "cli/run.h"

namespace parallax::cli {
namespace {

// Metric points come every 10 steps: a 3,000-step job's last point before
// the final one is at 2990. A job that succeeded ran all its steps.
TEST(RunSummaryTest, ASucceededJobReportsItsStepsNotItsLastPoint) {
  const std::string line = RunSummary({.id = 3,
                                       .state = "SUCCEEDED",
                                       .succeeded = true,
                                       .job_steps = 3000,
                                       .last_reported_step = 2990,
                                       .last_loss = 4.25,
                                       .elapsed_s = 62});
  EXPECT_EQ(line, "job 3 SUCCEEDED after 1:02 (3000 steps, last loss 4.250000)\n");
}

TEST(RunSummaryTest, AFailedJobSaysTheLastStepReported) {
  const std::string line = RunSummary({.id = 4,
                                       .state = "FAILED",
                                       .job_steps = 3000,
                                       .last_reported_step = 1200,
                                       .last_loss = 5.5,
                                       .attempts = 2,
                                       .elapsed_s = 5});
  EXPECT_EQ(line, "job 4 FAILED after 0:05 (last reported step 1200, loss 5.500000, 2 attempts)\n");
}

}  // namespace
}  // namespace parallax::cli
