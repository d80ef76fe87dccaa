// SET (schemas/ps_wire.md, "Settings"): runtime settings of a shard's
// variables, here the learning rate, in effect from a step on; and WRITE,
// the rows' initial values a worker gives before the first step.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/ps/initializer.h"
#include "ps/shard_core.h"
#include "tests/ps/ps_test_util.h"

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

// Two SGD variables (lr 0.1), one partition each on shard 0.
std::unique_ptr<ShardCore> TwoVariableShard(Consistency mode, uint32_t workers) {
  PsPlan plan;
  plan.consistency = mode;
  plan.num_workers = workers;
  plan.variables = {testing::SmallSgdVariable(0, "a"), testing::SmallSgdVariable(1, "b")};
  return testing::MakeShard(plan);
}

void ExpectAck(const std::vector<OutMessage>& out) {
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kSet)) << out[0].frames[1];
}

// Row 0 of `var` after every push so far, pulled as of step `clock`.
float Row0(ShardCore* core, uint32_t var, int64_t clock) {
  auto out = Send(core, Request(MakeHeader(Op::kPull, var, 0, 0, 1, kDim2, clock), {0}, {}));
  EXPECT_EQ(out.size(), 1u);
  if (out.size() != 1) return 0;
  return ReplyValues(out[0])[0];
}

// A gradient of 1 on row 0 of `var` for step `clock` from `worker`.
std::vector<OutMessage> PushOne(ShardCore* core, uint32_t var, uint32_t worker, int64_t clock) {
  return Send(core,
              Request(MakeHeader(Op::kPush, var, 0, worker, 1, kDim2, clock), {0}, {1.0f, 1.0f}));
}

class ShardSettingsTest : public ::testing::Test {};

TEST_F(ShardSettingsTest, SyncLearningRateAppliesFromItsStep) {
  auto core = TwoVariableShard(Consistency::kSync, 1);
  // Sent before step 0 applied, in effect from step 1: step 0 keeps 0.1.
  ExpectAck(SendSet(core.get(), 0, 1, "lr=0.5"));
  PushOne(core.get(), 0, 0, 0);
  EXPECT_NEAR(Row0(core.get(), 0, 1), -0.1f, 1e-6);
  PushOne(core.get(), 0, 0, 1);
  EXPECT_NEAR(Row0(core.get(), 0, 2), -0.6f, 1e-6);
  PushOne(core.get(), 0, 0, 2);
  EXPECT_NEAR(Row0(core.get(), 0, 3), -1.1f, 1e-6);
  // The other variable kept the plan's rate.
  PushOne(core.get(), 1, 0, 0);
  EXPECT_NEAR(Row0(core.get(), 1, 1), -0.1f, 1e-6);
}

TEST_F(ShardSettingsTest, SyncStepBufferedBeforeTheSetUsesTheRateOfItsStep) {
  auto core = TwoVariableShard(Consistency::kSync, 2);
  // Worker 0's contributions to steps 0 and 1 wait for worker 1's.
  PushOne(core.get(), 0, 0, 0);
  PushOne(core.get(), 0, 0, 1);
  ExpectAck(SendSet(core.get(), 0, 1, "lr=0.3"));
  PushOne(core.get(), 0, 1, 0);
  PushOne(core.get(), 0, 1, 1);
  // Mean of two gradients of 1: step 0 at 0.1, step 1 at 0.3.
  EXPECT_NEAR(Row0(core.get(), 0, 2), -0.4f, 1e-6);
}

TEST_F(ShardSettingsTest, AsyncLearningRateAppliesToLaterPushesOfEveryVariable) {
  auto core = TwoVariableShard(Consistency::kAsync, 1);
  PushOne(core.get(), 0, 0, 0);
  ExpectAck(SendSet(core.get(), ps_wire::kAllVariables, 1, "lr=0.25"));
  PushOne(core.get(), 0, 0, 1);
  PushOne(core.get(), 1, 0, 1);
  EXPECT_NEAR(Row0(core.get(), 0, 2), -0.35f, 1e-6);
  EXPECT_NEAR(Row0(core.get(), 1, 2), -0.25f, 1e-6);
}

