#include "core/plan/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "core/plan/plan_builder.h"

namespace parallax::plan {
namespace {

// The plan BuildPlan makes for `vars` on `cluster` with the figures of
// `cost`: a sparse variable's α comes from one sampled batch of α · rows
// distinct rows, `overrides[i]` is variable i's [[variable]] path.
JobPlan Plan(const std::vector<VariableStats>& vars, const ClusterShape& cluster,
             const CostOptions& cost, Arch arch,
             const std::vector<std::optional<VariablePath>>& overrides = {}) {
  JobConfig job;
  job.job.arch = arch;
  job.plan.link_bytes_per_s = cost.bandwidth_bytes_per_s;
  job.plan.collective_latency_us = cost.collective_latency_s * 1e6;
  job.plan.ps_rtt_us = cost.ps_rtt_s * 1e6;
  PlanInputs in;
  in.cluster = cluster;
  in.fusion_bucket_bytes = cost.fusion_bucket_bytes;
  in.shm_allreduce = cost.shm_allreduce;
  for (size_t i = 0; i < vars.size(); ++i) {
    const VariableStats& v = vars[i];
    VariableInput r;
    r.var.id = static_cast<uint32_t>(i);
    r.var.name = v.name;
    r.var.sparse = v.sparse;
    if (v.sparse) {
      r.var.rows = v.rows;
      r.var.dim = static_cast<uint32_t>(v.dim);
      std::vector<int64_t> ids(static_cast<size_t>(std::llround(v.alpha * v.rows)));
      std::iota(ids.begin(), ids.end(), 0);
      r.sampled_batches = {ids};
    } else {
      r.var.size = static_cast<size_t>(v.dim);
      r.var.rows = 1;
      r.var.dim = static_cast<uint32_t>(v.dim);
    }
    if (i < overrides.size() && overrides[i]) {
      VariableOverride o;
      o.name = v.name;
      o.path = overrides[i];
      job.variables.push_back(o);
    }
    in.variables.push_back(std::move(r));
  }
  StatusOr<JobPlan> plan = BuildPlan(job, in);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : JobPlan();
}

std::vector<VariableStats> Model() {
  VariableStats w{.name = "mlp/w", .sparse = false, .rows = 1, .dim = 65'536};
  VariableStats emb{.name = "emb", .sparse = true, .rows = 50'000, .dim = 128, .alpha = 0.01,
                    .partitions = 2};
  return {w, emb};
}

// The default figures with the all-reduce as Gloo's ring over every rank,
// whose bytes cross the host's link even on one host.
CostOptions Ring() {
  CostOptions o;
  o.shm_allreduce = false;
  return o;
}

// With a collective call of 100 us (a fast network's) the dense weights are
// cheapest all-reduced (4.95 ms against 13.4 ms pushed and pulled whole) and
// the embedding on the PS: the mix beats every single-path plan.
TEST(PlanReportTest, HybridBeatsEverySinglePath) {
  const ClusterShape cluster{.workers = 4, .hosts = 1, .shards = 2};
  CostOptions fast_calls = Ring();
  fast_calls.collective_latency_s = 100e-6;
  PlanReport r = BuildPlanReport(Plan(Model(), cluster, fast_calls, Arch::kHybrid));
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].path, VariablePath::kAllReduce);
  EXPECT_EQ(r.rows[1].path, VariablePath::kPs);
  // Hybrid = the dense all-reduce + the embedding's PS bytes.
  EXPECT_DOUBLE_EQ(r.totals.hybrid.worker,
                   r.rows[0].choice.allreduce.bytes + r.rows[1].choice.ps.bytes);
  EXPECT_LT(r.totals.hybrid.link, r.totals.allreduce.link);
  EXPECT_LT(r.totals.hybrid.link, r.totals.ps.link);
  EXPECT_LT(r.totals.hybrid.link, r.totals.allgather.link);
  EXPECT_LT(r.totals.hybrid.worker, r.totals.allreduce.worker);
  EXPECT_LT(r.totals.hybrid.seconds, r.totals.allreduce.seconds);
  EXPECT_LT(r.totals.hybrid.seconds, r.totals.ps.seconds);
  EXPECT_LT(r.totals.hybrid.seconds, r.totals.allgather.seconds);
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
  PlanReport ps = BuildPlanReport(Plan(Model(), cluster, {}, Arch::kPs));
  EXPECT_EQ(ps.rows[0].path, VariablePath::kPs);
  EXPECT_DOUBLE_EQ(ps.totals.hybrid.link, ps.totals.ps.link);
  EXPECT_NE(FormatPlanReport(ps).find("arch = \"ps\""), std::string::npos);
  // all-gather has no dense form: the dense variable stays on all-reduce.
  PlanReport ag = BuildPlanReport(Plan(Model(), cluster, {}, Arch::kAllGather));
  EXPECT_EQ(ag.rows[0].path, VariablePath::kAllReduce);
  EXPECT_EQ(ag.rows[1].path, VariablePath::kAllGather);
  PlanReport over = BuildPlanReport(
      Plan(Model(), cluster, {}, Arch::kHybrid, {std::nullopt, VariablePath::kAllReduce}));
  EXPECT_EQ(over.rows[1].path, VariablePath::kAllReduce);
  EXPECT_EQ(over.rows[1].reason, "[[variable]] in the job file");
  EXPECT_NE(FormatPlanReport(over).find("[[variable]] in the job file (the cost model: "),
            std::string::npos)
      << FormatPlanReport(over);
  EXPECT_DOUBLE_EQ(over.totals.hybrid.worker, over.totals.allreduce.worker);
}

// All-gathered tables share the step's 2 calls: each row is charged them in
// full (its decision), the plan's totals once.
TEST(PlanReportTest, AllGatheredTablesShareTheStepsCalls) {
  const ClusterShape two{.workers = 2, .hosts = 1, .shards = 1};
  EXPECT_DOUBLE_EQ(AllGatherSharedCallsOvercount(1, two, {}).bytes, 0);
  // 3 tables: 2 too many, each 436 − 4 bytes of framing each way.
  EXPECT_DOUBLE_EQ(AllGatherSharedCallsOvercount(3, two, {}).bytes, 2 * 2 * 432);
  EXPECT_DOUBLE_EQ(AllGatherSharedCallsOvercount(3, two, {}).operations, 4);
  VariableStats a{.name = "a", .sparse = true, .rows = 1000, .dim = 8, .alpha = 0.1};
  VariableStats b = a, c = a;
  b.name = "b";
  c.name = "c";
  PlanReport r = BuildPlanReport(Plan({a, b, c}, two, {}, Arch::kAllGather));
  double rows = 0;
  for (const PlannedRow& row : r.rows) rows += row.choice.allgather.bytes;
  EXPECT_DOUBLE_EQ(r.totals.hybrid.worker, rows - 2 * 2 * 432);
  EXPECT_DOUBLE_EQ(r.totals.allgather.worker, r.totals.hybrid.worker);
  EXPECT_DOUBLE_EQ(r.totals.hybrid_by_path[static_cast<int>(VariablePath::kAllGather)].worker,
                   r.totals.hybrid.worker);
  auto doc = nlohmann::json::parse(PlanReportJson(r));
  EXPECT_DOUBLE_EQ(doc["plan_bytes_per_worker_by_path"]["allgather"].get<double>(),
                   r.totals.hybrid.worker);
  EXPECT_DOUBLE_EQ(doc["plan_bytes_per_worker_by_path"]["ps"].get<double>(), 0);
}

// Dense gradients are all-reduced in the trainer's fusion buckets, one call
// per bucket: 10 small dense variables in one 64 MiB bucket are 1 call a
// step, not 10 (core/comm/fusion_buckets.h).
TEST(PlanReportTest, DenseVariablesShareFusionBucketCalls) {
  const ClusterShape two{.workers = 2, .hosts = 1, .shards = 1};
  CostOptions o = Ring();
  o.bandwidth_bytes_per_s = 1e9;
  o.collective_latency_s = 1e-3;
  // A PS round trip dearer than even 10 unfused calls (15 ms): every dense
  // variable stays on all-reduce under arch = "hybrid" (on the PS they would
  // share one 20 ms push-pull round trip).
  o.ps_rtt_s = 20e-3;
  std::vector<VariableStats> vars;
  for (int i = 0; i < 10; ++i) {
    vars.push_back({.name = "w" + std::to_string(i), .sparse = false, .rows = 1, .dim = 1000});
  }
  const double call = 1.5 * (2 - 1) * 1e-3;  // one all-reduce call at 2 workers
  // 2 · (N−1)/N · 1000 · 4 bytes each way per variable and worker, and a
  // host's link carries both workers'.
  const double link = 10 * 2 * 4000.0;
  constexpr double kTol = 1e-12;
  for (const Arch arch : {Arch::kHybrid, Arch::kAllReduce, Arch::kAllGather}) {
    PlanReport r = BuildPlanReport(Plan(vars, two, o, arch));
    for (const PlannedRow& row : r.rows) {
      EXPECT_DOUBLE_EQ(row.choice.allreduce.operations, 1);  // each alone: 1 call
    }
    EXPECT_NEAR(r.totals.hybrid.seconds, link / 1e9 + 1 * call, kTol) << ArchName(arch);
    EXPECT_NEAR(r.totals.allreduce.seconds, link / 1e9 + 1 * call, kTol) << ArchName(arch);
    EXPECT_NEAR(r.totals.allgather.seconds, link / 1e9 + 1 * call, kTol) << ArchName(arch);
    EXPECT_NEAR(r.totals.hybrid_by_path[static_cast<int>(VariablePath::kAllReduce)].seconds,
                link / 1e9 + 1 * call, kTol);
  }
  PlanReport ps = BuildPlanReport(Plan(vars, two, o, Arch::kPs));  // no all-reduce at all
  EXPECT_DOUBLE_EQ(ps.totals.hybrid.seconds, ps.totals.ps.seconds);

  // Buckets of 8000 bytes hold 2 of these 4000-byte gradients: 5 calls.
  o.fusion_bucket_bytes = 8000;
  PlanReport five = BuildPlanReport(Plan(vars, two, o, Arch::kHybrid));
  EXPECT_NEAR(five.totals.hybrid.seconds, link / 1e9 + 5 * call, kTol);
  EXPECT_DOUBLE_EQ(AllReduceFusionOvercount(std::vector<int64_t>(10, 1000), two, o).operations, 5);
  // No fusion: one call per variable.
  o.fusion_bucket_bytes = 0;
  PlanReport unfused = BuildPlanReport(Plan(vars, two, o, Arch::kHybrid));
  EXPECT_NEAR(unfused.totals.hybrid.seconds, link / 1e9 + 10 * call, kTol);
  // Through shared memory on the one host: one call of its own fixed cost
  // and one pass over the 40,000 bytes, nothing on the link.
  o.fusion_bucket_bytes = 64u << 20;
  o.shm_allreduce = true;
  PlanReport shm = BuildPlanReport(Plan(vars, two, o, Arch::kHybrid));
  EXPECT_DOUBLE_EQ(shm.totals.hybrid.link, 0);
  EXPECT_NEAR(shm.totals.hybrid.seconds, o.shm_call_s + 40'000 / o.shm_bytes_per_s, kTol);
  auto doc = nlohmann::json::parse(PlanReportJson(five));
  EXPECT_DOUBLE_EQ(doc["predicted_seconds_per_step"]["plan"].get<double>(),
                   five.totals.hybrid.seconds);
}

// A sparse variable on all-reduce sends its whole-table gradient after the
// dense ones; a table larger than a bucket is one call, reduced in place.
TEST(PlanReportTest, WholeTableGradientsFollowTheDenseOnesInTheBuckets) {
  const ClusterShape two{.workers = 2, .hosts = 1, .shards = 1};
  CostOptions o = Ring();
  o.collective_latency_s = 1e-3;
  o.fusion_bucket_bytes = 4000;  // 1000 floats
  VariableStats table{.name = "emb", .sparse = true, .rows = 100, .dim = 30, .alpha = 0.1};
  VariableStats small{.name = "b", .sparse = false, .rows = 1, .dim = 400};
  EXPECT_DOUBLE_EQ(AllReduceCost(table, two, o).operations, 1);  // 3000 floats, in place
  // Registration order puts the table first; the session registers the
  // dense gradients first: [400, 400] share a bucket, the table is alone.
  PlanReport r = BuildPlanReport(Plan({table, small, small}, two, o, Arch::kAllReduce));
  double alone = 0;
  for (const PlannedRow& row : r.rows) alone += row.choice.allreduce.seconds;
  EXPECT_NEAR(r.totals.allreduce.seconds, alone - 1 * 1.5 * 1e-3, 1e-12);
}

}  // namespace
}  // namespace parallax::plan
