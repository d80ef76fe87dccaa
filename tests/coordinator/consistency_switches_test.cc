// ConsistencySwitches over a real SQLite store: where a switch lands
// relative to the ranks' leases, and what it refuses.
#include "coordinator/service/consistency_switches.h"

#include <gtest/gtest.h>

#include "tests/coordinator/plan_fixtures.h"
#include "tests/coordinator/sqlite_service.h"

namespace parallax::coordinator {
namespace {

JobRecord Job(JobState state, int attempt = 1, int workers = 2) {
  JobRecord j;
  j.id = 7;
  j.state = state;
  j.attempt = attempt;
  j.workers = workers;
  return j;
}

class ConsistencySwitchesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(db_.Open().ok()); }
  testing::SqliteService db_;
};

TEST_F(ConsistencySwitchesTest, ARunningJobsSwitchLandsPastEveryRanksLease) {
  ConsistencySwitches switches(db_.store.get());
  const JobRecord job = Job(JobState::kRunning);
  // No rank has promised anything yet: the step cannot be picked.
  EXPECT_EQ(switches.Add(job, "async", 0).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(switches.Lease(7, 1, 0, 12).ok());
  EXPECT_EQ(switches.Add(job, "async", 0).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(switches.Lease(7, 1, 1, 16).ok());
  ASSERT_TRUE(switches.Lease(7, 1, 0, 9).ok());  // a smaller lease never shrinks one
  StatusOr<ConsistencySwitchRecord> first = switches.Add(job, "async", 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->from_step, 17);
  EXPECT_EQ(first->consistency, "async");
  // The next one lands after it, even with no newer lease.
  StatusOr<ConsistencySwitchRecord> second = switches.Add(job, "ssp:3", 0);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->from_step, 18);
  // Every lease brings every switch, oldest first.
  StatusOr<std::vector<ConsistencySwitchRecord>> all = switches.Lease(7, 1, 0, 20);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].from_step, 17);
  EXPECT_EQ((*all)[1].consistency, "ssp:3");
}

TEST_F(ConsistencySwitchesTest, ANewAttemptsLeasesReplaceTheOldAttempts) {
  ConsistencySwitches switches(db_.store.get());
  ASSERT_TRUE(switches.Lease(7, 1, 0, 100).ok());
  ASSERT_TRUE(switches.Lease(7, 1, 1, 100).ok());
  // Attempt 2 resumed from an earlier checkpoint.
  ASSERT_TRUE(switches.Lease(7, 2, 0, 24).ok());
  ASSERT_TRUE(switches.Lease(7, 1, 1, 200).ok());  // a straggler of attempt 1: ignored
  EXPECT_EQ(switches.Add(Job(JobState::kRunning, 2), "async", 0).status().code(),
            StatusCode::kUnavailable);
  ASSERT_TRUE(switches.Lease(7, 2, 1, 20).ok());
  StatusOr<ConsistencySwitchRecord> s = switches.Add(Job(JobState::kRunning, 2), "async", 0);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->from_step, 25);
}

TEST_F(ConsistencySwitchesTest, AJobNotTrainingYetTakesItFromItsFirstStepAndEndedOnesRefuse) {
  ConsistencySwitches switches(db_.store.get());
  StatusOr<ConsistencySwitchRecord> s = switches.Add(Job(JobState::kPending), "sync", 0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->from_step, 0);
  EXPECT_EQ(switches.Add(Job(JobState::kSucceeded), "async", 0).status().code(),
            StatusCode::kFailedPrecondition);
  for (const char* bad : {"fast", "async:2", "ssp:-1", ""}) {
    EXPECT_EQ(switches.Add(Job(JobState::kPending), bad, 0).status().code(),
              StatusCode::kInvalidArgument)
        << bad;
  }
  // Refused ones stored nothing.
  StatusOr<std::vector<ConsistencySwitchRecord>> all = switches.Lease(7, 1, 0, 8);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
}

TEST_F(ConsistencySwitchesTest, SwitchesOutliveTheCoordinatorLeasesDoNot) {
  {
    ConsistencySwitches before(db_.store.get());
    ASSERT_TRUE(before.Lease(7, 1, 0, 10).ok());
    ASSERT_TRUE(before.Lease(7, 1, 1, 10).ok());
    ASSERT_TRUE(before.Add(Job(JobState::kRunning), "async", 0).ok());
  }
  ConsistencySwitches after(db_.store.get());  // a restarted coordinator
  EXPECT_EQ(after.Add(Job(JobState::kRunning), "sync", 0).status().code(),
            StatusCode::kUnavailable);
  StatusOr<std::vector<ConsistencySwitchRecord>> all = after.Lease(7, 1, 0, 14);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].from_step, 11);
  ASSERT_TRUE(after.Lease(7, 1, 1, 13).ok());
  StatusOr<ConsistencySwitchRecord> s = after.Add(Job(JobState::kRunning), "sync", 0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->from_step, 15);
}

// A job whose plan keeps hot rows ([ps] hot_rows, all-reduced every step:
// the sync rule) refuses a switch to async or ssp by name, and takes sync.
TEST_F(ConsistencySwitchesTest, AJobWithHotRowsStaysSync) {
  NewJob n;
  n.name = "hot";
  n.workers = 2;
  n.job_text = "[job]\nname = \"hot\"\n";
  n.submitted_by = "cli";
  const JobRecord job = db_.store->CreateJob(n, 0).value();
  TaskRecord t;
  t.job_id = job.id;
  ASSERT_TRUE(db_.store->StartAttempt(job.id, {t}, "placed", 0).ok());
  ASSERT_TRUE(db_.store->TransitionJob(job.id, JobState::kRunning, "", 0).ok());
  plan::JobPlan p = parallax::testing::OnePsTablePlan("emb", 100, 4);
  p.variables[0].hot_rows = {3, 7};
  const int attempt = db_.store->GetJob(job.id).value().attempt;
  ASSERT_TRUE(db_.store->PutPlan(job.id, attempt, plan::JobPlanToJson(p), 0).ok());
  for (const char* mode : {"async", "ssp:2"}) {
    rpc::ConsistencySwitch out;
    try {
      db_.service->SetConsistency(out, testing::SqliteService::Header(), job.id, mode);
      ADD_FAILURE() << mode << " was accepted";
    } catch (const rpc::CoordinatorError& e) {
      EXPECT_NE(e.message.find("keeps 2 hot rows of \"emb\" on every rank ([ps] hot_rows)"),
                std::string::npos)
          << e.message;
      EXPECT_NE(e.message.find("Resubmit the job without hot_rows"), std::string::npos) << e.message;
    }
  }
  // sync passes this check (and waits for the ranks' leases, none here).
  rpc::ConsistencySwitch out;
  try {
    db_.service->SetConsistency(out, testing::SqliteService::Header(), job.id, "sync");
  } catch (const rpc::CoordinatorError& e) {
    EXPECT_EQ(e.message.find("hot rows"), std::string::npos) << e.message;
  }
}

}  // namespace
}  // namespace parallax::coordinator
