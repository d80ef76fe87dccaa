// The plan JSON's one reader and writer (core/plan/job_plan.h): the PS part
// a shard keeps is derived from the plan's variables, each field is written
// once, plans stored by the previous version read the same, and bad plans
// are refused naming the key.
#include "core/plan/job_plan.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace parallax::plan {
namespace {

using nlohmann::json;

ps::PsPlan TwoTables() {
  ps::PsPlan p;
  p.consistency = Consistency::kSsp;
  p.staleness = 3;
  p.num_workers = 4;
  p.num_shards = 2;
  ps::VariableSpec emb;
  emb.id = 0;
  emb.name = "emb";
  emb.rows = 1000;
  emb.dim = 8;
  emb.partitions = 4;
  emb.optimizer.type = OptimizerType::kAdam;
  emb.optimizer.lr = 0.5f;
  emb.init.type = Initializer::Type::kNormal;
  emb.init.seed = 9;
  ps::VariableSpec pos;
  pos.id = 1;
  pos.name = "pos";
  pos.rows = 10;
  pos.dim = 2;
  pos.partitions = 3;
  pos.scheme = ps::PartitionScheme::kRange;
  pos.partition_shards = {1, 1, 0};
  p.variables = {emb, pos};
  return p;
}

// A field of the plan's JSON, changed; the plan parsed again.
Status ParseChanged(const std::function<void(json&)>& change) {
  json doc = json::parse(JobPlanToJson(JobPlanOfPs(TwoTables())));
  change(doc);
  return ParseJobPlan(doc.dump()).status();
}

TEST(JobPlanJsonTest, ThePsPartIsDerivedFromThePlansVariables) {
  StatusOr<JobPlan> plan = ParseJobPlan(JobPlanToJson(JobPlanOfPs(TwoTables())));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const ps::PsPlan& p = plan->ps;
  EXPECT_EQ(p.consistency, Consistency::kSsp);
  EXPECT_EQ(p.staleness, 3);
  EXPECT_EQ(p.contributors(), 4u);
  ASSERT_EQ(p.variables.size(), 2u);
  EXPECT_EQ(p.variables[0].name, "emb");
  EXPECT_EQ(p.variables[0].rows, 1000);
  EXPECT_EQ(p.variables[0].dim, 8u);
  // No placement given: partition p on shard p % num_shards.
  EXPECT_EQ(p.variables[0].partition_shards, (std::vector<uint32_t>{0, 1, 0, 1}));
  EXPECT_EQ(p.variables[0].optimizer.type, OptimizerType::kAdam);
  EXPECT_FLOAT_EQ(p.variables[0].optimizer.lr, 0.5f);
  EXPECT_EQ(p.variables[0].init.type, Initializer::Type::kNormal);
  EXPECT_EQ(p.variables[0].init.seed, 9u);
  EXPECT_EQ(p.variables[1].scheme, ps::PartitionScheme::kRange);
  EXPECT_EQ(p.variables[1].partition_shards, (std::vector<uint32_t>{1, 1, 0}));
  // Nothing lost on the way back (the placement now written out).
  StatusOr<JobPlan> again = ParseJobPlan(JobPlanToJson(*plan));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(JobPlanToJson(*again), JobPlanToJson(*plan));
}

// A dynamic table's settings go to the shards whole, the ids that are
// never rows included (written only when there are any).
TEST(JobPlanJsonTest, ADynamicTablesSettingsAndNeverAdmittedIdsRoundTrip) {
  ps::PsPlan p = TwoTables();
  p.variables[0].rows = 0;
  p.variables[0].scheme = ps::PartitionScheme::kHash;
  p.variables[0].dynamic = DynamicTableSettings{};
  p.variables[0].dynamic->admit_after = 2;
  p.variables[0].dynamic->max_rows = 500;
  p.variables[0].dynamic->eviction = EvictionPolicy::kLfu;
  p.variables[0].dynamic->never_admit = {0, -1};
  const std::string text = JobPlanToJson(JobPlanOfPs(p));
  StatusOr<JobPlan> plan = ParseJobPlan(text);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->ps.variables[0].dynamic.has_value());
  const DynamicTableSettings& d = *plan->ps.variables[0].dynamic;
  EXPECT_EQ(d.admit_after, 2);
  EXPECT_EQ(d.max_rows, 500);
  EXPECT_EQ(d.eviction, EvictionPolicy::kLfu);
  EXPECT_EQ(d.never_admit, (std::vector<int64_t>{0, -1}));
  StatusOr<JobPlan> again = ParseJobPlan(JobPlanToJson(*plan));  // (the placement written out)
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(JobPlanToJson(*again), JobPlanToJson(*plan));
  p.variables[0].dynamic->never_admit.clear();
  EXPECT_EQ(JobPlanToJson(JobPlanOfPs(p)).find("never_admit"), std::string::npos);
}

