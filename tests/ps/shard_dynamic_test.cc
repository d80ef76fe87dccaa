// A shard serving a dynamic table (core/ps/dynamic_table.h): any int64 is an
// id, rows are admitted after `admit_after` contributions (in rank order
// under sync, whatever order the pushes arrive in), counted in STATS, and a
// step that needs more rows than the budget is refused with TABLE_FULL.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include <filesystem>
#include <map>
#include <set>

#include "core/ps/dynamic_file.h"
#include "core/ps/initializer.h"
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

// Async: worker 1 is at step 10 while worker 0, far behind, keeps pushing
// new ids at step 0. The table's newest step is 10; before, every row
// worker 0 touched counted as step 10's and was never evicted, so the budget
// filled and the job stopped with TABLE_FULL. Only a push's own rows are
// spared now.
TEST(ShardDynamicTest, ALateAsyncWorkerNeverFillsTheBudget) {
  DynamicTableSettings budget;
  budget.max_rows = 4;
  const PsPlan plan = DynamicPlan(Consistency::kAsync, 2, budget);
  auto core = Core(plan);
  ASSERT_TRUE(core);
  auto out = Push(core.get(), 1, 10, {1000}, std::vector<float>(kDim, 1.0f));
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
  for (int64_t push = 0; push < 20; ++push) {
    const std::vector<int64_t> ids = {3 * push, 3 * push + 1, 3 * push + 2};
    out = Push(core.get(), 0, 0, ids, std::vector<float>(3 * kDim, 1.0f));
    ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush))
        << "push " << push << ": " << out[0].frames[1];
    ASSERT_LE(TableStats(*core)["rows"].get<int64_t>(), 4);
  }
  EXPECT_EQ(TableStats(*core)["evicted_budget"].get<int64_t>(), 1 + 20 * 3 - 4);
  // The last push's rows are held, with its update.
  std::vector<float> expected = Init(plan, 59);
  for (float& w : expected) w -= kLr;
  out = Pull(core.get(), {59}, 1);
  EXPECT_EQ(ReplyValues(out[0]), expected);
}

// Every data reply carries the table's resets (schemas/ps_wire.md, "Row
// cache"): a row evicted to fit the budget changes it, so a worker's row
// cache learns that rows it may hold are gone.
TEST(ShardDynamicTest, DataRepliesCountTheRowsEvicted) {
  DynamicTableSettings budget;
  budget.max_rows = 2;
  const PsPlan plan = DynamicPlan(Consistency::kAsync, 1, budget);
  auto core = Core(plan);
  ASSERT_TRUE(core);
  auto out = Push(core.get(), 0, 0, {1, 2}, std::vector<float>(2 * kDim, 1.0f));
  EXPECT_EQ(ReplyHeader(out[0]).resets, 0);
  out = Pull(core.get(), {1}, 1);
  EXPECT_EQ(ReplyHeader(out[0]).resets, 0);
  out = Push(core.get(), 0, 1, {3}, std::vector<float>(kDim, 1.0f));  // evicts a row
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
  EXPECT_EQ(ReplyHeader(out[0]).resets, 1);
  out = Pull(core.get(), {3}, 2);
  EXPECT_EQ(ReplyHeader(out[0]).resets, 1);
}

