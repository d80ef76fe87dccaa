// ShardCore driven directly with wire messages: optimizers, consistency
// modes, bad input, checkpoints.
#include "ps/shard_core.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "core/ps/initializer.h"
#include "core/ps/partition_file.h"
#include "tests/ps/ps_test_util.h"
#include "tests/testing/temp_dir.h"

namespace parallax::ps {
namespace {

using testing::MakeHeader;
using testing::ReplyHeader;
using testing::ReplyValues;
using testing::Request;
using testing::Send;

constexpr uint32_t kDim = 4;
constexpr int64_t kRows = 100;

PsPlan OnePartitionPlan(Consistency mode, OptimizerType opt, uint32_t workers = 1) {
  return testing::OnePartitionPlan(mode, opt, kRows, kDim, workers);
}

std::unique_ptr<ShardCore> MakeCore(const PsPlan& plan, uint32_t shard = 0) {
  ShardOptions o;
  o.plan = plan;
  o.shard = shard;
  o.limits.max_message_bytes = 1 << 16;
  auto c = ShardCore::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

std::vector<OutMessage> Push(ShardCore* core, uint32_t worker, int64_t clock,
                             const std::vector<int64_t>& ids, const std::vector<float>& g,
                             uint32_t partition = 0, Op op = Op::kPush) {
  return Send(core, Request(MakeHeader(op, 0, partition, worker, static_cast<uint32_t>(ids.size()),
                                       kDim, clock),
                            ids, g));
}

std::vector<float> PullNow(ShardCore* core, const std::vector<int64_t>& ids, int64_t clock = 0,
                           uint32_t partition = 0) {
  auto out = Send(core, Request(MakeHeader(Op::kPull, 0, partition, 0,
                                           static_cast<uint32_t>(ids.size()), kDim, clock),
                                ids, {}));
  EXPECT_EQ(out.size(), 1u);
  if (out.size() != 1) return {};
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
  return ReplyValues(out[0]);
}

std::vector<float> InitRow(const PsPlan& plan, int64_t id) {
  std::vector<float> w(kDim);
  InitializeRow(plan.variables[0].init, 0, id, kDim, w.data());
  return w;
}

// A WRITE and a LOAD set rows other than by training: the variable's
// resets, in every later data reply, count them (schemas/ps_wire.md, "Row
// cache"); training does not.
TEST(ShardResetsTest, DataRepliesCountWritesAndLoadsAsResets) {
  PsPlan plan = OnePartitionPlan(Consistency::kAsync, OptimizerType::kSgd);
  auto core = MakeCore(plan);
  auto out = Push(core.get(), 0, 0, {1}, std::vector<float>(kDim, 1.0f));
  EXPECT_EQ(ReplyHeader(out[0]).resets, 0);
  out = Send(core.get(), Request(MakeHeader(Op::kWrite, 0, 0, 0, 1, kDim, 0), {4},
                                 std::vector<float>(kDim, 2.0f)));
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kWrite)) << out[0].frames[1];
  EXPECT_EQ(ReplyHeader(out[0]).resets, 1);
  out = Send(core.get(), Request(MakeHeader(Op::kPull, 0, 0, 0, 1, kDim, 1), {4}, {}));
  EXPECT_EQ(ReplyHeader(out[0]).resets, 1);
  parallax::testing::TempDir dir;
  for (Op op : {Op::kSave, Op::kLoad}) {
    testing::Frames f = Request(MakeHeader(op, 0, 0, 0, 0, 0, 0), {}, {});
    f.f[1] = dir.path();
    out = Send(core.get(), f);
    ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(op)) << out[0].frames[1];
  }
  out = Push(core.get(), 0, 2, {1}, std::vector<float>(kDim, 1.0f));
  EXPECT_EQ(ReplyHeader(out[0]).resets, 2);
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush));
}

// ---- Optimizers against references computed here ----

class ShardOptimizerTest : public ::testing::TestWithParam<OptimizerType> {};

