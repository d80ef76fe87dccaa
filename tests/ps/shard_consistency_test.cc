// Consistency switched at run time (SET "consistency", schemas/ps_wire.md
// "Settings") and sync warm-up: the shard treats every step in the mode the
// schedule gives it, whatever order switches and messages arrive in.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "core/ps/consistency_schedule.h"
#include "ps/shard_core.h"
#include "tests/ps/ps_test_util.h"
#include "tests/testing/temp_dir.h"

namespace parallax::ps {
namespace {

using testing::ExpectOneErrorReply;
using testing::MakeHeader;
using testing::ReplyHeader;
using testing::ReplyValues;
using testing::Request;
using testing::Send;
using testing::SendSet;

constexpr uint32_t kDim2 = 2;

// One SGD variable (lr 0.1, zeros), one partition on shard 0.
PsPlan Plan(Consistency mode, uint32_t workers, int64_t warmup = 0) {
  PsPlan plan;
  plan.consistency = mode;
  plan.num_workers = workers;
  plan.sync_warmup_steps = warmup;
  plan.variables = {testing::SmallSgdVariable(0, "a")};
  return plan;
}

std::unique_ptr<ShardCore> Shard(const PsPlan& plan) { return testing::MakeShard(plan); }

void ExpectAck(const std::vector<OutMessage>& out, Op op) {
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(op)) << out[0].frames[1];
}

// A gradient of 1 on row 0 for step `clock` from `worker`: the replies.
std::vector<OutMessage> PushOne(ShardCore* core, uint32_t worker, int64_t clock) {
  return Send(core, Request(MakeHeader(Op::kPush, 0, 0, worker, 1, kDim2, clock), {0}, {1, 1}),
              "w" + std::to_string(worker));
}
// A pull of row 0 at `clock` by `worker`: the replies sent now (none while held).
std::vector<OutMessage> PullRow0(ShardCore* core, uint32_t worker, int64_t clock) {
  return Send(core, Request(MakeHeader(Op::kPull, 0, 0, worker, 1, kDim2, clock), {0}, {}),
              "w" + std::to_string(worker));
}
std::vector<OutMessage> Clock(ShardCore* core, uint32_t worker, int64_t clock) {
  return Send(core, Request(MakeHeader(Op::kClock, 0, 0, worker, 0, 0, clock), {}, {}),
              "w" + std::to_string(worker));
}
// Row 0's first value in the pull reply among `out`.
float PulledValue(const std::vector<OutMessage>& out) {
  for (const OutMessage& m : out) {
    if (ReplyHeader(m).op == static_cast<uint8_t>(Op::kPull)) return ReplyValues(m)[0];
  }
  ADD_FAILURE() << "no pull reply among " << out.size() << " messages";
  return 0;
}
bool HasPullReply(const std::vector<OutMessage>& out) {
  for (const OutMessage& m : out) {
    if (ReplyHeader(m).op == static_cast<uint8_t>(Op::kPull)) return true;
  }
  return false;
}

TEST(ConsistencyScheduleTest, ParsesFormatsAndFindsPeriods) {
  EXPECT_EQ(FormatConsistencyMode(*ParseConsistencyMode("ssp:4")), "ssp:4");
  EXPECT_EQ(FormatConsistencyMode(*ParseConsistencyMode("async")), "async");
  for (const char* bad : {"", "fast", "async:1", "ssp:", "ssp:-1", "ssp:x", "ssp:2000000", "sync:0"}) {
    EXPECT_FALSE(ParseConsistencyMode(bad).ok()) << bad;
  }
  ConsistencySchedule s(Plan(Consistency::kAsync, 1, /*warmup=*/5));
  EXPECT_EQ(s.At(4).consistency, Consistency::kSync);
  EXPECT_EQ(s.At(5).consistency, Consistency::kAsync);
  s.Set(9, {Consistency::kAsync, 0});  // the same mode: no new period
  s.Set(12, {Consistency::kSsp, 3});
  EXPECT_EQ(s.PeriodStart(3), 0);
  EXPECT_EQ(s.PeriodStart(10), 5);
  EXPECT_EQ(s.PeriodStart(12), 12);
  EXPECT_EQ(s.At(100).staleness, 3);
}

// The switch test at the shard: sync for steps 0-1, async for 2-3, sync from
// 4 on; two workers.
TEST(ShardConsistencyTest, SyncToAsyncToSyncSwitchesAtTheSteps) {
  auto core = Shard(Plan(Consistency::kSync, 2));
  ExpectAck(SendSet(core.get(), ps_wire::kAllVariables, 2, "consistency=async"), Op::kSet);
  ExpectAck(SendSet(core.get(), ps_wire::kAllVariables, 4, "consistency=sync"), Op::kSet);
  // Step 0 (sync): worker 0's rows for step 1 wait for worker 1's push.
  ExpectAck(PushOne(core.get(), 0, 0), Op::kPush);
  EXPECT_TRUE(PullRow0(core.get(), 0, 1).empty());
  std::vector<OutMessage> out = PushOne(core.get(), 1, 0);
  EXPECT_NEAR(PulledValue(out), -0.1f, 1e-6);  // the mean of the two, applied once
  PushOne(core.get(), 0, 1);
  PushOne(core.get(), 1, 1);
  // Step 2 (async): the first pull waits for the last sync step (applied),
  // then a push applies on arrival, alone.
  EXPECT_NEAR(PulledValue(PullRow0(core.get(), 0, 2)), -0.2f, 1e-6);
  ExpectAck(PushOne(core.get(), 0, 2), Op::kPush);
  EXPECT_NEAR(PulledValue(PullRow0(core.get(), 0, 3)), -0.3f, 1e-6);
  ExpectAck(PushOne(core.get(), 0, 3), Op::kPush);
  ExpectAck(PushOne(core.get(), 1, 2), Op::kPush);
  EXPECT_NEAR(PulledValue(PullRow0(core.get(), 1, 3)), -0.5f, 1e-6);
  // Step 4 (sync after async): its rows wait until every worker finished
  // step 3 (worker 1 is still in it; its push of step 3 says it finished).
  ExpectAck(Clock(core.get(), 0, 3), Op::kClock);
  EXPECT_TRUE(PullRow0(core.get(), 0, 4).empty());
  EXPECT_NEAR(PulledValue(PushOne(core.get(), 1, 3)), -0.6f, 1e-6);
  // Step 4 is sync again: buffered until both pushed, then applied once.
  ExpectAck(PushOne(core.get(), 0, 4), Op::kPush);
  EXPECT_TRUE(PullRow0(core.get(), 0, 5).empty());
  EXPECT_NEAR(PulledValue(PushOne(core.get(), 1, 4)), -0.7f, 1e-6);
  EXPECT_EQ(core->applied_steps(0, 0), 5);

  nlohmann::json stats = nlohmann::json::parse(core->StatsJson());
  const nlohmann::json& periods = stats["consistency_periods"];
  ASSERT_EQ(periods.size(), 3u) << stats.dump();
  EXPECT_EQ(periods[0]["from_step"], 0);
  EXPECT_EQ(periods[0]["mode"], "sync");
  EXPECT_EQ(periods[0]["sync_pushes"], 4);
  EXPECT_EQ(periods[0]["async_pushes"], 0);
  EXPECT_EQ(periods[1]["from_step"], 2);
  EXPECT_EQ(periods[1]["mode"], "async");
  EXPECT_EQ(periods[1]["sync_pushes"], 0);
  EXPECT_EQ(periods[1]["async_pushes"], 4);
  EXPECT_EQ(periods[2]["from_step"], 4);
  EXPECT_EQ(periods[2]["sync_pushes"], 2);
}

// A checkpoint at the first sync step after async ones is the state once
// every worker finished the step before: written as soon as both clocked.
TEST(ShardConsistencyTest, SyncSaveAtTheSwitchStepWaitsForEveryWorkersClock) {
  auto core = Shard(Plan(Consistency::kAsync, 2));
  ExpectAck(SendSet(core.get(), ps_wire::kAllVariables, 2, "consistency=sync"), Op::kSet);
  ExpectAck(PushOne(core.get(), 0, 0), Op::kPush);
  ExpectAck(PushOne(core.get(), 0, 1), Op::kPush);
  ExpectAck(PushOne(core.get(), 1, 0), Op::kPush);  // worker 1 touches nothing here in step 1
  ::parallax::testing::TempDir dir;
  testing::Frames save = Request(MakeHeader(Op::kSave, 0, 0, 0, 0, 0, 2), {}, {});
  save.f[1] = dir.path();
  // Worker 0 finished step 1; worker 1's clock says when it did.
  ExpectAck(Clock(core.get(), 0, 1), Op::kClock);
  EXPECT_TRUE(Send(core.get(), save).empty()) << "written before every worker finished step 1";
  std::vector<OutMessage> out = Clock(core.get(), 1, 1);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(ReplyHeader(out[1]).op, static_cast<uint8_t>(Op::kSave)) << out[1].frames[1];
  EXPECT_EQ(core->applied_steps(0, 0), 2);
}

TEST(ShardConsistencyTest, SspAfterAsyncBoundsStalenessFromItsStep) {
  auto core = Shard(Plan(Consistency::kAsync, 2));
  ExpectAck(SendSet(core.get(), ps_wire::kAllVariables, 3, "consistency=ssp:1"), Op::kSet);
  // Async: worker 0 runs ahead of worker 1 (still at step 0) freely.
  for (int64_t s = 0; s < 2; ++s) {
    ExpectAck(PushOne(core.get(), 0, s), Op::kPush);
    EXPECT_TRUE(HasPullReply(PullRow0(core.get(), 0, s + 1)));
  }
  ExpectAck(PushOne(core.get(), 0, 2), Op::kPush);
  // Step 3 under ssp 1 needs every worker to have finished step 1.
  EXPECT_TRUE(PullRow0(core.get(), 0, 3).empty());
  EXPECT_TRUE(HasPullReply(Clock(core.get(), 1, 1)));
}

TEST(ShardConsistencyTest, SyncWarmupThenTheConfiguredMode) {
  auto core = Shard(Plan(Consistency::kAsync, 2, /*warmup=*/1));
  ExpectAck(PushOne(core.get(), 0, 0), Op::kPush);
  EXPECT_TRUE(PullRow0(core.get(), 0, 1).empty());  // step 0 is sync
  EXPECT_NEAR(PulledValue(PushOne(core.get(), 1, 0)), -0.1f, 1e-6);
  ExpectAck(PushOne(core.get(), 0, 1), Op::kPush);  // step 1 is async
  EXPECT_NEAR(PulledValue(PullRow0(core.get(), 0, 2)), -0.2f, 1e-6);
}

TEST(ShardConsistencyTest, ALateOrBadSwitchIsRefusedAndChangesNothing) {
  auto core = Shard(Plan(Consistency::kSync, 1));
  for (const char* text : {"consistency=fast", "consistency=async:2", "consistency=ssp:-1",
                           "consistency="}) {
    SCOPED_TRACE(text);
    ExpectOneErrorReply(SendSet(core.get(), ps_wire::kAllVariables, 5, text),
                        ErrorCode::kBadSetting);
  }
  // The whole job's, not one variable's.
  ExpectOneErrorReply(SendSet(core.get(), 0, 5, "consistency=async"), ErrorCode::kBadSetting);
  ExpectAck(PushOne(core.get(), 0, 0), Op::kPush);
  ExpectAck(PushOne(core.get(), 0, 1), Op::kPush);
  // Step 1 was served in sync: a switch from it comes too late.
  ExpectOneErrorReply(SendSet(core.get(), ps_wire::kAllVariables, 1, "consistency=async"),
                      ErrorCode::kBadSetting);
  EXPECT_EQ(core->consistency().At(1).consistency, Consistency::kSync);
  // Another worker's copy of an accepted switch is acked again.
  ExpectAck(SendSet(core.get(), ps_wire::kAllVariables, 3, "consistency=async"), Op::kSet);
  ExpectAck(PushOne(core.get(), 0, 3), Op::kPush);
  ExpectAck(SendSet(core.get(), ps_wire::kAllVariables, 3, "consistency=async"), Op::kSet);
  EXPECT_EQ(core->applied_steps(0, 0), 2);
}

}  // namespace
}  // namespace parallax::ps