// Ids the plan says are never rows (a padding id, the ctr model's missing
// value 0) read as zeros and their gradients are dropped and counted.
TEST(ShardDynamicTest, NeverAdmittedIdsFromThePlanReadAsZerosAndTakeNoRow) {
  DynamicTableSettings settings;
  settings.never_admit = {0, -7};
  const PsPlan plan = DynamicPlan(Consistency::kAsync, 1, settings);
  auto core = Core(plan);
  ASSERT_TRUE(core);
  auto out = Push(core.get(), 0, 0, {0, 5, -7}, std::vector<float>(3 * kDim, 1.0f));
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
  EXPECT_EQ(TableStats(*core)["rows"], 1);
  EXPECT_EQ(TableStats(*core)["dropped_gradients"], 2);
  out = Pull(core.get(), {0, -7, 5}, 1);
  std::vector<float> expected(2 * kDim, 0.0f);
  std::vector<float> five = Init(plan, 5);
  for (float w : five) expected.push_back(w - kLr);
  EXPECT_EQ(ReplyValues(out[0]), expected);
  EXPECT_EQ(TableStats(*core)["not_admitted_reads"], 0) << "zeros, not the initializer's values";
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

// Checkpoints (SAVE / LOAD) of a dynamic table: one file per shard.

// `partitions` hash partitions over `shards` shards (partition p on shard
// p % shards), Adagrad (so optimizer state travels too), LFU under a budget
// and admission after 2 contributions (so the sketch, the eviction order and
// the generator do), async: every push applies at once.
PsPlan ShardedPlan(uint32_t shards, uint32_t partitions, int64_t max_rows) {
  DynamicTableSettings s;
  s.admit_after = 2;
  s.max_rows = max_rows;
  s.eviction = EvictionPolicy::kLfu;
  PsPlan plan = DynamicPlan(Consistency::kAsync, 1, s);
  plan.num_shards = shards;
  VariableSpec& v = plan.variables[0];
  v.partitions = partitions;
  v.scheme = PartitionScheme::kHash;
  v.optimizer.type = OptimizerType::kAdagrad;
  v.partition_shards.clear();
  EXPECT_TRUE(ValidatePsPlan(&plan).ok());
  return plan;
}

std::unique_ptr<ShardCore> ShardOfPlan(const PsPlan& plan, uint32_t shard) {
  ShardOptions o;
  o.plan = plan;
  o.shard = shard;
  auto c = ShardCore::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Step `step` of a drifting stream: 6 ids from a hot set of 8, 6 new ones
// (each new in two consecutive steps), each pushed to the shard owning its
// partition.
void StreamStep(const PsPlan& plan, const std::vector<std::unique_ptr<ShardCore>>& cores,
                int64_t step) {
  const VariableSpec& v = plan.variables[0];
  std::map<uint32_t, std::map<uint32_t, std::vector<int64_t>>> by_shard;  // shard -> part -> ids
  for (int64_t k = 0; k < 12; ++k) {
    // New ids come in two consecutive steps: the second admits them.
    const uint64_t raw = k < 6 ? static_cast<uint64_t>((step + k) % 8)
                               : static_cast<uint64_t>(100 + (step / 2) * 6 + k);
    const int64_t id = static_cast<int64_t>(Mix64(raw + 1));
    const uint32_t p = PartitionOf(v, id);
    by_shard[ShardOf(v, p)][p].push_back(id);
  }
  for (auto& [shard, parts] : by_shard) {
    for (auto& [p, ids] : parts) {
      std::vector<float> g(ids.size() * kDim);
      for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>((step + i) % 7) - 0.03f;
      auto out = Send(cores[shard].get(),
                      Request(MakeHeader(Op::kPush, 0, p, 0, static_cast<uint32_t>(ids.size()), kDim,
                                         step),
                              ids, g));
      ASSERT_EQ(out.size(), 1u);
      ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
    }
  }
}

std::vector<OutMessage> Control(ShardCore* core, Op op, const std::string& dir) {
  testing::Frames f = Request(MakeHeader(op, 0, 0, 0, 0, 0, 0), {}, {});
  f.f[1] = dir;
  return Send(core, f);
}

std::vector<std::unique_ptr<ShardCore>> Shards(const PsPlan& plan) {
  std::vector<std::unique_ptr<ShardCore>> cores;
  for (uint32_t s = 0; s < plan.num_shards; ++s) cores.push_back(ShardOfPlan(plan, s));
  return cores;
}

void SaveAll(const std::vector<std::unique_ptr<ShardCore>>& cores, const std::string& dir) {
  for (const auto& c : cores) {
    auto out = Control(c.get(), Op::kSave, dir);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kSave)) << out[0].frames[1];
  }
}

void LoadAll(const std::vector<std::unique_ptr<ShardCore>>& cores, const std::string& dir) {
  for (const auto& c : cores) {
    auto out = Control(c.get(), Op::kLoad, dir);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kLoad)) << out[0].frames[1];
  }
}

// A run saved at step 30, loaded into new shards and continued for 30
// steps is, byte for byte, the uninterrupted run: rows, optimizer state,
// the eviction order, the admission sketch and the LFU generator.
TEST(ShardDynamicCheckpointTest, ResumeOnTheSameShardsContinuesExactly) {
  parallax::testing::TempDir dir;
  const PsPlan plan = ShardedPlan(2, 4, 40);
  auto run = Shards(plan);
  for (int64_t s = 0; s < 30; ++s) ASSERT_NO_FATAL_FAILURE(StreamStep(plan, run, s));
  ASSERT_NO_FATAL_FAILURE(SaveAll(run, dir.path()));
  for (const std::string& name : DynamicFileNames(plan.variables[0]))
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/" + name)) << name;
  auto resumed = Shards(plan);
  ASSERT_NO_FATAL_FAILURE(LoadAll(resumed, dir.path()));
  for (uint32_t s = 0; s < 2; ++s)
    EXPECT_EQ(resumed[s]->dynamic_table(0)->Serialize(), run[s]->dynamic_table(0)->Serialize());
  for (int64_t s = 30; s < 60; ++s) {
    ASSERT_NO_FATAL_FAILURE(StreamStep(plan, run, s));
    ASSERT_NO_FATAL_FAILURE(StreamStep(plan, resumed, s));
  }
  for (uint32_t s = 0; s < 2; ++s) {
    const DynamicTableStats st = run[s]->dynamic_table(0)->stats();
    EXPECT_GT(st.evicted_budget, 0) << "the budget must have been used for this test to mean much";
    EXPECT_LE(st.rows, 20);
    EXPECT_EQ(resumed[s]->dynamic_table(0)->Serialize(), run[s]->dynamic_table(0)->Serialize())
        << "shard " << s;
  }
}