TEST_P(ShardOptimizerTest, MatchesReference) {
  const OptimizerType type = GetParam();
  PsPlan plan = OnePartitionPlan(Consistency::kAsync, type);
  auto core = MakeCore(plan);
  const auto& o = plan.variables[0].optimizer;
  // Row 1 gets three gradients, row 5 only the first two (lazy state).
  std::map<int64_t, std::vector<float>> w, s1, s2;
  std::map<int64_t, int> t;
  for (int64_t id : {1, 5}) {
    w[id] = InitRow(plan, id);
    s1[id].assign(kDim, type == OptimizerType::kAdagrad ? 0.1f : 0.0f);
    s2[id].assign(kDim, 0.0f);
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> ids = step < 2 ? std::vector<int64_t>{1, 5} : std::vector<int64_t>{1};
    std::vector<float> g(ids.size() * kDim);
    for (float& x : g) x = dist(rng);
    auto out = Push(core.get(), 0, step, ids, g);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
    for (size_t r = 0; r < ids.size(); ++r) {
      const int64_t id = ids[r];
      ++t[id];
      for (uint32_t j = 0; j < kDim; ++j) {
        const double gj = g[r * kDim + j];
        double wj = w[id][j], m = s1[id][j], v = s2[id][j];
        switch (type) {
          case OptimizerType::kSgd: wj -= o.lr * gj; break;
          case OptimizerType::kMomentum: m = o.momentum * m + gj; wj -= o.lr * m; break;
          case OptimizerType::kAdagrad: m += gj * gj; wj -= o.lr * gj / (std::sqrt(m) + o.epsilon); break;
          case OptimizerType::kAdam: {
            m = o.beta1 * m + (1 - o.beta1) * gj;
            v = o.beta2 * v + (1 - o.beta2) * gj * gj;
            const double mh = m / (1 - std::pow(double{o.beta1}, t[id]));
            const double vh = v / (1 - std::pow(double{o.beta2}, t[id]));
            wj -= o.lr * mh / (std::sqrt(vh) + o.epsilon);
            break;
          }
        }
        w[id][j] = static_cast<float>(wj);
        s1[id][j] = static_cast<float>(m);
        s2[id][j] = static_cast<float>(v);
      }
    }
  }
  std::vector<float> got = PullNow(core.get(), {1, 5});
  ASSERT_EQ(got.size(), 2 * kDim);
  for (uint32_t j = 0; j < kDim; ++j) {
    EXPECT_NEAR(got[j], w[1][j], 1e-5) << j;
    EXPECT_NEAR(got[kDim + j], w[5][j], 1e-5) << j;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, ShardOptimizerTest,
                         ::testing::Values(OptimizerType::kSgd, OptimizerType::kMomentum,
                                           OptimizerType::kAdagrad, OptimizerType::kAdam));

// ---- Consistency ----

class ShardCoreTest : public ::testing::Test {};

TEST_F(ShardCoreTest, RowsAreCreatedOnFirstTouchWithTheInitializer) {
  PsPlan plan = OnePartitionPlan(Consistency::kAsync, OptimizerType::kSgd);
  auto core = MakeCore(plan);
  EXPECT_EQ(core->table(0)->size(), 0u);
  std::vector<float> got = PullNow(core.get(), {42});
  EXPECT_EQ(got, InitRow(plan, 42));
  EXPECT_EQ(core->table(0)->size(), 1u);
}

TEST_F(ShardCoreTest, SyncCombinesInRankOrderAndEqualsSerialReference) {
  PsPlan plan = OnePartitionPlan(Consistency::kSync, OptimizerType::kAdagrad, 3);
  auto core = MakeCore(plan);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> id_dist(0, 9);
  std::uniform_real_distribution<float> g_dist(-1, 1);
  std::map<int64_t, std::vector<float>> ref_w, ref_a;
  auto ref_row = [&](int64_t id) -> std::vector<float>& {
    if (!ref_w.count(id)) {
      ref_w[id] = InitRow(plan, id);
      ref_a[id].assign(kDim, 0.1f);
    }
    return ref_w[id];
  };
  for (int64_t step = 0; step < 6; ++step) {
    std::vector<std::vector<int64_t>> ids(3);
    std::vector<std::vector<float>> grads(3);
    for (int w = 0; w < 3; ++w) {
      std::set<int64_t> s;
      for (int k = 0; k < 4; ++k) s.insert(id_dist(rng));
      ids[w].assign(s.begin(), s.end());
      for (size_t k = 0; k < ids[w].size() * kDim; ++k) grads[w].push_back(g_dist(rng));
    }
    // Arrival order 2, 0, 1; nothing applies until the last one.
    for (int w : {2, 0}) {
      auto out = Push(core.get(), w, step, ids[w], grads[w]);
      ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
      EXPECT_EQ(core->applied_steps(0, 0), step);
    }
    // A pull for step+1 is held until the step applied.
    auto held = Send(core.get(), Request(MakeHeader(Op::kPull, 0, 0, 0, 1, kDim, step + 1, 77), {0}, {}), "early");
    EXPECT_TRUE(held.empty());
    auto out = Push(core.get(), 1, step, ids[1], grads[1]);
    EXPECT_EQ(core->applied_steps(0, 0), step + 1);
    ASSERT_EQ(out.size(), 2u);  // the ack and the released pull
    EXPECT_EQ(out[1].identity, "early");
    EXPECT_EQ(ReplyHeader(out[1]).request_id, 77u);
    // Reference: sum in rank order, divide by 3, Adagrad once.
    std::map<int64_t, std::vector<float>> sum;
    for (int w = 0; w < 3; ++w) {
      for (size_t r = 0; r < ids[w].size(); ++r) {
        auto& acc = sum[ids[w][r]];
        acc.resize(kDim, 0.0f);
        for (uint32_t j = 0; j < kDim; ++j) acc[j] += grads[w][r * kDim + j];
      }
    }
    for (auto& [id, g] : sum) {
      auto& w = ref_row(id);
      auto& a = ref_a[id];
      for (uint32_t j = 0; j < kDim; ++j) {
        const float gj = g[j] / 3.0f;
        a[j] += gj * gj;
        w[j] -= 0.1f * gj / (std::sqrt(a[j]) + 1e-8f);
      }
    }
  }
  for (int64_t id = 0; id < 10; ++id) {
    EXPECT_EQ(PullNow(core.get(), {id}, 6), ref_row(id)) << "row " << id;  // exact
  }
}

TEST_F(ShardCoreTest, SyncLocalAggregationExpectsOneContributionPerHost) {
  PsPlan plan = OnePartitionPlan(Consistency::kSync, OptimizerType::kSgd, /*workers=*/4);
  plan.num_contributors = 2;  // two hosts of two workers
  plan.variables[0].init.type = Initializer::Type::kZeros;
  auto core = MakeCore(plan);
  Push(core.get(), 0, 0, {1}, std::vector<float>(kDim, 4.0f));
  EXPECT_EQ(core->applied_steps(0, 0), 0);
  Push(core.get(), 1, 0, {1}, std::vector<float>(kDim, 8.0f));
  EXPECT_EQ(core->applied_steps(0, 0), 1);
  // Mean over 4 workers, not 2 messages: w = -0.1 · 12 / 4.
  EXPECT_FLOAT_EQ(PullNow(core.get(), {1}, 1)[0], -0.1f * 3.0f);
  auto bad = Push(core.get(), 2, 1, {1}, std::vector<float>(kDim, 1.0f));
  EXPECT_EQ(ReplyHeader(bad[0]).error_code, static_cast<uint16_t>(ErrorCode::kBadWorker));
}

TEST_F(ShardCoreTest, SyncPushPullAnswersAfterTheStepApplied) {
  PsPlan plan = OnePartitionPlan(Consistency::kSync, OptimizerType::kSgd, 2);
  plan.variables[0].init.type = Initializer::Type::kZeros;
  plan.sync_mean = false;
  auto core = MakeCore(plan);
  auto first = Push(core.get(), 0, 0, {3}, std::vector<float>(kDim, 1.0f), 0, Op::kPushPull);
  EXPECT_TRUE(first.empty());
  auto second = Push(core.get(), 1, 0, {3}, std::vector<float>(kDim, 2.0f), 0, Op::kPushPull);
  ASSERT_EQ(second.size(), 2u);
  for (const auto& m : second) {
    EXPECT_EQ(ReplyHeader(m).op, static_cast<uint8_t>(Op::kPushPull));
    EXPECT_FLOAT_EQ(ReplyValues(m)[0], -0.3f);  // sum: -0.1 · (1 + 2)
  }
}

// Async PUSH_PULL writes the rows into the reply while it updates them; a
// message that names a row twice must still read it after both updates, and
// the reply must equal a separate pull.
TEST_F(ShardCoreTest, AsyncPushPullAnswersRowsAfterTheWholePush) {
  PsPlan plan = OnePartitionPlan(Consistency::kAsync, OptimizerType::kSgd);
  plan.variables[0].init.type = Initializer::Type::kZeros;
  auto core = MakeCore(plan);
  std::vector<float> g = {1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4};
  auto distinct = Push(core.get(), 0, 0, {3, 7, 9}, g, 0, Op::kPushPull);
  ASSERT_EQ(distinct.size(), 1u);
  ASSERT_EQ(ReplyHeader(distinct[0]).op, static_cast<uint8_t>(Op::kPushPull)) << distinct[0].frames[1];
  EXPECT_EQ(ReplyHeader(distinct[0]).version_seen, 1);
  EXPECT_EQ(ReplyValues(distinct[0]), PullNow(core.get(), {3, 7, 9}));
  EXPECT_FLOAT_EQ(ReplyValues(distinct[0])[4], -0.2f);

  auto repeated = Push(core.get(), 0, 1, {5, 3, 5}, g, 0, Op::kPushPull);
  ASSERT_EQ(repeated.size(), 1u);
  ASSERT_EQ(ReplyHeader(repeated[0]).op, static_cast<uint8_t>(Op::kPushPull)) << repeated[0].frames[1];
  const std::vector<float> rows = ReplyValues(repeated[0]);
  ASSERT_EQ(rows.size(), 3 * kDim);
  for (uint32_t j = 0; j < kDim; ++j) {
    EXPECT_FLOAT_EQ(rows[j], -0.5f);              // row 5: -0.1 · (1 + 4), both updates
    EXPECT_FLOAT_EQ(rows[kDim + j], -0.3f);       // row 3: -0.1 · 1 before, -0.1 · 2 now
    EXPECT_FLOAT_EQ(rows[2 * kDim + j], -0.5f);
  }
  EXPECT_EQ(rows, [&] {
    auto v = PullNow(core.get(), {5, 3, 5});
    return v;
  }());
}

TEST_F(ShardCoreTest, SspHoldsPullsOfWorkersTooFarAhead) {
  PsPlan plan = OnePartitionPlan(Consistency::kSsp, OptimizerType::kSgd, 2);
  plan.staleness = 1;
  auto core = MakeCore(plan);
  std::vector<float> g(kDim, 1.0f);
  // Worker 0 runs steps 0 and 1; worker 1 has done nothing.
  Push(core.get(), 0, 0, {1}, g);
  Push(core.get(), 0, 1, {1}, g);
  // Pull at clock 1 needs the slowest at >= 0: fine. At clock 2 it needs >= 1.
  EXPECT_EQ(PullNow(core.get(), {1}, 1).size(), kDim);
  auto held = Send(core.get(), Request(MakeHeader(Op::kPull, 0, 0, 0, 1, kDim, 2, 9), {1}, {}));
  EXPECT_TRUE(held.empty());
  // Worker 1 finishes step 0 (CLOCK): the pull is released.
  auto out = Send(core.get(), Request(MakeHeader(Op::kClock, 0, 0, 1, 0, 0, 0), {}, {}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(ReplyHeader(out[1]).request_id, 9u);
}

TEST_F(ShardCoreTest, AsyncAppliesEveryPushOnArrivalAndMeasuresStaleness) {
  PsPlan plan = OnePartitionPlan(Consistency::kAsync, OptimizerType::kSgd, 2);
  plan.variables[0].init.type = Initializer::Type::kZeros;
  plan.variables[0].optimizer.lr = 1.0f;
  plan.staleness_lr = true;
  auto core = MakeCore(plan);
  std::vector<float> g(kDim, 1.0f);
  for (int i = 0; i < 4; ++i) {
    Header h = MakeHeader(Op::kPush, 0, 0, 0, 1, kDim, i);
    h.version_seen = i;  // pulled right before: fresh
    Send(core.get(), Request(h, {2}, g));
  }
  EXPECT_EQ(PullNow(core.get(), {2})[0], -4.0f);
  // A push computed from version 0 arrives after 4 updates: τ = 4, lr/4.
  Push(core.get(), 1, 0, {2}, g);
  EXPECT_EQ(PullNow(core.get(), {2})[0], -4.25f);
  EXPECT_EQ(core->stats().staleness[0], 4);
  EXPECT_EQ(core->stats().staleness[3], 1);  // τ 4 falls in [4, 8)
}

// The updates file (ps/updates_file.h) follows every update the shard
// applies, before it is answered, and keeps what was written when its
// process is SIGKILLed.
TEST_F(ShardCoreTest, TheUpdatesFileCountsEveryAppliedUpdateAndSurvivesSigkill) {
  parallax::testing::TempDir dir;
  const std::string path = dir.File("updates-applied");
  auto core = MakeCore(OnePartitionPlan(Consistency::kAsync, OptimizerType::kSgd, 2));
  auto file = UpdatesFile::Create(path, 0);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  core->AttachUpdatesFile(std::move(file).value());
  std::vector<float> g(kDim, 1.0f);
  for (int i = 0; i < 5; ++i) Push(core.get(), i % 2, 0, {2}, g);
  EXPECT_EQ(core->UpdatesApplied(), 5);
  EXPECT_EQ(UpdatesFile::Read(path).value(), 5);

  // A process that sets a count and dies by SIGKILL: the count is there.
  const std::string child_path = dir.File("child-updates");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto f = UpdatesFile::Create(child_path, 0);
    if (!f.ok()) _exit(1);
    (*f)->Set(41);
    (*f)->Set(42);
    raise(SIGKILL);
    _exit(2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(UpdatesFile::Read(child_path).value(), 42);
  EXPECT_EQ(UpdatesFile::Read(dir.File("none")).status().code(), StatusCode::kNotFound);
  std::ofstream(dir.File("garbage")) << "not a count";
  EXPECT_EQ(UpdatesFile::Read(dir.File("garbage")).status().code(), StatusCode::kInvalidArgument);
}

// ---- Bad input: each gets an error reply and changes nothing ----

class ShardBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = OnePartitionPlan(Consistency::kSync, OptimizerType::kSgd, 2);
    plan_.num_shards = 2;
    plan_.variables[0].partitions = 2;
    plan_.variables[0].scheme = PartitionScheme::kRange;  // ids 0..49 → p0 (shard 0), 50..99 → p1
    plan_.variables[0].partition_shards = {0, 1};
    core_ = MakeCore(plan_);
    // Some state to protect.
    Push(core_.get(), 0, 0, {1, 2}, std::vector<float>(2 * kDim, 1.0f));
    Push(core_.get(), 1, 0, {1}, std::vector<float>(kDim, 1.0f));
    before_ = PullNow(core_.get(), {1, 2}, 1);
  }

  void ExpectError(const testing::Frames& fr, ErrorCode code) {
    testing::ExpectOneErrorReply(Send(core_.get(), fr), code);
    EXPECT_EQ(PullNow(core_.get(), {1, 2}, 1), before_);
    EXPECT_EQ(core_->applied_steps(0, 0), 1);
  }

  testing::Frames GoodPush(std::vector<int64_t> ids = {3}, uint32_t worker = 0, int64_t clock = 1) {
    return Request(MakeHeader(Op::kPush, 0, 0, worker, static_cast<uint32_t>(ids.size()), kDim, clock),
                   ids, std::vector<float>(ids.size() * kDim, 1.0f));
  }

  PsPlan plan_;
  std::unique_ptr<ShardCore> core_;
  std::vector<float> before_;
};

TEST_F(ShardBadInputTest, EveryMalformedFieldIsRejected) {
  auto f = GoodPush();
  f.f[0][0] = 'X';
  ExpectError(f, ErrorCode::kBadMagic);
  f = GoodPush();
  f.f[0][4] = 9;
  ExpectError(f, ErrorCode::kBadVersion);
  f = GoodPush();
  f.f[0][6] = 99;
  ExpectError(f, ErrorCode::kUnknownOp);
  Header h = MakeHeader(Op::kPush, 7, 0, 0, 1, kDim, 1);
  ExpectError(Request(h, {3}, std::vector<float>(kDim, 1.0f)), ErrorCode::kUnknownVariable);
  h = MakeHeader(Op::kPush, 0, 2, 0, 1, kDim, 1);
  ExpectError(Request(h, {3}, std::vector<float>(kDim, 1.0f)), ErrorCode::kBadPartition);
  h = MakeHeader(Op::kPush, 0, 1, 0, 1, kDim, 1);  // owned by shard 1
  ExpectError(Request(h, {60}, std::vector<float>(kDim, 1.0f)), ErrorCode::kBadPartition);
  h = MakeHeader(Op::kPush, 0, 0, 0, 2, kDim, 1);  // count 2, one id
  ExpectError(Request(h, {3}, std::vector<float>(2 * kDim, 1.0f)), ErrorCode::kBadCount);
  h = MakeHeader(Op::kPush, 0, 0, 0, 1, kDim, 1);  // values for two rows
  ExpectError(Request(h, {3}, std::vector<float>(2 * kDim, 1.0f)), ErrorCode::kBadCount);
  h = MakeHeader(Op::kPush, 0, 0, 0, 1, kDim + 1, 1);
  ExpectError(Request(h, {3}, std::vector<float>(kDim + 1, 1.0f)), ErrorCode::kBadDim);
  ExpectError(GoodPush({100}), ErrorCode::kIdOutOfRange);
  ExpectError(GoodPush({-5}), ErrorCode::kIdOutOfRange);
  ExpectError(GoodPush({55}), ErrorCode::kIdOutOfRange);  // in the variable, not in partition 0
  ExpectError(GoodPush({3}, /*worker=*/2), ErrorCode::kBadWorker);
  ExpectError(GoodPush({3}, 0, /*clock=*/0), ErrorCode::kBadClock);       // already applied
  ExpectError(GoodPush({3}, 0, /*clock=*/1000), ErrorCode::kBadClock);    // too far ahead
  f = GoodPush();
  f.f.push_back("extra");
  ExpectError(f, ErrorCode::kBadFrames);
  f = GoodPush();
  f.f[0].resize(63);
  ExpectError(f, ErrorCode::kBadFrames);
  f = GoodPush();
  f.f[0][8] = 0x40;  // unknown flag
  ExpectError(f, ErrorCode::kBadFlags);
  h = MakeHeader(Op::kPush, 0, 0, 0, 3000, kDim, 1);  // 72 KB > 64 KiB limit
  std::vector<int64_t> many(3000, 3);
  ExpectError(Request(h, many, std::vector<float>(3000 * kDim, 1.0f)), ErrorCode::kTooLarge);
}

TEST_F(ShardBadInputTest, NonFiniteGradientsAreRejected) {
  std::vector<float> g(2 * kDim, 1.0f);
  g[kDim + 2] = std::numeric_limits<float>::quiet_NaN();
  ExpectError(Request(MakeHeader(Op::kPush, 0, 0, 0, 2, kDim, 1), {1, 2}, g), ErrorCode::kNonFinite);
  g[kDim + 2] = std::numeric_limits<float>::infinity();
  ExpectError(Request(MakeHeader(Op::kPush, 0, 0, 0, 2, kDim, 1), {1, 2}, g), ErrorCode::kNonFinite);
  // The shard keeps serving: a good push of worker 0 is accepted afterwards.
  auto out = Send(core_.get(), GoodPush());
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
}

TEST_F(ShardBadInputTest, DuplicateContributionIsRejected) {
  auto out = Send(core_.get(), GoodPush());
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush));
  ExpectError(GoodPush(), ErrorCode::kBadClock);
}

