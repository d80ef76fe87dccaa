// ROW_STATE (schemas/ps_wire.md, "Row state"): a PULL and a WRITE of rows'
// whole state — weights, optimizer slots, step — as the trainer's hot rows
// take rows over from their shards and hand them back. A state written is
// the state a row trains on and a checkpoint keeps; a state no row can hold
// is refused with nothing changed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "core/base/durable_file.h"
#include "core/checkpoint/rank_files.h"
#include "core/optim/optimizer.h"
#include "core/ps/row_state.h"
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

constexpr uint32_t kDim = 3;

PsPlan OneTablePlan(OptimizerType type) {
  return testing::OnePartitionPlan(Consistency::kAsync, type, /*rows=*/50, kDim, /*workers=*/1, /*seed=*/5);
}

uint32_t Width(const PsPlan& plan) { return RowStateWidth(plan.variables[0]); }

std::vector<OutMessage> SendState(ShardCore* core, Op op, const std::vector<int64_t>& ids,
                                  const std::vector<float>& values, uint32_t dim,
                                  uint16_t flags = ps_wire::kFlagRowState, int64_t clock = 0) {
  Header h = MakeHeader(op, 0, 0, 0, static_cast<uint32_t>(ids.size()), dim, clock);
  h.flags = flags;
  return Send(core, Request(h, ids, values));
}

