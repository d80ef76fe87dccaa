// /metrics pieces: the text format writer, the figures of a job's points,
// the per-method call histograms and the PS shards' board.
#include "coordinator/web/http_metrics.h"

#include <gtest/gtest.h>

#include "coordinator/service/rpc_stats.h"
#include "coordinator/service/server.h"
#include "coordinator/service/service.h"
#include "coordinator/service/shard_stats.h"
#include "core/rpc/coordinator_client.h"
#include "tests/coordinator/sqlite_service.h"

namespace parallax::coordinator {
namespace {

MetricRecord Point(int attempt, int rank, int64_t step, double loss, double throughput,
                   int64_t time) {
  MetricRecord p;
  p.job_id = 1;
  p.attempt = attempt;
  p.rank = rank;
  p.step = step;
  p.loss = loss;
  p.throughput = throughput;
  p.time = time;
  return p;
}

TEST(PrometheusTextTest, EscapesLabelValuesAndHelp) {
  PrometheusText out;
  out.Family("x_total", "counter", "a \\ help\nline");
  out.Sample("x_total", {{"name", "a\"b\\c\nd"}, {"k", "v"}}, 3);
  EXPECT_EQ(out.text(),
            "# HELP x_total a \\\\ help\\nline\n# TYPE x_total counter\n"
            "x_total{name=\"a\\\"b\\\\c\\nd\",k=\"v\"} 3\n");
}

TEST(PrometheusTextTest, HistogramBucketsAreCumulativeWithInf) {
  PrometheusText out;
  out.Histogram("h", {{"m", "x"}}, {0.5, 1}, {2, 0, 3}, 4.25);
  EXPECT_EQ(out.text(),
            "h_bucket{m=\"x\",le=\"0.5\"} 2\nh_bucket{m=\"x\",le=\"1\"} 2\n"
            "h_bucket{m=\"x\",le=\"+Inf\"} 5\nh_sum{m=\"x\"} 4.25\nh_count{m=\"x\"} 5\n");
}

TEST(JobFiguresTest, NewestPointPerRankOfTheAttempt) {
  std::vector<MetricRecord> points = {
      Point(1, 0, 10, 9, 50, 1'000),  Point(1, 1, 10, 8, 60, 1'000),
      Point(2, 0, 20, 7, 100, 5'000), Point(2, 1, 20, 6, 120, 5'000),
      Point(2, 0, 40, 3, 110, 7'000),  // rank 1 has not reported step 40 yet
  };
  JobFigures f = SummarizeJob(points, 2);
  ASSERT_TRUE(f.has_points);
  EXPECT_EQ(f.ranks, 2);
  EXPECT_EQ(f.step, 40);
  EXPECT_DOUBLE_EQ(f.loss, (3 + 6) / 2.0);
  EXPECT_DOUBLE_EQ(f.samples_per_second, 110 + 120);
  EXPECT_DOUBLE_EQ(f.steps_per_second, (40 - 20) / 2.0);  // rank 0, from 5 s to 7 s
  EXPECT_FALSE(SummarizeJob(points, 3).has_points);
}

TEST(JobFiguresTest, CurvesPreferTheNewestAttemptAndThin) {
  std::vector<MetricRecord> points = {
      Point(1, 0, 10, 9, 50, 0), Point(1, 1, 10, 7, 70, 0),
      Point(1, 0, 20, 5, 50, 0),                              // step 20 of attempt 1...
      Point(2, 0, 20, 4, 80, 0), Point(2, 1, 20, 2, 100, 0),  // ...replaced by attempt 2
  };
  auto loss = LossCurve(points, 0);
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_DOUBLE_EQ(loss[0].value, 8);
  EXPECT_DOUBLE_EQ(loss[1].value, 3);
  auto throughput = ThroughputCurve(points, 2, 0);
  EXPECT_DOUBLE_EQ(throughput[0].value, 120);  // mean 60 × 2 ranks
  EXPECT_DOUBLE_EQ(throughput[1].value, 180);
  std::vector<MetricRecord> many;
  for (int s = 1; s <= 1000; ++s) many.push_back(Point(1, 0, s, s, 1, 0));
  auto thin = LossCurve(many, 100);
  ASSERT_EQ(thin.size(), 100u);
  EXPECT_DOUBLE_EQ(thin[0].step, 5.5);  // the mean of steps 1..10
  EXPECT_DOUBLE_EQ(thin[0].value, 5.5);
}

TEST(ShardStatsBoardTest, KeepsTheNewestAttemptAndOnlyLiveJobs) {
  ShardStatsBoard board;
  rpc::ShardStatsReport r;
  r.job_id = 5;
  r.attempt = 2;
  r.shard = 1;
  r.pulls = 10;
  board.Record(r);
  r.attempt = 1;  // a late report of an older attempt
  r.pulls = 99;
  board.Record(r);
  ASSERT_EQ(board.OfJob(5).size(), 1u);
  EXPECT_EQ(board.OfJob(5)[0].pulls, 10);
  r.job_id = 6;
  board.Record(r);
  auto live = board.TakeLive({6});
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].job_id, 6);
  EXPECT_TRUE(board.OfJob(5).empty());  // job 5 ended: dropped
  r.pulls = -1;
  EXPECT_EQ(ShardStatsBoard::Validate(r).code(), StatusCode::kInvalidArgument);
  r.pulls = 0;
  r.staleness_buckets.assign(65, 0);
  EXPECT_EQ(ShardStatsBoard::Validate(r).code(), StatusCode::kInvalidArgument);
  r.staleness_buckets.clear();
  rpc::DynamicTableReport table;
  table.name = "users";
  table.rows = 4;
  r.__set_dynamic_tables({table});
  EXPECT_TRUE(ShardStatsBoard::Validate(r).ok());
  r.dynamic_tables[0].evicted_budget = -2;
  Status bad = ShardStatsBoard::Validate(r);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("\"users\": evicted_budget is negative"), std::string::npos)
      << bad.message();
}

// Calls served over the real Thrift server are counted by method.
TEST(RpcStatsTest, CountsAndTimesEveryCallByMethod) {
  testing::SqliteService db;
  ASSERT_TRUE(db.Open().ok());
  RpcStats stats;
  auto server = StartServer(ServerOptions{}, db.service, &stats);
  ASSERT_TRUE(server.ok());
  CoordinatorClientOptions copts;
  copts.address = "127.0.0.1:" + std::to_string((*server)->port());
  auto client = CoordinatorClient::Connect(copts);  // Hello
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*client)->Heartbeat("nobody").ok());
  EXPECT_EQ((*client)->GetJob(42).status().code(), StatusCode::kNotFound);  // counted too
  std::map<std::string, RpcStats::Method> by_name;
  for (const auto& m : stats.Snapshot()) by_name[m.name] = m;
  EXPECT_EQ(by_name["Hello"].count, 1);
  EXPECT_EQ(by_name["Heartbeat"].count, 3);
  EXPECT_EQ(by_name["GetJob"].count, 1);
  int64_t in_buckets = 0;
  for (int64_t b : by_name["Heartbeat"].buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, 3);
  EXPECT_GT(by_name["Heartbeat"].sum_seconds, 0);
  db.service->Stop();
  (*server)->Stop();
}

}  // namespace
}  // namespace parallax::coordinator