TEST_F(ShardBadInputTest, StaleAttemptIsRefused) {
  ShardOptions o;
  o.plan = plan_;
  o.attempt = 3;
  auto core = std::move(ShardCore::Create(o)).value();
  Header h = MakeHeader(Op::kPull, 0, 0, 0, 1, kDim, 0);
  h.attempt = 2;
  auto out = Send(core.get(), Request(h, {1}, {}));
  EXPECT_EQ(ReplyHeader(out[0]).error_code, static_cast<uint16_t>(ErrorCode::kStaleAttempt));
}

TEST_F(ShardBadInputTest, StaleGenerationIsRefusedBothWays) {
  ShardOptions o;
  o.plan = plan_;
  o.attempt = 3;
  o.generation = 2;
  auto core = std::move(ShardCore::Create(o)).value();
  // A rank that still addresses the shard's previous process...
  Header h = MakeHeader(Op::kPull, 0, 0, 0, 1, kDim, 0);
  h.attempt = 3;
  h.generation = 1;
  auto out = Send(core.get(), Request(h, {1}, {}));
  EXPECT_EQ(ReplyHeader(out[0]).error_code, static_cast<uint16_t>(ErrorCode::kStaleGeneration));
  EXPECT_NE(out[0].frames[1].find("generation 1 of PS shard 0"), std::string::npos)
      << out[0].frames[1];
  EXPECT_EQ(ReplyHeader(out[0]).generation, 1u);  // echoed, so the rank knows what was refused
  // ...and a stale process asked for a newer generation both refuse.
  h.generation = 3;
  out = Send(core.get(), Request(h, {1}, {}));
  EXPECT_EQ(ReplyHeader(out[0]).error_code, static_cast<uint16_t>(ErrorCode::kStaleGeneration));
  // The right generation, and 0 (no check), are served.
  for (uint32_t g : {2u, 0u}) {
    h.generation = g;
    out = Send(core.get(), Request(h, {1}, {}));
    EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
  }
}