std::vector<float> PullState(ShardCore* core, const PsPlan& plan, const std::vector<int64_t>& ids) {
  auto out = SendState(core, Op::kPull, ids, {}, Width(plan));
  EXPECT_EQ(out.size(), 1u);
  if (out.size() != 1) return {};
  const Header h = ReplyHeader(out[0]);
  EXPECT_EQ(h.op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
  EXPECT_TRUE(h.flags & ps_wire::kFlagRowState);
  EXPECT_EQ(h.dim, Width(plan));
  return ReplyValues(out[0]);
}

std::vector<float> PullRows(ShardCore* core, const std::vector<int64_t>& ids) {
  auto out = Send(core, Request(MakeHeader(Op::kPull, 0, 0, 0, static_cast<uint32_t>(ids.size()), kDim, 0),
                                ids, {}));
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
  return ReplyValues(out[0]);
}

void PushRow(ShardCore* core, int64_t id, const std::vector<float>& g, int64_t clock) {
  auto out = Send(core, Request(MakeHeader(Op::kPush, 0, 0, 0, 1, kDim, clock), {id}, g));
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
}

class RowStateTest : public ::testing::TestWithParam<OptimizerType> {};

// Row 1 trains two steps; its pulled state, written to row 7, makes row 7
// train exactly as row 1 from then on: the slots and Adam's step came with
// the weights. A checkpoint (SAVE, then LOAD into a new shard) keeps it.
TEST_P(RowStateTest, AWrittenStateTrainsAsTheRowItWasPulledFrom) {
  const PsPlan plan = OneTablePlan(GetParam());
  const int slots = optim::StateSlots(GetParam());
  ASSERT_EQ(Width(plan), (1 + slots) * kDim + 2);
  auto core = testing::MakeShard(plan);
  PushRow(core.get(), 1, {0.5f, -1.0f, 2.0f}, 0);
  PushRow(core.get(), 1, {0.25f, 0.5f, -0.75f}, 1);
  const std::vector<float> state = PullState(core.get(), plan, {1});
  ASSERT_EQ(state.size(), Width(plan));
  const std::vector<float> weights = PullRows(core.get(), {1});
  EXPECT_EQ(std::vector<float>(state.begin(), state.begin() + kDim), weights);
  EXPECT_EQ(RowStateStep(state.data(), kDim, slots), GetParam() == OptimizerType::kAdam ? 2 : 0);

  auto ack = SendState(core.get(), Op::kWrite, {7}, state, Width(plan));
  ASSERT_EQ(ReplyHeader(ack[0]).op, static_cast<uint8_t>(Op::kWrite)) << ack[0].frames[1];
  EXPECT_EQ(PullState(core.get(), plan, {7}), state);
  PushRow(core.get(), 1, {1.0f, 1.0f, -1.0f}, 2);
  PushRow(core.get(), 7, {1.0f, 1.0f, -1.0f}, 3);
  const std::vector<float> both = PullRows(core.get(), {1, 7});
  EXPECT_EQ(std::vector<float>(both.begin(), both.begin() + kDim),
            std::vector<float>(both.begin() + kDim, both.end()));
  EXPECT_NE(std::vector<float>(both.begin(), both.begin() + kDim), weights) << "the push applied";

  parallax::testing::TempDir dir;
  testing::Frames save = Request(MakeHeader(Op::kSave, 0, 0, 0, 0, 0, 0), {}, {});
  save.f[1] = dir.path();
  auto saved = Send(core.get(), save);
  ASSERT_EQ(ReplyHeader(saved[0]).op, static_cast<uint8_t>(Op::kSave)) << saved[0].frames[1];
  auto fresh = testing::MakeShard(plan);
  testing::Frames load = save;
  Header lh = MakeHeader(Op::kLoad, 0, 0, 0, 0, 0, 0);
  ps_wire::WriteHeader(lh, load.f[0].data());
  auto loaded = Send(fresh.get(), load);
  ASSERT_EQ(ReplyHeader(loaded[0]).op, static_cast<uint8_t>(Op::kLoad)) << loaded[0].frames[1];
  EXPECT_EQ(PullState(fresh.get(), plan, {1, 7}), PullState(core.get(), plan, {1, 7}));
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizer, RowStateTest,
                         ::testing::Values(OptimizerType::kSgd, OptimizerType::kMomentum,
                                           OptimizerType::kAdagrad, OptimizerType::kAdam),
                         [](const auto& info) { return std::string(OptimizerTypeName(info.param)); });

// Each bad ROW_STATE message gets its named error, and the row it names
// keeps its state.
TEST(RowStateRefusalTest, AStateNoRowCanHoldIsRefusedAndChangesNothing) {
  const PsPlan plan = OneTablePlan(OptimizerType::kAdam);
  const uint32_t width = Width(plan);
  auto core = testing::MakeShard(plan);
  PushRow(core.get(), 4, {1.0f, 2.0f, 3.0f}, 0);
  const std::vector<float> before = PullState(core.get(), plan, {4});
  ASSERT_EQ(before.size(), width);

  std::vector<float> half_step = before;
  half_step[width - 2] = 0.5f;
  ExpectOneErrorReply(SendState(core.get(), Op::kWrite, {4}, half_step, width), ErrorCode::kBadRowState);
  std::vector<float> huge_step = before;
  huge_step[width - 1] = 16777216.0f;  // 2^24: not a 24-bit half
  ExpectOneErrorReply(SendState(core.get(), Op::kWrite, {4}, huge_step, width), ErrorCode::kBadRowState);
  std::vector<float> negative_moment = before;
  negative_moment[2 * kDim + 1] = -0.5f;  // Adam's second moment, column 1
  auto out = SendState(core.get(), Op::kWrite, {4}, negative_moment, width);
  ExpectOneErrorReply(out, ErrorCode::kBadRowState);
  EXPECT_NE(out[0].frames[1].find("id 4"), std::string::npos) << out[0].frames[1];
  std::vector<float> nan = before;
  nan[kDim] = std::numeric_limits<float>::quiet_NaN();
  ExpectOneErrorReply(SendState(core.get(), Op::kWrite, {4}, nan, width), ErrorCode::kNonFinite);
  // The plain dim under ROW_STATE, and ROW_STATE where it has no meaning.
  ExpectOneErrorReply(SendState(core.get(), Op::kWrite, {4}, std::vector<float>(kDim, 1.0f), kDim),
                      ErrorCode::kBadDim);
  ExpectOneErrorReply(SendState(core.get(), Op::kPush, {4}, before, width), ErrorCode::kBadFlags);
  ExpectOneErrorReply(SendState(core.get(), Op::kWrite, {4}, before, width,
                                ps_wire::kFlagRowState | ps_wire::kFlagFp16),
                      ErrorCode::kBadFlags);
  EXPECT_EQ(PullState(core.get(), plan, {4}), before);
}

// A dynamic table's rows are admitted and evicted by the shard: it hands no
// row state over.
TEST(RowStateRefusalTest, ADynamicTableRefusesRowState) {
  PsPlan plan = OneTablePlan(OptimizerType::kAdagrad);
  plan.variables[0].rows = 0;
  plan.variables[0].dynamic = DynamicTableSettings{};
  auto core = testing::MakeShard(plan);
  ExpectOneErrorReply(SendState(core.get(), Op::kPull, {4}, {}, Width(plan)), ErrorCode::kBadFlags);
}

// A plan that moved a variable from the workers to the PS since the
// checkpoint (a re-plan): the checkpoint has no partition files of it, and
// each shard's LOAD takes its rows and optimizer state from dense.pxck, the
// workers' copy, with the checkpoint's steps counted as applied, so a sync
// pull of the resumed step is answered, not held. A shard started again
// alone (a later generation) loads the same way by itself. A dense.pxck
// that does not fit the variable, or none, is refused naming the file, and
// the shard keeps what it held.
TEST(LoadFromWorkersTest, AVariableTheCheckpointHeldOnWorkersComesFromDensePxck) {
  PsPlan before = OneTablePlan(OptimizerType::kAdagrad);
  before.consistency = Consistency::kSync;
  auto old_shard = testing::MakeShard(before);
  PushRow(old_shard.get(), 3, {0.5f, -1.0f, 2.0f}, 0);
  PushRow(old_shard.get(), 3, {0.25f, 0.5f, -0.75f}, 1);
  parallax::testing::TempDir dir;
  auto save_to = [&](const std::string& path) {
    testing::Frames save = Request(MakeHeader(Op::kSave, 0, 0, 0, 0, 0, 2), {}, {});
    save.f[1] = path;
    auto saved = Send(old_shard.get(), save);
    ASSERT_EQ(ReplyHeader(saved[0]).op, static_cast<uint8_t>(Op::kSave)) << saved[0].frames[1];
  };
  // "w": 5 values held on workers (2 rows of dim 3, the last one short),
  // with their Adagrad accumulators.
  checkpoint::DenseEntry held;
  held.id = 1;
  held.name = "w";
  held.values = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  held.optimizer.s1 = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  held.optimizer.steps = {2};
  auto write_checkpoint = [&](const std::string& name, const std::vector<checkpoint::DenseEntry>& dense) {
    const std::string path = dir.File(name);
    std::filesystem::create_directories(path);
    save_to(path);
    if (!dense.empty()) {
      EXPECT_TRUE(WriteFileDurably(path + "/" + checkpoint::kDenseFile, checkpoint::EncodeDenseFile(dense)).ok());
    }
    return path;
  };
  const std::string good = write_checkpoint("good", {held});

  PsPlan after = before;
  VariableSpec w = after.variables[0];
  w.id = 1;
  w.name = "w";
  w.rows = 2;
  w.init.seed = 9;
  after.variables.push_back(w);
  auto shard = testing::MakeShard(after);
  auto load = [&](const std::string& path, int64_t step, const std::string& frame2 = "") {
    testing::Frames f = Request(MakeHeader(Op::kLoad, 0, 0, 0, 0, 0, step), {}, {});
    f.f[1] = path;
    f.f[2] = frame2;
    return Send(shard.get(), f);
  };
  auto pull_w_state = [&] {
    Header h = MakeHeader(Op::kPull, 1, 0, 0, 2, Width(after), 0);
    h.flags = ps_wire::kFlagRowState;
    auto out = Send(shard.get(), Request(h, {0, 1}, {}));
    EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
    return ReplyValues(out[0]);
  };
  ExpectOneErrorReply(load(good, 2, std::string(4, '\0')), ErrorCode::kBadCount);

  auto loaded = load(good, 2);
  ASSERT_EQ(ReplyHeader(loaded[0]).op, static_cast<uint8_t>(Op::kLoad)) << loaded[0].frames[1];
  EXPECT_EQ(PullState(shard.get(), after, {3}), PullState(old_shard.get(), before, {3}));
  std::vector<float> expected(2 * Width(after));
  const std::vector<float> w1 = {4.0f, 5.0f, 0.0f}, a1 = {0.4f, 0.5f, 0.0f};
  PackRowState(held.values.data(), held.optimizer.s1.data(), nullptr, 0, kDim, 1, expected.data());
  PackRowState(w1.data(), a1.data(), nullptr, 0, kDim, 1, expected.data() + Width(after));
  const std::vector<float> state = pull_w_state();
  EXPECT_EQ(state, expected);
  // A sync pull of step 2 of "w": answered at once (steps 0 and 1 count as
  // applied), with the workers' row.
  auto pulled = Send(shard.get(), Request(MakeHeader(Op::kPull, 1, 0, 0, 1, kDim, 2), {0}, {}));
  ASSERT_EQ(pulled.size(), 1u) << "held: the partition's steps applied were not the checkpoint's";
  ASSERT_EQ(ReplyHeader(pulled[0]).op, static_cast<uint8_t>(Op::kPull)) << pulled[0].frames[1];
  EXPECT_EQ(ReplyValues(pulled[0]), (std::vector<float>{1.0f, 2.0f, 3.0f}));

  // Refused, and nothing changes: an entry of another size, a value that is
  // not finite, no dense.pxck at all.
  checkpoint::DenseEntry longer = held;
  longer.values.resize(7, 1.0f);
  longer.optimizer.s1.resize(7, 1.0f);
  auto wrong = load(write_checkpoint("wrong", {longer}), 2);
  ExpectOneErrorReply(wrong, ErrorCode::kCheckpoint);
  EXPECT_NE(wrong[0].frames[1].find("dense.pxck: \"w\" holds 7 values"), std::string::npos) << wrong[0].frames[1];
  EXPECT_NE(wrong[0].frames[1].find("nothing was loaded"), std::string::npos) << wrong[0].frames[1];
  checkpoint::DenseEntry nan = held;
  nan.values[4] = std::nanf("");
  ExpectOneErrorReply(load(write_checkpoint("nan", {nan}), 2), ErrorCode::kCheckpoint);
  auto missing = load(write_checkpoint("none", {}), 2);
  ExpectOneErrorReply(missing, ErrorCode::kCheckpoint);
  EXPECT_NE(missing[0].frames[1].find("var1-part0.pxps"), std::string::npos) << missing[0].frames[1];
  EXPECT_EQ(pull_w_state(), state);
}

}  // namespace
}  // namespace parallax::ps
