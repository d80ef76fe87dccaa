// A shard serving a dynamic table (core/ps/dynamic_table.h): any int64 is an
// id, rows are admitted after `admit_after` contributions (in rank order
// under sync, whatever order the pushes arrive in), counted in STATS, and a
// step that needs more rows than the budget is refused with TABLE_FULL.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
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

constexpr uint32_t kDim = 3;
constexpr float kLr = 0.5f;

PsPlan DynamicPlan(Consistency mode, uint32_t workers, DynamicTableSettings settings) {
  PsPlan plan;
  plan.consistency = mode;
  plan.num_workers = workers;
  plan.sync_mean = false;  // sums: the arithmetic below stays exact
  VariableSpec v;
  v.id = 0;
  v.name = "users";
  v.rows = 0;
  v.dim = kDim;
  v.partitions = 1;
  v.optimizer.type = OptimizerType::kSgd;
  v.optimizer.lr = kLr;
  v.init.seed = 11;
  v.dynamic = settings;
  plan.variables.push_back(v);
  EXPECT_TRUE(ValidatePsPlan(&plan).ok());
  return plan;
}

std::unique_ptr<ShardCore> Core(const PsPlan& plan) {
  ShardOptions o;
  o.plan = plan;
  auto c = ShardCore::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::vector<OutMessage> Push(ShardCore* core, uint32_t worker, int64_t clock,
                             const std::vector<int64_t>& ids, const std::vector<float>& g) {
  return Send(core, Request(MakeHeader(Op::kPush, 0, 0, worker, static_cast<uint32_t>(ids.size()),
                                       kDim, clock),
                            ids, g));
}

std::vector<OutMessage> Pull(ShardCore* core, const std::vector<int64_t>& ids, int64_t clock) {
  return Send(core, Request(MakeHeader(Op::kPull, 0, 0, 0, static_cast<uint32_t>(ids.size()), kDim,
                                       clock),
                            ids, {}));
}

std::vector<float> Init(const PsPlan& plan, int64_t id) {
  std::vector<float> w(kDim);
  InitializeRow(plan.variables[0].init, 0, id, kDim, w.data());
  return w;
}

nlohmann::json TableStats(const ShardCore& core) {
  return nlohmann::json::parse(core.StatsJson())["dynamic_tables"]["users"];
}

TEST(ShardDynamicTest, AnyInt64IsAnIdAndAPushAdmitsIt) {
  const PsPlan plan = DynamicPlan(Consistency::kAsync, 1, {});
  auto core = Core(plan);
  ASSERT_TRUE(core);
  const std::vector<int64_t> ids = {-7, std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max(), 42};
  // Before any push: the initializer's values, nothing stored.
  auto out = Pull(core.get(), ids, 0);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
  std::vector<float> got = ReplyValues(out[0]);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> init = Init(plan, ids[i]);
    for (uint32_t j = 0; j < kDim; ++j) EXPECT_FLOAT_EQ(got[i * kDim + j], init[j]) << ids[i];
  }
  EXPECT_EQ(TableStats(*core)["rows"], 0);
  EXPECT_EQ(TableStats(*core)["not_admitted_reads"], 4);

  std::vector<float> g(ids.size() * kDim);
  for (size_t k = 0; k < g.size(); ++k) g[k] = 0.1f * static_cast<float>(k + 1);
  out = Push(core.get(), 0, 0, ids, g);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
  got = ReplyValues(Pull(core.get(), ids, 1)[0]);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> init = Init(plan, ids[i]);
    for (uint32_t j = 0; j < kDim; ++j) {
      EXPECT_FLOAT_EQ(got[i * kDim + j], init[j] - kLr * g[i * kDim + j]) << ids[i];
    }
  }
  EXPECT_EQ(TableStats(*core)["rows"], 4);
  EXPECT_EQ(TableStats(*core)["admitted"], 4);
  EXPECT_EQ(nlohmann::json::parse(core->StatsJson())["rows_held"], 4);
}

