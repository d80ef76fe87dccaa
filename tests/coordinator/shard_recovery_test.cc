// When a lost PS shard is started again alone (coordinator/orchestration/shard_recovery.h),
// and the fencing of reports about an older generation.
#include "coordinator/orchestration/shard_recovery.h"

#include <gtest/gtest.h>

#include "coordinator/orchestration/task_outcome.h"

namespace parallax::coordinator {
namespace {

JobConfig Config(Consistency consistency, int max_restarts = 2) {
  JobConfig c;
  c.job.consistency = consistency;
  c.job.max_restarts = max_restarts;
  c.trainer.checkpoint_every = 10;
  c.trainer.checkpoint_dir = "/ckpt";
  return c;
}

TaskRecord Shard(TaskState state, int generation = 1) {
  TaskRecord t;
  t.job_id = 7;
  t.attempt = 1;
  t.role = TaskRole::kPs;
  t.index = 0;
  t.agent_name = "a";
  t.state = state;
  if (state == TaskState::kKilled) t.signal = 9;
  if (state == TaskState::kExited) t.exit_code = 1;
  t.generation = generation;
  return t;
}

ShardRecoveryContext Available() {
  ShardRecoveryContext c;
  c.agent_available = true;
  return c;
}

TEST(ShardRecoveryTest, AKilledOrExitedShardOfAnAsyncOrSspJobRestartsAsItsNextGeneration) {
  for (Consistency mode : {Consistency::kAsync, Consistency::kSsp}) {
    for (TaskState state : {TaskState::kKilled, TaskState::kExited}) {
      ShardRecoveryDecision d = DecideShardRecovery(Config(mode), Shard(state), Available());
      EXPECT_TRUE(d.restart) << d.why_not;
      EXPECT_EQ(d.generation, 2);
    }
  }
  ShardRecoveryDecision d =
      DecideShardRecovery(Config(Consistency::kAsync), Shard(TaskState::kKilled, 2), Available());
  EXPECT_TRUE(d.restart) << d.why_not;
  EXPECT_EQ(d.generation, 3);
}

TEST(ShardRecoveryTest, SyncJobsKeepTheWholeJobRestart) {
  ShardRecoveryDecision d =
      DecideShardRecovery(Config(Consistency::kSync), Shard(TaskState::kKilled), Available());
  EXPECT_FALSE(d.restart);
  EXPECT_NE(d.why_not.find("sync"), std::string::npos) << d.why_not;
}

TEST(ShardRecoveryTest, NoRestartAloneWhereTheNextGenerationCouldNotServe) {
  const TaskRecord killed = Shard(TaskState::kKilled);
  JobConfig shm = Config(Consistency::kAsync);
  shm.ps.shared_memory = true;
  EXPECT_FALSE(DecideShardRecovery(shm, killed, Available()).restart);
  JobConfig no_checkpoints = Config(Consistency::kAsync);
  no_checkpoints.trainer.checkpoint_every = 0;
  EXPECT_FALSE(DecideShardRecovery(no_checkpoints, killed, Available()).restart);
  // Its agent is gone, draining or lost: the lost-agent path.
  EXPECT_FALSE(DecideShardRecovery(Config(Consistency::kAsync), killed, {}).restart);
  EXPECT_FALSE(
      DecideShardRecovery(Config(Consistency::kAsync), Shard(TaskState::kLost), Available())
          .restart);
  // A trainer failed too: the attempt restarts anyway.
  ShardRecoveryContext trainer_failed = Available();
  trainer_failed.trainer_failed = true;
  EXPECT_FALSE(DecideShardRecovery(Config(Consistency::kAsync), killed, trainer_failed).restart);
}

TEST(ShardRecoveryTest, RestartsAloneAreBoundedByMaxRestartsPerAttempt) {
  // max_restarts = 2: generations 2 and 3, not 4.
  const JobConfig c = Config(Consistency::kAsync, 2);
  EXPECT_TRUE(DecideShardRecovery(c, Shard(TaskState::kKilled, 2), Available()).restart);
  ShardRecoveryDecision d = DecideShardRecovery(c, Shard(TaskState::kKilled, 3), Available());
  EXPECT_FALSE(d.restart);
  EXPECT_NE(d.why_not.find("max_restarts = 2"), std::string::npos) << d.why_not;
  // max_restarts = 0 (the default): never, as before.
  EXPECT_FALSE(DecideShardRecovery(Config(Consistency::kAsync, 0), Shard(TaskState::kKilled),
                                   Available())
                   .restart);
}

TEST(ShardRecoveryTest, TrainersLiveShardsAndShardsNeverLaunchedAreNoCandidates) {
  TaskRecord trainer = Shard(TaskState::kKilled);
  trainer.role = TaskRole::kTrainer;
  ShardRecoveryDecision d = DecideShardRecovery(Config(Consistency::kAsync), trainer, Available());
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.why_not, "");
  EXPECT_FALSE(
      DecideShardRecovery(Config(Consistency::kAsync), Shard(TaskState::kRunning), Available())
          .restart);
  TaskRecord skipped = Shard(TaskState::kExited);
  skipped.exit_code = 0;
  skipped.message = kShardNotLaunched;
  EXPECT_FALSE(DecideShardRecovery(Config(Consistency::kAsync), skipped, Available()).restart);
}

TEST(ShardRecoveryTest, ReportsOfAnOlderGenerationAreStale) {
  rpc::TaskKey first;
  first.job_id = 7;
  first.attempt = 1;
  first.role = rpc::TaskRole::PS;
  first.index = 0;
  rpc::TaskKey second = first;
  second.__set_generation(2);
  EXPECT_EQ(ReportedGeneration(first), 1);
  EXPECT_EQ(ReportedGeneration(second), 2);
  EXPECT_TRUE(IsStaleGeneration(Shard(TaskState::kAssigned, 2), first));
  EXPECT_FALSE(IsStaleGeneration(Shard(TaskState::kAssigned, 2), second));
  EXPECT_FALSE(IsStaleGeneration(Shard(TaskState::kRunning, 1), first));
}

TEST(ShardRecoveryTest, TheEventSaysWhichShardWhyAndWhere) {
  EXPECT_EQ(ShardRestartEvent(Shard(TaskState::kKilled), 2),
            "attempt 1: shard 0 lost (ps/0 on agent \"a\" was killed by signal 9 (SIGKILL)), "
            "generation 2 started on agent \"a\"");
}

}  // namespace
}  // namespace parallax::coordinator
