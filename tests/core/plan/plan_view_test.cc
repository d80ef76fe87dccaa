// The plan view that `parallax status` and the coordinator's job page both
// show (core/plan/plan_view.h).
#include "core/plan/plan_view.h"

#include <gtest/gtest.h>

namespace parallax::plan {
namespace {

TEST(PlanViewTest, OneRowPerVariableWithPartitionsAndReason) {
  JobPlan p;
  PlannedVariable emb;
  emb.id = 0;
  emb.name = "emb";
  emb.sparse = true;
  emb.rows = 50000;
  emb.dim = 128;
  emb.path = VariablePath::kPs;
  emb.density = 0.0125;
  emb.partitions = 4;
  emb.reason = "α = 0.0125: ps puts 2 MB";
  PlannedVariable w;
  w.id = 1;
  w.name = "w";
  w.size = 4096;
  w.rows = 4;
  w.dim = 1024;
  w.reason = "dense";
  p.variables = {emb, w};
  ps::VariableSpec spec;
  spec.id = 0;
  spec.name = "emb";
  spec.rows = 50000;
  spec.dim = 128;
  spec.partitions = 4;
  spec.partition_shards = {0, 0, 0, 0};
  p.ps.variables = {spec};
  // Through the plan's JSON, as the CLI and the web page read it.
  StatusOr<JobPlan> back = ParseJobPlan(JobPlanToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const PlanTable table = PlanTableOf(*back);
  EXPECT_EQ(table.columns, (std::vector<std::string>{"VARIABLE", "SHAPE", "ALPHA", "PATH",
                                                      "PARTITIONS", "WHY"}));
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[0], (std::vector<std::string>{"emb", "50000x128", "0.0125", "ps", "4",
                                                      "α = 0.0125: ps puts 2 MB"}));
  EXPECT_EQ(table.rows[1], (std::vector<std::string>{"w", "4096", "dense", "allreduce", "-", "dense"}));
}

// `parallax status` shows the figures the plan was made with and their
// sources; the plan JSON carries the sources through.
TEST(PlanViewTest, FiguresWithTheirSources) {
  JobPlan p;
  p.cost.bandwidth_bytes_per_s = 1.25e8;
  p.cost.loopback_bytes_per_s = 2e9;
  p.figures.link = "job file [plan]";
  p.figures.loopback = "measured on h1 at 2026-11-25 04:50 UTC";
  const std::vector<std::string> lines = PlanFigureLines(p);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "link 0.125 GB/s (job file [plan])");
  EXPECT_EQ(lines[1], "loopback 2 GB/s (measured on h1 at 2026-11-25 04:50 UTC)");
  EXPECT_EQ(lines[3], "collective call 9000 us (default)");
  // The plan's predicted communication time, what a run's wait is held against.
  p.predicted_comm_s = 0.0403;
  const std::vector<std::string> with_time = PlanFigureLines(p);
  ASSERT_EQ(with_time.size(), 6u);
  EXPECT_EQ(with_time[5], "predicted communication 40.3 ms per step (these figures)");
  // A plan re-planned on evidence says by how much its model was scaled.
  p.cost.ps_time_scale = 12.5;
  const std::vector<std::string> replanned = PlanFigureLines(p);
  ASSERT_EQ(replanned.size(), 7u);
  EXPECT_EQ(replanned[6],
            "re-planned on evidence: predicted times x1 collectives, x12.5 PS (an earlier "
            "attempt's measured over predicted)");
  // A sync plan that knows its ranks' wait for the slowest one shows it, and
  // the wait it predicts with it.
  p.cost.ps_time_scale = 1;
  p.cost.sync_straggler_s = 0.0125;
  p.figures.straggler = "measured by job 3 over 40 steps, 2 workers on 2 hosts, at X";
  const std::vector<std::string> waiting = PlanFigureLines(p);
  ASSERT_EQ(waiting.size(), 8u);
  EXPECT_EQ(waiting[5], "sync wait for the slowest rank 12.5 ms (measured by job 3 over 40 "
                        "steps, 2 workers on 2 hosts, at X)");
  EXPECT_EQ(waiting[7], "predicted wait 52.8 ms per step (with the slowest rank's)");
}

}  // namespace
}  // namespace parallax::plan
