#include "coordinator/store/job_state.h"

#include <gtest/gtest.h>

namespace parallax::coordinator {
namespace {

const JobState kAll[] = {JobState::kPending,   JobState::kPlacing, JobState::kRunning,
                         JobState::kSucceeded, JobState::kFailed,  JobState::kCancelled};

TEST(JobStateTest, NamesRoundTrip) {
  for (JobState s : kAll) {
    std::optional<JobState> parsed = ParseJobState(JobStateName(s));
    ASSERT_TRUE(parsed.has_value()) << JobStateName(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_FALSE(ParseJobState("pending").has_value());
  EXPECT_FALSE(ParseJobState("").has_value());
}

TEST(JobStateTest, HappyPathIsAllowed) {
  EXPECT_TRUE(IsValidTransition(JobState::kPending, JobState::kPlacing));
  EXPECT_TRUE(IsValidTransition(JobState::kPlacing, JobState::kRunning));
  EXPECT_TRUE(IsValidTransition(JobState::kRunning, JobState::kSucceeded));
}

TEST(JobStateTest, SkippingStatesIsRefused) {
  EXPECT_FALSE(IsValidTransition(JobState::kPending, JobState::kRunning));
  EXPECT_FALSE(IsValidTransition(JobState::kPending, JobState::kSucceeded));
  EXPECT_FALSE(IsValidTransition(JobState::kPlacing, JobState::kSucceeded));
}

TEST(JobStateTest, RestartGoesBackToPending) {
  EXPECT_TRUE(IsValidTransition(JobState::kRunning, JobState::kPending));
  EXPECT_TRUE(IsValidTransition(JobState::kPlacing, JobState::kPending));
  EXPECT_FALSE(IsValidTransition(JobState::kPending, JobState::kPending));
}

TEST(JobStateTest, LiveJobsCanFailOrBeCancelled) {
  for (JobState s : {JobState::kPending, JobState::kPlacing, JobState::kRunning}) {
    EXPECT_TRUE(IsValidTransition(s, JobState::kFailed)) << JobStateName(s);
    EXPECT_TRUE(IsValidTransition(s, JobState::kCancelled)) << JobStateName(s);
  }
}

TEST(JobStateTest, TerminalStatesAreFinalExceptResume) {
  for (JobState from : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    EXPECT_TRUE(IsTerminal(from));
    for (JobState to : kAll) {
      bool resume = to == JobState::kPending && from != JobState::kSucceeded;
      EXPECT_EQ(IsValidTransition(from, to), resume)
          << JobStateName(from) << " -> " << JobStateName(to);
    }
  }
  EXPECT_FALSE(IsTerminal(JobState::kRunning));
}

}  // namespace
}  // namespace parallax::coordinator
