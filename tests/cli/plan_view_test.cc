#include "cli/plan_view.h"

#include <gtest/gtest.h>

#include "core/plan/job_plan.h"

namespace parallax::cli {
namespace {

TEST(PlanViewTest, OneRowPerVariableWithPartitionsAndReason) {
  plan::JobPlan p;
  plan::PlannedVariable emb;
  emb.id = 0;
  emb.name = "emb";
  emb.sparse = true;
  emb.rows = 50000;
  emb.dim = 128;
  emb.path = VariablePath::kPs;
  emb.density = 0.0125;
  emb.reason = "α = 0.0125: ps puts 2 MB";
  plan::PlannedVariable w;
  w.id = 1;
  w.name = "w";
  w.size = 4096;
  w.rows = 4;
  w.dim = 1024;
  w.reason = "dense";
  p.variables = {emb, w};
  ps::VariableSpec spec;
  spec.name = "emb";
  spec.rows = 50000;
  spec.dim = 128;
  spec.partitions = 4;
  spec.partition_shards = {0, 0, 0, 0};
  p.ps.variables = {spec};
  auto rows = PlanTableRows(plan::JobPlanToJson(p));
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[1], (std::vector<std::string>{"emb", "50000x128", "0.0125", "ps", "4",
                                                   "α = 0.0125: ps puts 2 MB"}));
  EXPECT_EQ((*rows)[2], (std::vector<std::string>{"w", "4096", "dense", "allreduce", "-", "dense"}));
}

TEST(PlanViewTest, NotAPlanIsAnError) {
  EXPECT_EQ(PlanTableRows("{").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanTableRows("{\"arch\": \"hybrid\"}").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::cli
