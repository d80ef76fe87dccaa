// `parallax status JOB --json --points` (cli/job_metrics.h): every point of
// the job's current attempt, in the order the coordinator gives them.
#include "cli/job_metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "schemas/coordinator_types.h"

namespace parallax::cli {
namespace {

rpc::MetricPoint Point(int attempt, int rank, int64_t step, double loss) {
  rpc::MetricPoint p;
  p.job_id = 7;
  p.attempt = attempt;
  p.rank = rank;
  p.step = step;
  p.loss = loss;
  p.throughput = 100.0 * (rank + 1);
  p.__set_values({{"compute_ms", 2.5}, {"ps_push_sent_bytes", 4096.0}});
  return p;
}

TEST(AttemptPointsJsonTest, KeepsEveryPointOfTheAttemptInOrder) {
  // Attempt 1 ran to step 1 before the job restarted; attempt 2 went on.
  const std::vector<rpc::MetricPoint> points = {
      Point(1, 0, 0, 9.0), Point(1, 1, 0, 8.0), Point(2, 0, 0, 7.0), Point(2, 1, 0, 6.5),
      Point(1, 0, 1, 5.0), Point(2, 0, 1, 6.0), Point(2, 1, 1, 5.5)};
  const nlohmann::json out = nlohmann::json::parse(AttemptPointsJson(points, 2));
  ASSERT_EQ(out.size(), 4u);
  const std::vector<std::pair<int, int64_t>> order = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(out[i]["rank"], order[i].first) << i;
    EXPECT_EQ(out[i]["step"], order[i].second) << i;
  }
  EXPECT_DOUBLE_EQ(out[3]["loss"].get<double>(), 5.5);
  EXPECT_DOUBLE_EQ(out[3]["throughput"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(out[3]["values"]["compute_ms"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(out[3]["values"]["ps_push_sent_bytes"].get<double>(), 4096.0);
}

TEST(AttemptPointsJsonTest, APointWithoutValuesHasAnEmptyObject) {
  rpc::MetricPoint p = Point(1, 0, 3, 1.0);
  p.values.clear();
  p.__isset.values = false;
  const nlohmann::json out = nlohmann::json::parse(AttemptPointsJson({p}, 1));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0]["values"].is_object());
  EXPECT_TRUE(out[0]["values"].empty());
}

TEST(AttemptPointsJsonTest, NoPointOfTheAttemptIsAnEmptyArray) {
  EXPECT_EQ(AttemptPointsJson({Point(1, 0, 0, 1.0)}, 2), "[]");
}

rpc::DynamicTableReport Table(const std::string& name, int64_t base) {
  rpc::DynamicTableReport t;
  t.name = name;
  t.rows = base;
  t.admitted = base + 1;
  t.not_admitted_reads = base + 2;
  t.dropped_gradients = base + 3;
  t.evicted_ttl = base + 4;
  t.evicted_budget = base + 5;
  t.bytes = base + 6;
  return t;
}

// `parallax status JOB --json`'s "dynamic_tables": per table the shards'
// counters summed, and each shard's.
TEST(DynamicTablesJsonTest, SumsEachTableOverItsShards) {
  rpc::ShardStatsReport a, b, c;
  a.shard = 0;
  a.__set_dynamic_tables({Table("users", 10), Table("items", 100)});
  b.shard = 1;
  b.__set_dynamic_tables({Table("users", 20)});
  c.shard = 2;  // holds no dynamic table
  const nlohmann::json out = nlohmann::json::parse(DynamicTablesJson({a, b, c}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out["users"]["rows"], 30);
  EXPECT_EQ(out["users"]["admitted"], 32);
  EXPECT_EQ(out["users"]["not_admitted_reads"], 34);
  EXPECT_EQ(out["users"]["dropped_gradients"], 36);
  EXPECT_EQ(out["users"]["evicted_ttl"], 38);
  EXPECT_EQ(out["users"]["evicted_budget"], 40);
  EXPECT_EQ(out["users"]["bytes"], 42);
  ASSERT_EQ(out["users"]["shards"].size(), 2u);
  EXPECT_EQ(out["users"]["shards"][1]["shard"], 1);
  EXPECT_EQ(out["users"]["shards"][1]["rows"], 20);
  EXPECT_EQ(out["items"]["evicted_budget"], 105);
  EXPECT_EQ(DynamicTablesJson({c}), "{}");
}

}  // namespace
}  // namespace parallax::cli
