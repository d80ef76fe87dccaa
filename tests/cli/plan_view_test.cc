#include "cli/plan_view.h"

#include <gtest/gtest.h>

namespace parallax::cli {
namespace {

TEST(PlanViewTest, OneRowPerVariableWithPartitionsAndReason) {
  const std::string plan = R"({"version": 1, "arch": "hybrid", "variables": [
      {"id": 0, "name": "emb", "kind": "sparse", "rows": 50000, "dim": 128, "path": "ps",
       "density": 0.0125, "reason": "α = 0.0125: ps puts 2 MB"},
      {"id": 1, "name": "w", "kind": "dense", "size": 4096, "path": "allreduce",
       "density": -1, "reason": "dense"}],
    "ps": {"variables": [{"id": 0, "name": "emb", "rows": 50000, "dim": 128, "partitions": 4}]}})";
  auto rows = PlanTableRows(plan);
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