// admit_after = 2 under sync with 2 workers: step 0's two pushes name
// different ids (one contribution each: neither is admitted, both gradients
// dropped); at step 1 both name id 5, which the first contribution in rank
// order admits, so step 1's summed gradient applies. The same values
// whichever worker's push arrives first.
TEST(ShardDynamicTest, SyncAdmitsInRankOrderWhateverTheArrivalOrder) {
  DynamicTableSettings admit_two;
  admit_two.admit_after = 2;
  const PsPlan plan = DynamicPlan(Consistency::kSync, 2, admit_two);
  const std::vector<float> g5 = {1, 2, 3}, g9 = {4, 5, 6};
  std::vector<std::vector<float>> values;
  for (bool reversed : {false, true}) {
    auto core = Core(plan);
    ASSERT_TRUE(core);
    auto step = [&](int64_t clock, const std::vector<int64_t>& ids0,
                    const std::vector<int64_t>& ids1) {
      const std::vector<float> grad0 = ids0[0] == 5 ? g5 : g9, grad1 = ids1[0] == 5 ? g5 : g9;
      if (reversed) {
        Push(core.get(), 1, clock, ids1, grad1);
        Push(core.get(), 0, clock, ids0, grad0);
      } else {
        Push(core.get(), 0, clock, ids0, grad0);
        Push(core.get(), 1, clock, ids1, grad1);
      }
    };
    step(0, {5}, {9});
    EXPECT_EQ(TableStats(*core)["rows"], 0);
    EXPECT_EQ(TableStats(*core)["dropped_gradients"], 2);
    step(1, {5}, {5});
    EXPECT_EQ(TableStats(*core)["rows"], 1);
    auto out = Pull(core.get(), {5, 9}, 2);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
    values.push_back(ReplyValues(out[0]));
  }
  EXPECT_EQ(values[0], values[1]);
  const std::vector<float> init5 = Init(plan, 5), init9 = Init(plan, 9);
  for (uint32_t j = 0; j < kDim; ++j) {
    EXPECT_FLOAT_EQ(values[0][j], init5[j] - kLr * 2 * g5[j]);  // both workers' step-1 gradients
    EXPECT_FLOAT_EQ(values[0][kDim + j], init9[j]);              // never admitted
  }
}

TEST(ShardDynamicTest, AStepOverTheBudgetIsTableFullAndSaysWhatToSet) {
  DynamicTableSettings two_rows;
  two_rows.max_rows = 2;
  const PsPlan plan = DynamicPlan(Consistency::kAsync, 1, two_rows);
  auto core = Core(plan);
  ASSERT_TRUE(core);
  // Rows of earlier steps make room; three ids in one step cannot fit.
  auto out = Push(core.get(), 0, 0, {1, 2}, std::vector<float>(2 * kDim, 1.0f));
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
  out = Push(core.get(), 0, 1, {3}, std::vector<float>(kDim, 1.0f));
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
  EXPECT_EQ(TableStats(*core)["evicted_budget"], 1);
  out = Push(core.get(), 0, 2, {4, 5, 6}, std::vector<float>(3 * kDim, 1.0f));
  ExpectOneErrorReply(out, ErrorCode::kTableFull);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].frames[1].find("max_rows"), std::string::npos) << out[0].frames[1];
  EXPECT_NE(out[0].frames[1].find("step 2"), std::string::npos) << out[0].frames[1];
  // The table says so to every later request, and holds no more than its budget.
  ExpectOneErrorReply(Pull(core.get(), {1}, 3), ErrorCode::kTableFull);
  EXPECT_LE(TableStats(*core)["rows"].get<int64_t>(), 2);
}

TEST(ShardDynamicTest, WriteIsRefused) {
  const PsPlan plan = DynamicPlan(Consistency::kAsync, 1, {});
  auto core = Core(plan);
  ASSERT_TRUE(core);
  auto out = Send(core.get(), Request(MakeHeader(Op::kWrite, 0, 0, 0, 1, kDim, 0), {8},
                                      std::vector<float>(kDim, 1.0f)));
  ExpectOneErrorReply(out, ErrorCode::kBadFlags);
  EXPECT_EQ(TableStats(*core)["rows"], 0);
}

}  // namespace
}  // namespace parallax::ps
