// Bytes per path counted at the collective seam, and per-step averages.
#include "trainer/step_metrics.h"

#include <gtest/gtest.h>

#include <thread>

namespace parallax::trainer {
namespace {

// A one-rank-of-`world` communicator that moves nothing.
class NullCommunicator final : public comm::Communicator {
 public:
  explicit NullCommunicator(int world) : world_(world) {}
  int rank() const override { return 1; }
  int world_size() const override { return world_; }
  comm::Backend backend() const override { return comm::Backend::kGloo; }
  bool Supports(comm::DataType) const override { return true; }
  Status AllReduce(void*, size_t, comm::DataType, comm::ReduceOp, comm::Deadline) override {
    return fail_ ? Unavailable("peer gone") : Status::Ok();
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
  bool fail_ = false;

 private:
  int world_;
};

TEST(StepMetricsTest, CountsTheBuffersHandedToEachCollective) {
  CollectiveBytes bytes;
  auto inner = std::make_unique<NullCommunicator>(3);
  NullCommunicator* raw = inner.get();
  auto comm = CountingCommunicator(std::move(inner), &bytes);
  const auto deadline = comm::DeadlineAfter(std::chrono::seconds(1));
  std::vector<float> data(10);
  ASSERT_TRUE(comm->AllReduce(data, comm::ReduceOp::kMean, deadline).ok());
  EXPECT_EQ(bytes.allreduce_sent, 40);
  EXPECT_EQ(bytes.allreduce_received, 40);
  // All-gather: this rank's part sent, everyone's received.
  std::vector<int32_t> in(2), out(6);
  ASSERT_TRUE(comm->AllGather(in.data(), 2, comm::DataType::kInt32, out.data(), deadline).ok());
  EXPECT_EQ(bytes.allgather_sent, 8);
  EXPECT_EQ(bytes.allgather_received, 24);
  std::vector<float> vout(9);
  ASSERT_TRUE(
      comm->AllGatherv(data.data(), {1, 5, 3}, comm::DataType::kFloat32, vout.data(), deadline)
          .ok());
  EXPECT_EQ(bytes.allgather_sent, 8 + 20);  // rank 1 sends its 5 floats
  EXPECT_EQ(bytes.allgather_received, 24 + 36);
  ASSERT_TRUE(comm->Broadcast(data, 0, deadline).ok());
  EXPECT_EQ(bytes.allreduce_sent, 40);  // broadcasts are not all-reduce
  // A failed all-reduce received nothing.
  raw->fail_ = true;
  EXPECT_FALSE(comm->AllReduce(data, comm::ReduceOp::kMean, deadline).ok());
  EXPECT_EQ(bytes.allreduce_sent, 80);
  EXPECT_EQ(bytes.allreduce_received, 40);
}

TEST(StepMetricsTest, TakeAveragesPerStepAndStartsANewInterval) {
  CollectiveBytes bytes;
  StepMetrics m;
  const auto t0 = StepMetrics::Clock::now();
  bytes.allreduce_sent += 100;
  m.AddDenseWait(std::chrono::milliseconds(4));
  m.AddSparseWait(std::chrono::milliseconds(2));
  m.EndStep(t0, t0 + std::chrono::milliseconds(10));
  bytes.allreduce_sent += 300;
  m.EndStep(t0 + std::chrono::milliseconds(10), t0 + std::chrono::milliseconds(20));
  auto v = m.Take(bytes, nullptr);
  EXPECT_EQ(v["steps"], 2);
  EXPECT_EQ(v["allreduce_sent_bytes"], 200);
  EXPECT_DOUBLE_EQ(v["dense_wait_ms"], 2);
  EXPECT_DOUBLE_EQ(v["sparse_wait_ms"], 1);
  EXPECT_DOUBLE_EQ(v["compute_ms"], (4 + 10) / 2.0);
  EXPECT_EQ(v["ps_push_sent_bytes"], 0);
  bytes.allreduce_sent += 50;
  m.EndStep(t0, t0);
  v = m.Take(bytes, nullptr);
  EXPECT_EQ(v["steps"], 1);
  EXPECT_EQ(v["allreduce_sent_bytes"], 50);
}

}  // namespace
}  // namespace parallax::trainer