TEST_F(ShardSettingsTest, BadSettingsAreRefusedAndChangeNothing) {
  auto core = TwoVariableShard(Consistency::kAsync, 1);
  for (const char* text : {"lr", "lr=", "=0.1", "lr=abc", "lr=-1", "lr=0", "lr=inf", "lr=nan",
                           "lr=0.1x", "momentum=0.5"}) {
    SCOPED_TRACE(text);
    ExpectOneErrorReply(SendSet(core.get(), 0, 0, text), ErrorCode::kBadSetting);
  }
  ExpectOneErrorReply(SendSet(core.get(), 7, 0, "lr=0.5"), ErrorCode::kUnknownVariable);
  PushOne(core.get(), 0, 0, 0);
  EXPECT_NEAR(Row0(core.get(), 0, 1), -0.1f, 1e-6);
}

TEST_F(ShardSettingsTest, ManyChangesKeepOnlyWhatAStepCanStillUse) {
  auto core = TwoVariableShard(Consistency::kSync, 1);
  for (int64_t step = 0; step < 200; ++step) {
    ExpectAck(SendSet(core.get(), 0, step, step % 2 ? "lr=0.2" : "lr=0.1"));
    PushOne(core.get(), 0, 0, step);
  }
  // 100 steps at 0.1 and 100 at 0.2.
  EXPECT_NEAR(Row0(core.get(), 0, 200), -30.0f, 1e-3);
  EXPECT_LE(core->settings_kept(0), 2u);
}

TEST_F(ShardSettingsTest, WriteSetsRowsThatPullsAndPushesThenStartFrom) {
  auto core = TwoVariableShard(Consistency::kSync, 1);
  auto ack = Send(core.get(), Request(MakeHeader(Op::kWrite, 0, 0, 0, 2, kDim2, 0), {0, 7},
                                      {1.5f, -2.0f, 3.0f, 4.0f}));
  ASSERT_EQ(ack.size(), 1u);
  EXPECT_EQ(ReplyHeader(ack[0]).op, static_cast<uint8_t>(Op::kWrite)) << ack[0].frames[1];
  EXPECT_EQ(ReplyHeader(ack[0]).count, 0u);
  auto out = Send(core.get(), Request(MakeHeader(Op::kPull, 0, 0, 0, 3, kDim2, 0), {7, 0, 1}, {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(ReplyValues(out[0]), (std::vector<float>{3.0f, 4.0f, 1.5f, -2.0f, 0.0f, 0.0f}));
  // The written value is where SGD starts: 1.5 - 0.1 * 1.
  PushOne(core.get(), 0, 0, 0);
  EXPECT_FLOAT_EQ(Row0(core.get(), 0, 1), 1.4f);
  EXPECT_FLOAT_EQ(Row0(core.get(), 1, 0), 0.0f);  // the other variable untouched
}

TEST_F(ShardSettingsTest, WriteOfNonFiniteValuesIsRefusedAndChangesNothing) {
  auto core = TwoVariableShard(Consistency::kAsync, 1);
  ExpectOneErrorReply(Send(core.get(), Request(MakeHeader(Op::kWrite, 0, 0, 0, 2, kDim2, 0),
                                               {0, 1}, {1.0f, 1.0f, NAN, 1.0f})),
                      ErrorCode::kNonFinite);
  EXPECT_EQ(Row0(core.get(), 0, 0), 0.0f);
  // Values that disagree with count × dim are refused by the wire checks.
  ExpectOneErrorReply(
      Send(core.get(), Request(MakeHeader(Op::kWrite, 0, 0, 0, 1, kDim2, 0), {0}, {1.0f})),
      ErrorCode::kBadCount);
  EXPECT_EQ(Row0(core.get(), 0, 0), 0.0f);
}

}  // namespace
}  // namespace parallax::ps
