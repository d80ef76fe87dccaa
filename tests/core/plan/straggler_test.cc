// The wait for the slowest rank (core/plan/straggler.h): how it is measured
// from the ranks' compute times, kept as JSON, and taken by a plan: only a
// sync plan of the shape it was measured at, added to the predicted wait and
// to no path's time.
#include "core/plan/straggler.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "core/plan/plan_builder.h"
#include "core/plan/report.h"
#include "tests/core/plan/replan_inputs.h"
#include "schemas/kv_keys.h"

namespace parallax::plan {
namespace {

TEST(StragglerMeterTest, TheStepsWeightedMeanOfSlowestLessMean) {
  StragglerMeter m;
  EXPECT_EQ(m.mean_s(), 0);
  const std::vector<double> one = {0.010, 0.020, 0.030};  // slowest 30, mean 20: 10 ms
  const std::vector<double> two = {0.010, 0.050};         // slowest 50, mean 30: 20 ms
  m.Add(one, 10);
  m.Add(two, 30);
  EXPECT_EQ(m.steps(), 40);
  EXPECT_EQ(m.points(), 2);
  EXPECT_NEAR(m.mean_s(), (0.010 * 10 + 0.020 * 30) / 40, 1e-12);
  // One rank, or no steps, says nothing about a spread.
  m.Add(std::vector<double>{0.5}, 10);
  m.Add(two, 0);
  EXPECT_EQ(m.steps(), 40);
}

TEST(StragglerJsonTest, RoundTripAndBadText) {
  MeasuredStraggler s;
  s.measured_unix_s = 1764000000;
  s.job_id = 7;
  s.workers = 8;
  s.hosts = 4;
  s.straggler_s = 0.0267;
  s.steps = 40;
  s.steps_per_point = 1;
  StatusOr<MeasuredStraggler> back = ParseStraggler(StragglerToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job_id, 7);
  EXPECT_EQ(back->workers, 8);
  EXPECT_EQ(back->hosts, 4);
  EXPECT_DOUBLE_EQ(back->straggler_s, 0.0267);
  EXPECT_EQ(back->steps, 40);
  EXPECT_EQ(kv_keys::Straggler(8), "cluster/straggler/8");
  EXPECT_EQ(StragglerSource(s),
            "measured by job 7 over 40 steps, 8 workers on 4 hosts, at 2025-11-24 16:00 UTC");
  StatusOr<MeasuredStraggler> bad = ParseStraggler("{\"workers\": 2}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("straggler_s"), std::string::npos);
  EXPECT_FALSE(ParseStraggler("not json").ok());
}

class StragglerPlanTest : public ::testing::Test {
 protected:
  static MeasuredStraggler Measured(int workers, int hosts) {
    MeasuredStraggler s;
    s.job_id = 3;
    s.workers = workers;
    s.hosts = hosts;
    s.straggler_s = 0.025;
    s.steps = 40;
    return s;
  }
  static StatusOr<JobPlan> Plan(Consistency consistency, std::optional<MeasuredStraggler> s) {
    JobConfig job = testing::ReplanJob();
    job.job.consistency = consistency;
    PlanInputs in = testing::ReplanInputs();  // 2 workers on 1 host
    in.straggler = s;
    return BuildPlan(job, in);
  }
};

TEST_F(StragglerPlanTest, ASyncPlanOfTheSameShapeWaitsForIt) {
  StatusOr<JobPlan> without = Plan(Consistency::kSync, std::nullopt);
  StatusOr<JobPlan> with = Plan(Consistency::kSync, Measured(2, 1));
  ASSERT_TRUE(without.ok() && with.ok());
  EXPECT_EQ(without->cost.sync_straggler_s, 0);
  EXPECT_EQ(without->figures.straggler, "not measured");
  EXPECT_DOUBLE_EQ(with->cost.sync_straggler_s, 0.025);
  EXPECT_EQ(with->figures.straggler.rfind("measured by job 3 over 40 steps", 0), 0u)
      << with->figures.straggler;
  // The same paths and the same predicted communication: it is added once,
  // to the wait, not to any path.
  ASSERT_EQ(with->variables.size(), without->variables.size());
  for (size_t i = 0; i < with->variables.size(); ++i) {
    EXPECT_EQ(with->variables[i].path, without->variables[i].path);
  }
  EXPECT_DOUBLE_EQ(with->predicted_comm_s, without->predicted_comm_s);
  const nlohmann::json doc = nlohmann::json::parse(PlanReportJson(BuildPlanReport(*with)));
  EXPECT_DOUBLE_EQ(doc["predicted_wait_seconds_per_step"].get<double>(),
                   doc["predicted_seconds_per_step"]["plan"].get<double>() + 0.025);
  EXPECT_DOUBLE_EQ(doc["figures"]["sync_straggler_s"]["value"].get<double>(), 0.025);
  // It survives the plan's JSON, where the coordinator and `parallax status` read it.
  StatusOr<JobPlan> back = ParseJobPlan(JobPlanToJson(*with));
  ASSERT_TRUE(back.ok());
  EXPECT_DOUBLE_EQ(back->cost.sync_straggler_s, 0.025);
  EXPECT_EQ(back->figures.straggler, with->figures.straggler);
  EXPECT_NE(FormatPlanReport(BuildPlanReport(*with)).find("25 ms for the slowest rank's compute"),
            std::string::npos);
}

TEST_F(StragglerPlanTest, NotAnotherShapeNorAnAsyncPlan) {
  StatusOr<JobPlan> other = Plan(Consistency::kSync, Measured(2, 2));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->cost.sync_straggler_s, 0);
  EXPECT_EQ(other->figures.straggler.rfind("not measured at this shape; measured by job 3", 0), 0u)
      << other->figures.straggler;
  StatusOr<JobPlan> more = Plan(Consistency::kSync, Measured(4, 1));
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->cost.sync_straggler_s, 0);
  for (Consistency c : {Consistency::kAsync, Consistency::kSsp}) {
    StatusOr<JobPlan> async = Plan(c, Measured(2, 1));
    ASSERT_TRUE(async.ok());
    EXPECT_EQ(async->cost.sync_straggler_s, 0);
    EXPECT_EQ(async->figures.straggler.rfind("none: ranks wait for each other only in sync", 0),
              0u);
  }
}

}  // namespace
}  // namespace parallax::plan
