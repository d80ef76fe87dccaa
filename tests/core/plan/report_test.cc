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

}  // namespace
}  // namespace parallax::plan