// 2 shards × 4 partitions to 3 shards × 6: every row lands once, on the
// shard owning its id's new partition, with its values; a budget smaller
// than what a new shard receives is met by evicting, counted.
TEST(ShardDynamicCheckpointTest, ReshardsTwoShardsToThreeByTheHashOfTheIds) {
  parallax::testing::TempDir dir;
  const PsPlan before = ShardedPlan(2, 4, 0);
  auto run = Shards(before);
  for (int64_t s = 0; s < 20; ++s) ASSERT_NO_FATAL_FAILURE(StreamStep(before, run, s));
  ASSERT_NO_FATAL_FAILURE(SaveAll(run, dir.path()));
  std::map<uint64_t, std::vector<float>> rows;
  for (const auto& c : run) {
    const DynamicTable* t = c->dynamic_table(0);
    for (uint64_t id : t->Ids()) {
      const float* w = t->weights(t->Find(id));
      rows[id].assign(w, w + kDim);
    }
  }
  ASSERT_GT(rows.size(), 50u);

  const PsPlan after = ShardedPlan(3, 6, 0);
  auto resharded = Shards(after);
  ASSERT_NO_FATAL_FAILURE(LoadAll(resharded, dir.path()));
  std::set<uint64_t> seen;
  for (uint32_t s = 0; s < 3; ++s) {
    const DynamicTable* t = resharded[s]->dynamic_table(0);
    for (uint64_t id : t->Ids()) {
      EXPECT_TRUE(seen.insert(id).second) << "id " << id << " on two shards";
      EXPECT_EQ(ShardOf(after.variables[0], PartitionOf(after.variables[0], static_cast<int64_t>(id))), s);
      const float* w = t->weights(t->Find(id));
      EXPECT_EQ(std::vector<float>(w, w + kDim), rows[id]) << id;
    }
  }
  EXPECT_EQ(seen.size(), rows.size());

  // The same checkpoint under a budget of 30 rows (10 a shard): each new
  // shard evicts what is over it and counts it.
  const PsPlan tight = ShardedPlan(3, 6, 30);
  auto fitted = Shards(tight);
  ASSERT_NO_FATAL_FAILURE(LoadAll(fitted, dir.path()));
  int64_t held = 0, evicted = 0;
  for (const auto& c : fitted) {
    const DynamicTableStats st = c->dynamic_table(0)->stats();
    EXPECT_LE(st.rows, 10);
    held += st.rows;
    evicted += st.evicted_budget;
  }
  EXPECT_EQ(held + evicted, static_cast<int64_t>(rows.size()));
  // And they train on.
  for (int64_t s = 20; s < 25; ++s) ASSERT_NO_FATAL_FAILURE(StreamStep(tight, fitted, s));
}

// A checkpoint that lacks a shard's file cannot be resharded: LOAD says
// which partition is missing and the shard keeps what it had.
TEST(ShardDynamicCheckpointTest, AMissingShardFileIsNamedAndNothingIsLoaded) {
  parallax::testing::TempDir dir;
  const PsPlan before = ShardedPlan(2, 4, 0);
  auto run = Shards(before);
  for (int64_t s = 0; s < 5; ++s) ASSERT_NO_FATAL_FAILURE(StreamStep(before, run, s));
  ASSERT_NO_FATAL_FAILURE(SaveAll(run, dir.path()));
  std::filesystem::remove(dir.path() + "/" + DynamicFileName(0, 1));
  const PsPlan after = ShardedPlan(3, 6, 0);
  auto targets = Shards(after);
  for (int64_t s = 0; s < 3; ++s) ASSERT_NO_FATAL_FAILURE(StreamStep(after, targets, s));
  ShardCore* target = targets[0].get();
  const std::string state = target->dynamic_table(0)->Serialize();
  ASSERT_GT(target->dynamic_table(0)->stats().rows, 0);
  auto out = Control(target, Op::kLoad, dir.path());
  ASSERT_EQ(out.size(), 1u);
  ASSERT_NE(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kLoad));
  EXPECT_NE(out[0].frames[1].find("lacks partition"), std::string::npos) << out[0].frames[1];
  EXPECT_EQ(target->dynamic_table(0)->Serialize(), state);
}

}  // namespace
}  // namespace parallax::ps