TEST_F(ShardCoreTest, NonFiniteRowsAreCountedWhenConfigured) {
  PsPlan plan = OnePartitionPlan(Consistency::kAsync, OptimizerType::kSgd);
  plan.reject_nonfinite = false;
  plan.variables[0].init.type = Initializer::Type::kZeros;
  auto core = MakeCore(plan);
  std::vector<float> g(2 * kDim, 1.0f);
  g[1] = std::numeric_limits<float>::quiet_NaN();
  auto out = Push(core.get(), 0, 0, {1, 2}, g);
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush));
  EXPECT_EQ(core->stats().nonfinite_rows, 1);
  EXPECT_EQ(PullNow(core.get(), {1, 2}),
            (std::vector<float>{0, 0, 0, 0, -0.1f, -0.1f, -0.1f, -0.1f}));
}

// With nonfinite = "count", a PUSH_PULL that drops rows still answers every
// row it asked for (the dropped ones as they were), in async and sync mode.
TEST_F(ShardCoreTest, PushPullWithCountedNonFiniteRowsAnswersEveryRow) {
  for (Consistency mode : {Consistency::kAsync, Consistency::kSync}) {
    PsPlan plan = OnePartitionPlan(mode, OptimizerType::kSgd);
    plan.reject_nonfinite = false;
    plan.sync_mean = false;
    plan.variables[0].init.type = Initializer::Type::kZeros;
    auto core = MakeCore(plan);
    std::vector<float> g(3 * kDim, 1.0f);
    g[kDim + 2] = std::numeric_limits<float>::infinity();  // row of id 2
    auto out = Push(core.get(), 0, 0, {1, 2, 3}, g, 0, Op::kPushPull);
    ASSERT_EQ(out.size(), 1u) << static_cast<int>(mode);
    const Header h = ReplyHeader(out[0]);
    ASSERT_EQ(h.op, static_cast<uint8_t>(Op::kPushPull)) << out[0].frames[1];
    EXPECT_EQ(h.count, 3u);
    const std::vector<float> expect = {-0.1f, -0.1f, -0.1f, -0.1f, 0, 0, 0, 0, -0.1f, -0.1f, -0.1f, -0.1f};
    EXPECT_EQ(testing::ReplyValues(out[0]), expect) << static_cast<int>(mode);
    EXPECT_EQ(PullNow(core.get(), {1, 2, 3}, 1), expect);
    EXPECT_EQ(core->stats().nonfinite_rows, 1);
  }
}

