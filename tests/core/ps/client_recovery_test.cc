// PsClient's recovery of a lost shard (PsClientOptions::resolve_shard)
// against fake shards on loopback TCP: a shard "dies" when the test closes
// its socket, and its next generation is whatever the test publishes to the
// fake resolver. No sleeps: every wait is on a message or a condition.
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/ps/client.h"
#include "core/ps/plan.h"
#include "core/ps/wire.h"
#include "tests/core/ps/fake_shard.h"

namespace parallax::ps {
namespace {

// The coordinator's key-value store as the client sees it: generations the
// test publishes, and every question asked.
class FakeResolver {
 public:
  void Publish(uint32_t shard, ShardAddress address) {
    std::lock_guard<std::mutex> lock(mu_);
    published_[{shard, address.generation}] = std::move(address);
    cv_.notify_all();
  }
  // Every later question gets `status` (not DEADLINE_EXCEEDED: a final answer).
  void Refuse(Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    refusal_ = std::move(status);
    cv_.notify_all();
  }
  StatusOr<ShardAddress> Resolve(uint32_t shard, uint32_t generation, Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    asked_.push_back({shard, generation});
    const auto key = std::make_pair(shard, generation);
    if (!cv_.wait_until(lock, deadline,
                        [&] { return published_.count(key) > 0 || !refusal_.ok(); })) {
      return DeadlineExceeded("generation " + std::to_string(generation) + " not published");
    }
    if (published_.count(key) > 0) return published_[key];
    return refusal_;
  }
  std::vector<std::pair<uint32_t, uint32_t>> asked() {
    std::lock_guard<std::mutex> lock(mu_);
    return asked_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<uint32_t, uint32_t>, ShardAddress> published_;
  Status refusal_;
  std::vector<std::pair<uint32_t, uint32_t>> asked_;
};

class PsClientRecoveryTest : public ::testing::Test {
 protected:
  // Two shards, one partition each (ids 0..499 on shard 0, 500..999 on 1),
  // both at generation 1.
  void Start(int64_t recovery_timeout_ms = 60000) {
    PsPlan plan;
    plan.consistency = Consistency::kAsync;
    plan.num_shards = 2;
    VariableSpec v;
    v.id = 0;
    v.name = "emb";
    v.rows = 1000;
    v.dim = kDim;
    v.partitions = 2;
    v.scheme = PartitionScheme::kRange;
    v.partition_shards = {0, 1};
    plan.variables.push_back(v);
    PsClientOptions options;
    options.plan = plan;
    options.attempt = 1;
    options.shard_generations = {1, 1};
    options.resolve_shard = [this](uint32_t shard, uint32_t generation, Deadline deadline) {
      return resolver_.Resolve(shard, generation, deadline);
    };
    options.shard_recovery_timeout_ms = recovery_timeout_ms;
    for (int s = 0; s < 2; ++s) {
      shards_.push_back(std::make_unique<FakeShard>(&ctx_));
      options.shard_endpoints.push_back(shards_.back()->endpoint());
    }
    auto c = PsClient::Create(options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }

  static constexpr uint32_t kDim = 2;
  zmq::context_t ctx_{1};
  FakeResolver resolver_;
  std::vector<std::unique_ptr<FakeShard>> shards_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(PsClientRecoveryTest, UnansweredPushAndPullGoToTheShardsNextGeneration) {
  Start();
  const std::vector<int64_t> push_ids = {600, 601};
  const std::vector<float> grads = {1, 2, 3, 4};
  auto push = client_->Push(0, push_ids, grads, 7);
  ASSERT_TRUE(push.ok());
  std::vector<float> rows;
  const std::vector<int64_t> pull_ids = {700};
  auto pull = client_->Pull(0, pull_ids, 8, &rows);
  ASSERT_TRUE(pull.ok());
  auto got_push = shards_[1]->Receive();
  auto got_pull = shards_[1]->Receive();
  ASSERT_TRUE(got_push && got_pull);
  EXPECT_EQ(got_push->header.generation, 1u);
  // Shard 1 dies without answering either.
  shards_[1].reset();
  // Shard 0 keeps serving meanwhile.
  std::vector<float> rows0;
  const std::vector<int64_t> ids0 = {10};
  auto pull0 = client_->Pull(0, ids0, 8, &rows0);
  ASSERT_TRUE(pull0.ok());
  auto got0 = shards_[0]->Receive();
  ASSERT_TRUE(got0);
  shards_[0]->Answer(*got0, kDim);
  ASSERT_TRUE(client_->Wait(*pull0, DeadlineIn(10000)).ok());
  EXPECT_EQ(rows0, std::vector<float>(kDim, 10.5f));
  EXPECT_EQ(client_->Wait(*push, DeadlineIn(0)).code(), StatusCode::kDeadlineExceeded);
  // Its generation 2 comes up elsewhere; the held requests reach it, in order.
  auto next = std::make_unique<FakeShard>(&ctx_);
  resolver_.Publish(1, {next->endpoint(), "", 2});
  auto again_push = next->Receive(10000);
  auto again_pull = next->Receive(10000);
  ASSERT_TRUE(again_push && again_pull);
  EXPECT_EQ(again_push->header.op, static_cast<uint8_t>(Op::kPush));
  EXPECT_EQ(again_push->header.generation, 2u);
  EXPECT_EQ(again_push->header.request_id, got_push->header.request_id);
  EXPECT_EQ(again_push->ids, got_push->ids);
  EXPECT_EQ(again_push->values, got_push->values);
  EXPECT_EQ(again_pull->header.op, static_cast<uint8_t>(Op::kPull));
  EXPECT_EQ(again_pull->header.generation, 2u);
  next->Answer(*again_push, kDim);
  next->Answer(*again_pull, kDim);
  EXPECT_TRUE(client_->Wait(*push, DeadlineIn(10000)).ok());
  EXPECT_TRUE(client_->Wait(*pull, DeadlineIn(10000)).ok());
  EXPECT_EQ(rows, std::vector<float>(kDim, 700.5f));
  // Later requests go to generation 2 directly.
  auto later = client_->Push(0, push_ids, grads, 9);
  ASSERT_TRUE(later.ok());
  auto got_later = next->Receive(10000);
  ASSERT_TRUE(got_later);
  EXPECT_EQ(got_later->header.generation, 2u);
  next->Answer(*got_later, kDim);
  EXPECT_TRUE(client_->Wait(*later, DeadlineIn(10000)).ok());
  const auto asked = resolver_.asked();
  ASSERT_FALSE(asked.empty());
  for (const auto& [shard, generation] : asked) {
    EXPECT_EQ(shard, 1u);
    EXPECT_EQ(generation, 2u);
  }
}

TEST_F(PsClientRecoveryTest, StaleGenerationAnswerSendsTheRequestToTheNextGeneration) {
  Start();
  auto next = std::make_unique<FakeShard>(&ctx_);
  resolver_.Publish(0, {next->endpoint(), "", 2});
  const std::vector<int64_t> ids = {3};
  const std::vector<float> grads = {1, 1};
  auto push = client_->Push(0, ids, grads, 1);
  ASSERT_TRUE(push.ok());
  auto got = shards_[0]->Receive();
  ASSERT_TRUE(got);
  shards_[0]->AnswerError(*got, ErrorCode::kStaleGeneration, "this process serves generation 2");
  auto again = next->Receive(10000);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->header.generation, 2u);
  EXPECT_EQ(again->ids, ids);
  next->Answer(*again, kDim);
  EXPECT_TRUE(client_->Wait(*push, DeadlineIn(10000)).ok());
}

TEST_F(PsClientRecoveryTest, ShardThatDoesNotComeBackFailsItsRequestsWithUnavailable) {
  Start();
  const std::vector<int64_t> ids = {3};
  const std::vector<float> grads = {1, 1};
  auto push = client_->Push(0, ids, grads, 1);
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE(shards_[0]->Receive());
  resolver_.Refuse(FailedPrecondition("the job is over"));
  shards_[0].reset();
  Status s = client_->Wait(*push, DeadlineIn(10000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("PS shard 0"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("the job is over"), std::string::npos) << s.ToString();
  // Later requests to it fail at once; the other shard still serves.
  auto later = client_->Push(0, ids, grads, 2);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(client_->Wait(*later, DeadlineIn(10000)).code(), StatusCode::kUnavailable);
}

TEST_F(PsClientRecoveryTest, RecoveryDeadlineEndsTheWait) {
  Start(/*recovery_timeout_ms=*/50);
  const std::vector<int64_t> ids = {3};
  const std::vector<float> grads = {1, 1};
  auto push = client_->Push(0, ids, grads, 1);
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE(shards_[0]->Receive());
  shards_[0].reset();  // and no generation 2 is ever published
  Status s = client_->Wait(*push, DeadlineIn(10000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("within 50 ms"), std::string::npos) << s.ToString();
}

TEST_F(PsClientRecoveryTest, SharedMemoryAndRecoveryAreRefusedTogether) {
  PsPlan plan;
  plan.num_shards = 1;
  PsClientOptions options;
  options.plan = plan;
  options.shard_endpoints = {"tcp://127.0.0.1:1"};
  options.shared_memory = true;
  options.resolve_shard = [](uint32_t, uint32_t, Deadline) -> StatusOr<ShardAddress> {
    return NotFound("none");
  };
  auto c = PsClient::Create(options);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::ps
