// Bytes per path from the communicator's wire counters, and per-step averages.
#include "trainer/step_metrics.h"

#include <gtest/gtest.h>

#include <thread>

namespace parallax::trainer {
namespace {

// A communicator whose wire counters the test sets.
class FakeCommunicator final : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  comm::Backend backend() const override { return comm::Backend::kGloo; }
  bool Supports(comm::DataType) const override { return true; }
  Status AllReduce(void*, size_t, comm::DataType, comm::ReduceOp, comm::Deadline) override {
    return Status::Ok();
  }
  Status Broadcast(void*, size_t, comm::DataType, int, comm::Deadline) override {
    return Status::Ok();
  }
  Status AllGather(const void*, size_t, comm::DataType, void*, comm::Deadline) override {
    return Status::Ok();
  }
  Status AllGatherv(const void*, const std::vector<size_t>&, comm::DataType, void*,
                    comm::Deadline) override {
    return Status::Ok();
  }
  Status Barrier(comm::Deadline) override { return Status::Ok(); }
  comm::WireCounters wire_bytes() const override { return counters; }
  comm::WireCounters counters;
};

TEST(StepMetricsTest, BytesByPathAreTheCommunicatorsWireCounters) {
  FakeCommunicator comm;
  StepMetrics m;
  const auto t0 = StepMetrics::Clock::now();
  comm.counters.allreduce = {1000, 900};
  comm.counters.allgather = {70, 50};
  comm.counters.other = {5000, 5000};  // broadcasts and barriers are no path
  m.EndStep(t0, t0);
  m.EndStep(t0, t0);
  auto v = m.Take(&comm, nullptr);
  EXPECT_EQ(v["allreduce_sent_bytes"], 500);
  EXPECT_EQ(v["allreduce_recv_bytes"], 450);
  EXPECT_EQ(v["allgather_sent_bytes"], 35);
  EXPECT_EQ(v["allgather_recv_bytes"], 25);
  comm.counters.allreduce = {1400, 1300};
  m.EndStep(t0, t0);
  v = m.Take(&comm, nullptr);
  EXPECT_EQ(v["allreduce_sent_bytes"], 400);  // since the last Take()
  EXPECT_EQ(v["allgather_sent_bytes"], 0);
  StepMetrics alone;  // no communicator: one process
  alone.EndStep(t0, t0);
  EXPECT_EQ(alone.Take(nullptr, nullptr)["allreduce_sent_bytes"], 0);
}

// A point of several steps carries the mean loss of its steps: its own
// `loss` is only the last step's, a noisy figure to compare runs by.
TEST(StepMetricsTest, LossMeanIsTheMeanOfTheIntervalsLosses) {
  StepMetrics m;
  const auto t0 = StepMetrics::Clock::now();
  for (double loss : {4.0, 5.0, 9.0}) {
    m.AddLoss(loss);
    m.EndStep(t0, t0);
  }
  auto v = m.Take(nullptr, nullptr);
  EXPECT_DOUBLE_EQ(v["loss_mean"], 6.0);
  EXPECT_EQ(v["steps"], 3);
  m.AddLoss(2.0);
  m.EndStep(t0, t0);
  EXPECT_DOUBLE_EQ(m.Take(nullptr, nullptr)["loss_mean"], 2.0);  // since the last Take()
  m.EndStep(t0, t0);  // a step no loss was reported for
  EXPECT_EQ(m.Take(nullptr, nullptr).count("loss_mean"), 0u);
}

TEST(StepMetricsTest, TheHostsExchangeIsLocalAggregationNotAllGather) {
  FakeCommunicator comm, host;
  StepMetrics m;
  const auto t0 = StepMetrics::Clock::now();
  comm.counters.allgather = {70, 50};
  host.counters.allgather = {600, 400};
  m.EndStep(t0, t0);
  m.EndStep(t0, t0);
  auto v = m.Take(&comm, nullptr, &host);
  EXPECT_EQ(v["allgather_sent_bytes"], 35);
  EXPECT_EQ(v["allgather_recv_bytes"], 25);
  EXPECT_EQ(v["local_agg_sent_bytes"], 300);
  EXPECT_EQ(v["local_agg_recv_bytes"], 200);
  EXPECT_EQ(m.Take(&comm, nullptr)["local_agg_sent_bytes"], 0);
}

TEST(StepMetricsTest, TakeAveragesPerStepAndStartsANewInterval) {
  FakeCommunicator comm;
  StepMetrics m;
  const auto t0 = StepMetrics::Clock::now();
  comm.counters.allreduce.sent += 100;
  m.AddDenseWait(std::chrono::milliseconds(4));
  m.AddSparseWait(std::chrono::milliseconds(2));
  m.EndStep(t0, t0 + std::chrono::milliseconds(10));
  comm.counters.allreduce.sent += 300;
  m.EndStep(t0 + std::chrono::milliseconds(10), t0 + std::chrono::milliseconds(20));
  auto v = m.Take(&comm, nullptr);
  EXPECT_EQ(v["steps"], 2);
  EXPECT_EQ(v["allreduce_sent_bytes"], 200);
  EXPECT_DOUBLE_EQ(v["dense_wait_ms"], 2);
  EXPECT_DOUBLE_EQ(v["sparse_wait_ms"], 1);
  EXPECT_DOUBLE_EQ(v["compute_ms"], (4 + 10) / 2.0);
  EXPECT_EQ(v["ps_push_sent_bytes"], 0);
  comm.counters.allreduce.sent += 50;
  m.EndStep(t0, t0);
  v = m.Take(&comm, nullptr);
  EXPECT_EQ(v["steps"], 1);
  EXPECT_EQ(v["allreduce_sent_bytes"], 50);
}

// A source absent from one interval (no communicator or PS client passed)
// carried nothing then: its counters stay put, not a negative delta back to
// zero, and the next interval with it counts only its own bytes.
TEST(StepMetricsTest, AnIntervalWithoutASourceCountsNothingForIt) {
  FakeCommunicator comm;
  StepMetrics m;
  const auto t0 = StepMetrics::Clock::now();
  comm.counters.allreduce = {400, 300};
  m.EndStep(t0, t0);
  EXPECT_EQ(m.Take(&comm, nullptr)["allreduce_sent_bytes"], 400);
  m.EndStep(t0, t0);
  auto v = m.Take(nullptr, nullptr);
  EXPECT_EQ(v["allreduce_sent_bytes"], 0);
  EXPECT_EQ(v["allreduce_recv_bytes"], 0);
  comm.counters.allreduce = {450, 320};
  m.EndStep(t0, t0);
  v = m.Take(&comm, nullptr);
  EXPECT_EQ(v["allreduce_sent_bytes"], 50);
  EXPECT_EQ(v["allreduce_recv_bytes"], 20);
}

// Hot rows' counters are cumulative (SparseSync's, since the session
// started): Take reports each interval's per step, and nothing without them.
TEST(StepMetricsTest, HotRowCountsArePerStepOfTheInterval) {
  StepMetrics m;
  const auto t0 = StepMetrics::Clock::now();
  m.EndStep(t0, t0);
  EXPECT_EQ(m.Take(nullptr, nullptr).count("hot_row_hits"), 0u);
  m.SetHotRows(30, 90);
  m.EndStep(t0, t0);
  m.EndStep(t0, t0);
  auto v = m.Take(nullptr, nullptr);
  EXPECT_EQ(v["hot_row_hits"], 15);
  EXPECT_EQ(v["hot_row_misses"], 45);
  m.SetHotRows(40, 100);
  m.EndStep(t0, t0);
  v = m.Take(nullptr, nullptr);
  EXPECT_EQ(v["hot_row_hits"], 10);
  EXPECT_EQ(v["hot_row_misses"], 10);
}

}  // namespace
// A 3,000-step job reports every 10 steps (0 .. 2990) and its last step
// (2999) too, so the job's step and loss are its last, not 2990's.
TEST(MetricsReporterTest, TheLastStepAlwaysGetsAPoint) {
  const MetricsReporter reporter({.every = 10, .last_step = 2999}, nullptr);
  EXPECT_TRUE(reporter.Due(0));
  EXPECT_TRUE(reporter.Due(2990));
  EXPECT_FALSE(reporter.Due(2998));
  EXPECT_TRUE(reporter.Due(2999));
  const MetricsReporter unknown({.every = 10}, nullptr);
  EXPECT_FALSE(unknown.Due(2999));
}

}  // namespace parallax::trainer