TEST(JobPlanJsonTest, EachFieldIsWrittenOnce) {
  const json doc = json::parse(JobPlanToJson(JobPlanOfPs(TwoTables())));
  EXPECT_FALSE(doc.contains("world_size")) << "cluster.workers says it";
  EXPECT_FALSE(doc["ps"].contains("consistency")) << doc["ps"].dump();
  for (const json& v : doc["ps"]["variables"]) {
    for (const char* key : {"name", "rows", "dim", "partitions", "optimizer", "init"}) {
      EXPECT_FALSE(v.contains(key)) << key << " is the plan's variables' (" << v.dump() << ")";
    }
  }
  EXPECT_EQ(doc["variables"][0]["optimizer"]["type"], "adam");
}

TEST(JobPlanJsonTest, APlanOfThePreviousVersionReadsTheSame) {
  // Version 2 repeated the PS variables' fields and the consistency under
  // "ps", and the worker count as "world_size": the coordinator's database
  // holds plans written so.
  const std::string v2 = R"({"version": 2, "arch": "ps", "consistency": "async", "world_size": 2,
    "variables": [{"id": 0, "name": "emb", "kind": "sparse", "rows": 50, "dim": 4, "path": "ps",
                   "partitions": 2, "optimizer": {"type": "adagrad", "lr": 0.1, "momentum": 0,
                   "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "initial_accumulator": 0.1},
                   "init": {"type": "uniform", "seed": 3, "scale": 0.05}}],
    "ps": {"consistency": "async", "num_workers": 2, "num_shards": 2,
           "variables": [{"id": 0, "name": "emb", "rows": 50, "dim": 4, "partitions": 2,
                          "scheme": "hash", "partition_shards": [1, 0],
                          "optimizer": {"type": "adagrad", "lr": 0.1}}]}})";
  StatusOr<JobPlan> plan = ParseJobPlan(v2);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->cluster.workers, 2);
  EXPECT_EQ(plan->ps.consistency, Consistency::kAsync);
  ASSERT_EQ(plan->ps.variables.size(), 1u);
  EXPECT_EQ(plan->ps.variables[0].partition_shards, (std::vector<uint32_t>{1, 0}));
  EXPECT_FLOAT_EQ(plan->ps.variables[0].optimizer.initial_accumulator, 0.1f);
}

TEST(JobPlanJsonTest, RefusesBadPlansNamingTheKey) {
  auto message = [](const Status& st) { return st.ok() ? std::string("ok") : st.message(); };
  Status st = ParseChanged([](json& d) { d["ps"]["variables"][0]["partition_shards"] = {0, 3, 0, 1}; });
  EXPECT_NE(message(st).find("ps.variables[0]: \"partition_shards\" names shard 3"), std::string::npos)
      << message(st);
  st = ParseChanged([](json& d) { d["ps"]["variables"][0]["partition_shards"] = {0}; });
  EXPECT_NE(message(st).find("one entry per partition"), std::string::npos) << message(st);
  st = ParseChanged([](json& d) { d["ps"]["variables"][1]["id"] = 7; });
  EXPECT_NE(message(st).find("ps.variables[1]: variable 7 is not a variable on the PS path"),
            std::string::npos)
      << message(st);
  st = ParseChanged([](json& d) { d["ps"]["sync_reduce"] = "median"; });
  EXPECT_NE(message(st).find("ps.sync_reduce must be mean or sum"), std::string::npos) << message(st);
  st = ParseChanged([](json& d) { d["ps"]["num_shards"] = 0; });
  EXPECT_NE(message(st).find("\"num_shards\" must be > 0"), std::string::npos) << message(st);
  st = ParseChanged([](json& d) { d["variables"][0]["rows"] = 0; });
  EXPECT_NE(message(st).find("\"rows\" must be > 0"), std::string::npos) << message(st);
  st = ParseChanged([](json& d) { d["variables"][0]["dim"] = 0; });
  EXPECT_NE(message(st).find("\"dim\""), std::string::npos) << message(st);
  st = ParseChanged([](json& d) { d["variables"][0]["rows"] = "many"; });
  EXPECT_NE(message(st).find("variables[0]"), std::string::npos) << message(st);
  st = ParseChanged([](json& d) { d["consistency"] = "eventual"; });
  EXPECT_NE(message(st).find("consistency \"eventual\""), std::string::npos) << message(st);
  st = ParseChanged([](json& d) { d["variables"][0]["optimizer"]["type"] = "lamb"; });
  EXPECT_NE(message(st).find("optimizer type \"lamb\""), std::string::npos) << message(st);
  EXPECT_EQ(ParseJobPlan("not json").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::plan