// ---- Checkpoints ----

class ShardCheckpointTest : public ::testing::Test {
 protected:
  std::vector<OutMessage> Control(ShardCore* core, Op op, const std::string& text, int64_t clock = 0) {
    testing::Frames f = Request(MakeHeader(op, 0, 0, 0, 0, 0, clock), {}, {});
    f.f[1] = text;
    return Send(core, f);
  }
  parallax::testing::TempDir dir_;
};

TEST_F(ShardCheckpointTest, RoundTripRestoresRowsAndOptimizerState) {
  PsPlan plan = OnePartitionPlan(Consistency::kAsync, OptimizerType::kAdam);
  plan.variables[0].partitions = 3;
  plan.variables[0].partition_shards = {0, 0, 0};
  auto core = MakeCore(plan);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int step = 0; step < 5; ++step) {
    for (uint32_t p = 0; p < 3; ++p) {
      std::vector<int64_t> ids;
      for (int64_t id = 0; id < 30; ++id)
        if (PartitionOf(plan.variables[0], id) == p && (id + step) % 3 != 0) ids.push_back(id);
      std::vector<float> g(ids.size() * kDim);
      for (float& x : g) x = d(rng);
      Push(core.get(), 0, step, ids, g, p);
    }
  }
  auto saved = Control(core.get(), Op::kSave, dir_.path());
  ASSERT_EQ(ReplyHeader(saved[0]).op, static_cast<uint8_t>(Op::kSave)) << saved[0].frames[1];
  // The streaming reader export uses (core/ps/partition_file.h) sees the
  // same rows, a few at a time.
  size_t streamed = 0;
  for (uint32_t p = 0; p < 3; ++p) {
    auto reader = PartitionFileReader::Open(dir_.path() + "/" + PartitionFileName(0, p));
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->header().partition, p);
    std::vector<int64_t> ids;
    std::vector<float> w;
    while (true) {
      ASSERT_TRUE((*reader)->Next(4, &ids, &w).ok());
      if (ids.empty()) break;
      EXPECT_LE(ids.size(), 4u);
      for (size_t r = 0; r < ids.size(); ++r) {
        EXPECT_EQ(PartitionOf(plan.variables[0], ids[r]), p);
        const int64_t i = core->table(0)->Find(ids[r]);
        ASSERT_GE(i, 0);
        for (uint32_t k = 0; k < kDim; ++k) EXPECT_EQ(w[r * kDim + k], core->table(0)->weights(i)[k]);
        ++streamed;
      }
    }
  }
  EXPECT_EQ(streamed, core->table(0)->size());
  {
    const std::string copy = dir_.path() + "/corrupt.bin";
    std::filesystem::copy_file(dir_.path() + "/" + PartitionFileName(0, 1), copy);
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(70);
    f.put('\x55');
    f.close();
    auto bad = PartitionFileReader::Open(copy);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("checksum"), std::string::npos) << bad.status().message();
    std::filesystem::remove(copy);
  }
  auto fresh = MakeCore(plan);
  auto loaded = Control(fresh.get(), Op::kLoad, dir_.path());
  ASSERT_EQ(ReplyHeader(loaded[0]).op, static_cast<uint8_t>(Op::kLoad)) << loaded[0].frames[1];
  const VariableTable* a = core->table(0);
  const VariableTable* b = fresh->table(0);
  ASSERT_EQ(a->size(), b->size());
  for (uint32_t i = 0; i < a->size(); ++i) {
    const int64_t j = b->Find(a->id_at(i));
    ASSERT_GE(j, 0);
    for (uint32_t k = 0; k < kDim; ++k) {
      EXPECT_EQ(a->weights(i)[k], b->weights(j)[k]);
      EXPECT_EQ(a->slot(0, i)[k], b->slot(0, j)[k]);
      EXPECT_EQ(a->slot(1, i)[k], b->slot(1, j)[k]);
    }
    EXPECT_EQ(a->step_value(i), b->step_value(j));
  }
  // Both continue identically.
  std::vector<float> g(kDim, 0.5f);
  Push(core.get(), 0, 9, {4}, g, PartitionOf(plan.variables[0], 4));
  Push(fresh.get(), 0, 9, {4}, g, PartitionOf(plan.variables[0], 4));
  EXPECT_EQ(PullNow(core.get(), {4}, 0, PartitionOf(plan.variables[0], 4)),
            PullNow(fresh.get(), {4}, 0, PartitionOf(plan.variables[0], 4)));
  // No temp files are left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir_.path()))
    EXPECT_EQ(e.path().extension(), ".pxps") << e.path();
}

