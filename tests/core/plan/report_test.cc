#include "core/plan/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace parallax::plan {
namespace {

std::vector<VariableStats> Model() {
  VariableStats w{.name = "mlp/w", .sparse = false, .rows = 1, .dim = 65'536};
  VariableStats emb{.name = "emb", .sparse = true, .rows = 50'000, .dim = 128, .alpha = 0.01,
                    .partitions = 2};
  return {w, emb};
}

TEST(PlanReportTest, HybridBeatsEverySinglePath) {
  const ClusterShape cluster{.workers = 4, .hosts = 1, .shards = 2};
  PlanReport r = BuildPlanReport(Model(), cluster, {}, "hybrid");
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].path, Path::kAllReduce);
  EXPECT_EQ(r.rows[1].path, Path::kPs);
  // Hybrid = the dense all-reduce + the embedding's PS bytes.
  EXPECT_DOUBLE_EQ(r.totals.hybrid.worker,
                   r.rows[0].choice.allreduce.bytes + r.rows[1].choice.ps.bytes);
  EXPECT_LT(r.totals.hybrid.link, r.totals.allreduce.link);
  EXPECT_LT(r.totals.hybrid.link, r.totals.ps.link);
  EXPECT_LT(r.totals.hybrid.link, r.totals.allgather.link);
  EXPECT_LT(r.totals.hybrid.worker, r.totals.allreduce.worker);
  // Per worker PS-only moves less (the dense weights once each way, not
  // 2(N−1)/N times), but its shards double what the host's link carries.
  EXPECT_LT(r.totals.ps.worker, r.totals.hybrid.worker);
  // The whole 50,000 × 128 table all-reduced: 2 · 2 · 3/4 · 6.4M · 4 bytes.
  EXPECT_DOUBLE_EQ(r.rows[1].choice.allreduce.bytes, 2 * 2 * 0.75 * 6'400'000 * 4);
  const std::string text = FormatPlanReport(r);
  EXPECT_NE(text.find("emb"), std::string::npos) << text;
  EXPECT_NE(text.find("50000x128"), std::string::npos) << text;
  EXPECT_NE(text.find("PS only"), std::string::npos) << text;
  auto doc = nlohmann::json::parse(PlanReportJson(r));
  EXPECT_EQ(doc["variables"][1]["path"], "ps");
  EXPECT_EQ(doc["variables"][1]["partitions"], 2);
  EXPECT_DOUBLE_EQ(doc["total_bytes_per_worker"]["plan"].get<double>(), r.totals.hybrid.worker);
  EXPECT_DOUBLE_EQ(doc["total_bytes_per_host_link"]["ps"].get<double>(), r.totals.ps.link);
}

TEST(PlanReportTest, ForcedArchAndOverrides) {
  const ClusterShape cluster{.workers = 4, .hosts = 1, .shards = 2};
  PlanReport ps = BuildPlanReport(Model(), cluster, {}, "ps");
  EXPECT_EQ(ps.rows[0].path, Path::kPs);
  EXPECT_DOUBLE_EQ(ps.totals.hybrid.link, ps.totals.ps.link);
  EXPECT_NE(FormatPlanReport(ps).find("arch = \"ps\""), std::string::npos);
  // all-gather has no dense form: the dense variable stays on all-reduce.
  PlanReport ag = BuildPlanReport(Model(), cluster, {}, "allgather");
  EXPECT_EQ(ag.rows[0].path, Path::kAllReduce);
  EXPECT_EQ(ag.rows[1].path, Path::kAllGather);
  PlanReport over = BuildPlanReport(Model(), cluster, {}, "hybrid", {std::nullopt, Path::kAllReduce});
  EXPECT_EQ(over.rows[1].path, Path::kAllReduce);
  EXPECT_EQ(over.rows[1].note, "[[variable]] in the job file");
  EXPECT_DOUBLE_EQ(over.totals.hybrid.worker, over.totals.allreduce.worker);
}

// All-gathered tables share the step's 2 calls: each row is charged them in
// full (its decision), the plan's totals once.
TEST(PlanReportTest, AllGatheredTablesShareTheStepsCalls) {
  const ClusterShape two{.workers = 2, .hosts = 1, .shards = 1};
  EXPECT_DOUBLE_EQ(AllGatherSharedCallsOvercount(1, two, {}).bytes, 0);
  // 3 tables: 2 too many, each 1060 − 4 bytes of framing each way.
  EXPECT_DOUBLE_EQ(AllGatherSharedCallsOvercount(3, two, {}).bytes, 2 * 2 * 1056);
  EXPECT_DOUBLE_EQ(AllGatherSharedCallsOvercount(3, two, {}).operations, 4);
  VariableStats a{.name = "a", .sparse = true, .rows = 1000, .dim = 8, .alpha = 0.1};
  VariableStats b = a, c = a;
  b.name = "b";
  c.name = "c";
  PlanReport r = BuildPlanReport({a, b, c}, two, {}, "allgather");
  double rows = 0;
  for (const PlannedRow& row : r.rows) rows += row.choice.allgather.bytes;
  EXPECT_DOUBLE_EQ(r.totals.hybrid.worker, rows - 2 * 2 * 1056);
  EXPECT_DOUBLE_EQ(r.totals.allgather.worker, r.totals.hybrid.worker);
  EXPECT_DOUBLE_EQ(r.totals.hybrid_by_path[static_cast<int>(Path::kAllGather)].worker,
                   r.totals.hybrid.worker);
  auto doc = nlohmann::json::parse(PlanReportJson(r));
  EXPECT_DOUBLE_EQ(doc["plan_bytes_per_worker_by_path"]["allgather"].get<double>(),
                   r.totals.hybrid.worker);
  EXPECT_DOUBLE_EQ(doc["plan_bytes_per_worker_by_path"]["ps"].get<double>(), 0);
}

}  // namespace
}  // namespace parallax::plan
