// StatsReporter against a fake coordinator served on loopback: what a shard
// sends with ReportShardStats, and when it stops sending.
#include "ps/stats_reporter.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "core/rpc/thrift_server.h"
#include "schemas/Coordinator.h"
#include "schemas/coordinator_constants.h"

namespace parallax::ps {
namespace {

// Answers Hello and keeps every ShardStatsReport.
class FakeCoordinator : public rpc::CoordinatorNull {
 public:
  void Hello(rpc::HelloResponse& out, const rpc::RequestHeader&) override {
    out.protocol_version = rpc::g_coordinator_constants.PROTOCOL_VERSION;
    out.server_version = "test";
  }
  void ReportShardStats(const rpc::RequestHeader& header,
                        const rpc::ShardStatsReport& report) override {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_.push_back(header.auth_token);
    reports_.push_back(report);
    cv_.notify_all();
  }
  // Waits until `n` reports arrived; false after 20 s.
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return reports_.size() >= n; });
  }
  std::vector<rpc::ShardStatsReport> reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }
  std::vector<std::string> tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<rpc::ShardStatsReport> reports_;
  std::vector<std::string> tokens_;
};

class StatsReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_shared<FakeCoordinator>();
    auto server = StartThriftServer(ThriftServerOptions{},
                                    std::make_shared<rpc::CoordinatorProcessor>(fake_));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    CoordinatorClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(server_->port());
    o.auth_token = "the-secret";
    auto client = CoordinatorClient::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  static ShardSnapshot Snapshot() {
    ShardSnapshot s;
    s.stats.pulls = 7;
    s.stats.pushes = 5;
    s.stats.push_pulls = 3;
    s.stats.clocks = 2;
    s.stats.rows_pulled = 70;
    s.stats.rows_pushed = 50;
    s.stats.errors = 1;
    s.stats.staleness[0] = 4;
    s.stats.staleness[3] = 1;
    s.stats.staleness_sum = 5;
    s.rows_held = 42;
    DynamicTableStats users;
    users.rows = 40;
    users.admitted = 44;
    users.evicted_budget = 4;
    users.bytes = 4096;
    s.dynamic_tables = {{"users", users}};
    return s;
  }

  std::shared_ptr<FakeCoordinator> fake_;
  std::unique_ptr<ThriftServer> server_;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(StatsReporterTest, SendsTheShardsCountersWithTheSecret) {
  StatsReporter reporter(
      {7, 2, 1, 60'000}, [] { return Snapshot(); }, client_.get());
  ASSERT_TRUE(reporter.ReportOnce().ok());
  ASSERT_EQ(fake_->reports().size(), 1u);
  const rpc::ShardStatsReport r = fake_->reports()[0];
  EXPECT_EQ(r.job_id, 7);
  EXPECT_EQ(r.attempt, 2);
  EXPECT_EQ(r.shard, 1);
  EXPECT_EQ(r.pulls, 7);
  EXPECT_EQ(r.pushes, 5);
  EXPECT_EQ(r.push_pulls, 3);
  EXPECT_EQ(r.clocks, 2);
  EXPECT_EQ(r.rows_pulled, 70);
  EXPECT_EQ(r.rows_pushed, 50);
  EXPECT_EQ(r.errors, 1);
  EXPECT_EQ(r.rows_held, 42);
  ASSERT_EQ(r.staleness_buckets.size(), 16u);
  EXPECT_EQ(r.staleness_buckets[0], 4);
  EXPECT_EQ(r.staleness_buckets[3], 1);
  EXPECT_EQ(r.staleness_sum, 5);
  ASSERT_EQ(r.dynamic_tables.size(), 1u);  // over the wire (Thrift), a dynamic table's counters
  EXPECT_EQ(r.dynamic_tables[0].name, "users");
  EXPECT_EQ(r.dynamic_tables[0].rows, 40);
  EXPECT_EQ(r.dynamic_tables[0].admitted, 44);
  EXPECT_EQ(r.dynamic_tables[0].evicted_budget, 4);
  EXPECT_EQ(r.dynamic_tables[0].bytes, 4096);
  EXPECT_EQ(fake_->tokens()[0], "the-secret");
}

TEST_F(StatsReporterTest, ThreadReportsAtOnceAndEveryInterval) {
  int calls = 0;
  std::mutex mu;
  StatsReporter reporter(
      {7, 1, 0, 20},
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        ShardSnapshot s = Snapshot();
        s.stats.pulls = ++calls;  // a counter that grows between reports
        return s;
      },
      client_.get());
  reporter.Start();
  ASSERT_TRUE(fake_->WaitFor(3));
  reporter.Stop();
  const auto reports = fake_->reports();
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(reports[i].pulls, static_cast<int64_t>(i + 1));
}

TEST(StatsReporterPolicyTest, KeepsTryingOnlyWhileTheCoordinatorIsAway) {
  EXPECT_TRUE(KeepsReportingAfter(Status::Ok()));
  EXPECT_TRUE(KeepsReportingAfter(Unavailable("connection refused")));
  EXPECT_TRUE(KeepsReportingAfter(Aborted("database locked")));
  EXPECT_FALSE(KeepsReportingAfter(FailedPrecondition("attempt 1 of job 7 is over")));
  EXPECT_FALSE(KeepsReportingAfter(PermissionDenied("authentication failed")));
  EXPECT_FALSE(KeepsReportingAfter(Internal("Invalid method name: 'ReportShardStats'")));
}

}  // namespace
}  // namespace parallax::ps