TEST_F(ShardCheckpointTest, LoadRefusesCorruptOrMismatchedFiles) {
  PsPlan plan = OnePartitionPlan(Consistency::kAsync, OptimizerType::kMomentum);
  auto core = MakeCore(plan);
  Push(core.get(), 0, 0, {1, 2}, std::vector<float>(2 * kDim, 1.0f));
  ASSERT_EQ(ReplyHeader(Control(core.get(), Op::kSave, dir_.path())[0]).op, static_cast<uint8_t>(Op::kSave));
  const std::string file = dir_.File("var0-part0.pxps");

  // Another shape: dim differs.
  PsPlan wider = plan;
  wider.variables[0].dim = kDim * 2;
  auto other = MakeCore(wider);
  auto out = Control(other.get(), Op::kLoad, dir_.path());
  EXPECT_EQ(ReplyHeader(out[0]).error_code, static_cast<uint16_t>(ErrorCode::kCheckpoint));
  EXPECT_NE(out[0].frames[1].find("does not match the plan: dim 4"), std::string::npos) << out[0].frames[1];

  // Another optimizer.
  PsPlan adam = plan;
  adam.variables[0].optimizer.type = OptimizerType::kAdam;
  out = Control(MakeCore(adam).get(), Op::kLoad, dir_.path());
  EXPECT_NE(out[0].frames[1].find("another optimizer"), std::string::npos) << out[0].frames[1];

  // A flipped byte fails the checksum, and the target keeps its rows.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(70);
    f.put('\x7f');
  }
  auto target = MakeCore(plan);
  Push(target.get(), 0, 0, {9}, std::vector<float>(kDim, 1.0f));
  auto before = PullNow(target.get(), {9});
  out = Control(target.get(), Op::kLoad, dir_.path());
  EXPECT_EQ(ReplyHeader(out[0]).error_code, static_cast<uint16_t>(ErrorCode::kCheckpoint));
  EXPECT_NE(out[0].frames[1].find("checksum"), std::string::npos) << out[0].frames[1];
  EXPECT_EQ(PullNow(target.get(), {9}), before);
  // A missing file.
  out = Control(target.get(), Op::kLoad, dir_.File("nowhere"));
  EXPECT_EQ(ReplyHeader(out[0]).error_code, static_cast<uint16_t>(ErrorCode::kCheckpoint));
}

