// An agent that goes silent and comes back (coordinator/orchestration/agent_liveness.h):
// the state machine on its own, then through the service's handlers with a
// FakeClock, on each side of --agent-timeout-ms.
#include "coordinator/orchestration/agent_liveness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/coordinator/service_driver.h"

namespace parallax::coordinator {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

std::string Job(int workers, int max_restarts) {
  return "[job]\nname = \"t\"\nworkers = " + std::to_string(workers) +
         "\narch = \"allreduce\"\nmax_restarts = " + std::to_string(max_restarts) +
         "\n[trainer]\ncommand = [\"/bin/true\"]\n";
}

bool AnyContains(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

TaskRecord Running(int attempt, const std::string& agent) {
  TaskRecord t;
  t.job_id = 1;
  t.attempt = attempt;
  t.agent_name = agent;
  t.state = TaskState::kRunning;
  return t;
}

TEST(AgentLivenessTest, AnAgentIsLostOnceAndReturnsOnce) {
  AgentLiveness liveness(5'000);
  EXPECT_EQ(liveness.Observe("a", 0, 5'000).kind, AgentLiveness::Transition::kNone);
  AgentLiveness::Transition lost = liveness.Observe("a", 0, 5'001);
  EXPECT_EQ(lost.kind, AgentLiveness::Transition::kLost);
  EXPECT_EQ(lost.silent_ms, 5'001);
  EXPECT_TRUE(liveness.IsLost("a"));
  EXPECT_EQ(liveness.Observe("a", 0, 9'000).kind, AgentLiveness::Transition::kNone);
  AgentLiveness::Transition back = liveness.Observe("a", 12'000, 12'500);
  EXPECT_EQ(back.kind, AgentLiveness::Transition::kReturned);
  EXPECT_EQ(back.silent_ms, 12'000);
  EXPECT_FALSE(liveness.IsLost("a"));
  EXPECT_EQ(liveness.Observe("a", 12'000, 12'600).kind, AgentLiveness::Transition::kNone);
}

TEST(AgentLivenessTest, OnlyTasksOfTheCurrentLiveAttemptStillCountedOnTheAgentAreKept) {
  JobRecord job;
  job.id = 1;
  job.attempt = 2;
  job.state = JobState::kRunning;
  const TaskRecord current = Running(2, "a");
  EXPECT_EQ(ListedTaskVerdict(job, &current, "a"), ListedTask::kKeep);
  EXPECT_EQ(ListedTaskVerdict(job, &current, "b"), ListedTask::kStop);  // not its task
  const TaskRecord older = Running(1, "a");
  EXPECT_EQ(ListedTaskVerdict(job, &older, "a"), ListedTask::kStop);
  TaskRecord lost = current;
  lost.state = TaskState::kLost;
  EXPECT_EQ(ListedTaskVerdict(job, &lost, "a"), ListedTask::kStop);
  EXPECT_EQ(ListedTaskVerdict(job, nullptr, "a"), ListedTask::kStop);
  EXPECT_EQ(ListedTaskVerdict(std::nullopt, &current, "a"), ListedTask::kStop);
  job.state = JobState::kFailed;
  EXPECT_EQ(ListedTaskVerdict(job, &current, "a"), ListedTask::kStop);
}

TEST(AgentLivenessTest, AFinalReportReplacesOnlyALossForSilence) {
  const TaskRecord lost = LostForSilence(Running(1, "a"), "a", 12'000, 100);
  EXPECT_TRUE(LostBySilence(lost));
  EXPECT_EQ(lost.message, "agent \"a\" stopped heartbeating 12 s ago");
  rpc::TaskReport report;
  report.state = rpc::TaskState::EXITED;
  report.__set_exit_code(0);
  std::optional<TaskRecord> fixed = LateFinalReport(lost, report, 200);
  ASSERT_TRUE(fixed);
  EXPECT_EQ(fixed->state, TaskState::kExited);
  EXPECT_EQ(fixed->exit_code, 0);
  EXPECT_EQ(fixed->updated, 200);
  EXPECT_THAT(fixed->message, HasSubstr("reported after its agent was lost"));
  report.state = rpc::TaskState::KILLED;
  report.__set_signal(9);
  EXPECT_EQ(LateFinalReport(lost, report, 200)->state, TaskState::kKilled);
  report.state = rpc::TaskState::RUNNING;
  EXPECT_FALSE(LateFinalReport(lost, report, 200));  // a lost task does not run again
  TaskRecord reported_lost = Running(1, "a");
  reported_lost.state = TaskState::kLost;
  reported_lost.message = "exit status unknown";  // the agent's own verdict stands
  report.state = rpc::TaskState::EXITED;
  EXPECT_FALSE(LateFinalReport(reported_lost, report, 200));
}

class LostAgentTest : public ::testing::Test {
 protected:
  // Lets `ms` pass in steps, with `alive` heartbeating and reconciling after each.
  void Pass(int64_t ms, const std::vector<std::string>& alive) {
    for (int64_t step = 0; step < ms; step += 1'000) {
      c_.clock().Advance(1'000);
      for (const std::string& a : alive) c_.Heartbeat(a);
      c_.service().Reconcile();
    }
  }

  ServiceDriver c_{/*agent_timeout_ms=*/5'000};
};

TEST_F(LostAgentTest, WithinTheBoundAnAgentsSilenceCostsTheJobNothing) {
  c_.Register("a", 2);
  int64_t id = c_.Submit(Job(2, 0));
  std::vector<rpc::TaskKey> keys = ServiceDriver::Keys(c_.Poll("a"));
  c_.Report("a", keys, rpc::TaskState::RUNNING);
  Pass(4'000, {});
  EXPECT_EQ(c_.Job(id).state, rpc::JobState::RUNNING);
  c_.Heartbeat("a");
  c_.Report("a", keys, rpc::TaskState::EXITED, {0, 0});  // what ended while it was away
  EXPECT_EQ(c_.Job(id).state, rpc::JobState::SUCCEEDED);
  EXPECT_EQ(c_.Job(id).attempt, 1);
}

TEST_F(LostAgentTest, BeyondTheBoundFinishedTasksAreRecordedAsFinishedAndAFailedJobStaysFailed) {
  c_.Register("a", 2);
  int64_t id = c_.Submit(Job(2, 0));
  std::vector<rpc::TaskKey> keys = ServiceDriver::Keys(c_.Poll("a"));
  c_.Report("a", keys, rpc::TaskState::RUNNING);
  Pass(6'000, {});
  ASSERT_EQ(c_.Job(id).state, rpc::JobState::FAILED);
  EXPECT_THAT(c_.Job(id).reason, HasSubstr("agent \"a\" stopped heartbeating"));

  // The agent is back; its ranks had finished with code 0 meanwhile.
  c_.Heartbeat("a");
  c_.service().Reconcile();
  EXPECT_TRUE(AnyContains(c_.Events(0), "agent \"a\" is back after"));
  c_.Report("a", keys, rpc::TaskState::EXITED, {0, 0});
  for (const rpc::TaskInfo& t : c_.Tasks(id)) {
    EXPECT_EQ(t.state, rpc::TaskState::EXITED) << t.index;
    EXPECT_EQ(t.exit_code, 0) << t.index;
  }
  EXPECT_TRUE(AnyContains(c_.Events(id), "reported after its agent was lost"));
  c_.service().Reconcile();
  EXPECT_EQ(c_.Job(id).state, rpc::JobState::FAILED);  // no flip back
}

TEST_F(LostAgentTest, ALateAgentStopsItsRanksOfOlderAttemptsAndNoneOfTheCurrentOne) {
  c_.Register("a", 1);
  int64_t id = c_.Submit(Job(1, /*max_restarts=*/1));
  std::vector<rpc::TaskKey> first = ServiceDriver::Keys(c_.Poll("a"));
  ASSERT_EQ(first.size(), 1u);
  c_.Report("a", first, rpc::TaskState::RUNNING);
  c_.Register("b", 1);
  Pass(6'000, {"b"});  // a is silent: lost; the job restarts on b
  ASSERT_EQ(c_.Job(id).attempt, 2);
  std::vector<rpc::TaskKey> second = ServiceDriver::Keys(c_.Poll("b"));
  ASSERT_EQ(second.size(), 1u);
  c_.Report("b", second, rpc::TaskState::RUNNING);

  // a comes back still running attempt 1's rank: that one is stopped.
  c_.Heartbeat("a");
  rpc::PollResponse late = c_.Poll("a", first);
  ASSERT_EQ(late.stop.size(), 1u);
  EXPECT_EQ(late.stop[0].attempt, 1);
  EXPECT_TRUE(late.start.empty());
  // ... and so after a restart of the agent process.
  c_.Register("a", 1);
  rpc::PollResponse restarted = c_.Poll("a", first);
  ASSERT_EQ(restarted.stop.size(), 1u);
  EXPECT_EQ(restarted.stop[0].attempt, 1);
  // The current attempt's rank on b was never touched.
  EXPECT_TRUE(c_.Poll("b", second).stop.empty());
  for (const rpc::TaskInfo& t : c_.Tasks(id)) {
    if (t.attempt == 2) {
      EXPECT_EQ(t.state, rpc::TaskState::RUNNING);
    }
  }
  EXPECT_EQ(c_.Job(id).state, rpc::JobState::RUNNING);
}

TEST_F(LostAgentTest, AKilledRankIsNamedEvenWhenItsPeerFailedInTheSameReport) {
  c_.Register("a", 2);
  int64_t id = c_.Submit(Job(2, 0));
  std::vector<rpc::TaskKey> keys = ServiceDriver::Keys(c_.Poll("a"));
  c_.Report("a", keys, rpc::TaskState::RUNNING);
  // Rank 1 is SIGKILLed; rank 0 exits 1 because its peer vanished; the agent
  // reaps both in one tick and reports them together, rank 0 first.
  std::vector<rpc::TaskReport> reports(2);
  reports[0].key = keys[0];
  reports[0].state = rpc::TaskState::EXITED;
  reports[0].__set_exit_code(1);
  reports[1].key = keys[1];
  reports[1].state = rpc::TaskState::KILLED;
  reports[1].__set_signal(9);
  rpc::RequestHeader header;
  header.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
  c_.service().ReportTasks(header, "a", reports);
  rpc::JobInfo job = c_.Job(id);
  ASSERT_EQ(job.state, rpc::JobState::FAILED);
  EXPECT_EQ(job.reason.rfind("trainer/1 on agent \"a\" was killed by signal 9 (SIGKILL)", 0), 0u)
      << job.reason;
}

TEST_F(LostAgentTest, AShardThePlanNeverNeededIsListedAsNotLaunched) {
  c_.Register("a", 2);
  int64_t id = c_.Submit("[job]\nname = \"h\"\nworkers = 1\n[trainer]\nmodel = \"lm\"\n");
  std::vector<rpc::TaskKey> keys = ServiceDriver::Keys(c_.Poll("a"));
  c_.Report("a", keys, rpc::TaskState::RUNNING);
  c_.PutPlanWithEmptyPs(id, 1);
  c_.Poll("a", keys);
  int shards = 0;
  for (const rpc::TaskInfo& t : c_.Tasks(id)) {
    const bool shard = t.role == rpc::TaskRole::PS;
    shards += shard;
    EXPECT_EQ(t.__isset.not_launched && t.not_launched, shard) << t.index;
  }
  EXPECT_EQ(shards, 1);
}

}  // namespace
}  // namespace parallax::coordinator