TEST_F(ShardCheckpointTest, SyncSaveWaitsForItsStepAndHoldsLaterSteps) {
  PsPlan plan = OnePartitionPlan(Consistency::kSync, OptimizerType::kSgd, 2);
  plan.variables[0].init.type = Initializer::Type::kZeros;
  plan.sync_mean = false;
  auto core = MakeCore(plan);
  std::vector<float> g(kDim, 1.0f);
  Push(core.get(), 0, 0, {1}, g);
  // SAVE at step 1 (after step 0): waits for worker 1's step 0.
  EXPECT_TRUE(Control(core.get(), Op::kSave, dir_.path(), 1).empty());
  // Worker 0 already pushes step 1; it must not be in the checkpoint.
  Push(core.get(), 0, 1, {1}, g);
  auto out = Push(core.get(), 1, 0, {1}, g);
  ASSERT_EQ(out.size(), 2u);  // ack + the save's reply
  EXPECT_EQ(ReplyHeader(out[1]).op, static_cast<uint8_t>(Op::kSave)) << out[1].frames[1];
  Push(core.get(), 1, 1, {1}, g);
  EXPECT_EQ(core->applied_steps(0, 0), 2);
  auto restored = MakeCore(plan);
  Control(restored.get(), Op::kLoad, dir_.path());
  EXPECT_EQ(restored->applied_steps(0, 0), 1);
  EXPECT_FLOAT_EQ(PullNow(restored.get(), {1}, 1)[0], -0.2f);
}

}  // namespace
}  // namespace parallax::ps
