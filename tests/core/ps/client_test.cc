// PsClient against fake shards: ZeroMQ ROUTER sockets in the test that
// receive requests and answer only when the test says so.
#include "core/ps/client.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/ps/plan.h"
#include "core/ps/wire.h"
#include "tests/core/ps/fake_shard.h"

namespace parallax::ps {
namespace {

class PsClientTest : public ::testing::Test {
 protected:
  void Start(uint32_t shards, uint32_t partitions, Consistency mode = Consistency::kAsync) {
    PsPlan plan;
    plan.consistency = mode;
    plan.num_shards = shards;
    VariableSpec v;
    v.id = 0;
    v.name = "emb";
    v.rows = 1000;
    v.dim = kDim;
    v.partitions = partitions;
    v.scheme = PartitionScheme::kRange;
    for (uint32_t p = 0; p < partitions; ++p) v.partition_shards.push_back(p % shards);
    plan.variables.push_back(v);
    PsClientOptions options;
    options.plan = plan;
    options.worker = 2;
    options.on_complete = on_complete_;
    for (uint32_t s = 0; s < shards; ++s) {
      shards_.push_back(std::make_unique<FakeShard>(&ctx_));
      options.shard_endpoints.push_back(shards_.back()->endpoint());
    }
    auto c = PsClient::Create(options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }

  static constexpr uint32_t kDim = 3;
  std::function<void(const CompletedRequest&)> on_complete_;  // set before Start()
  zmq::context_t ctx_{1};
  std::vector<std::unique_ptr<FakeShard>> shards_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(PsClientTest, PullReturnsATicketAtOnceAndOnlyWaitBlocks) {
  Start(1, 1);
  std::vector<float> out;
  std::vector<int64_t> ids = {7, 3, 7, 11};
  auto t = client_->Pull(0, ids, 0, &out);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // The shard has the request but has not answered: Wait times out.
  auto req = shards_[0]->Receive();
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->header.op, static_cast<uint8_t>(Op::kPull));
  EXPECT_EQ(req->header.worker, 2u);
  EXPECT_EQ(req->ids, (std::vector<int64_t>{7, 3, 11}));  // deduplicated, first-seen order
  Status early = client_->Wait(*t, DeadlineIn(50));
  EXPECT_EQ(early.code(), StatusCode::kDeadlineExceeded) << early.ToString();
  // A Push issued meanwhile is not blocked by the held pull either.
  std::vector<float> g(2 * kDim, 1.0f);
  std::vector<int64_t> push_ids = {1, 2};
  auto p = client_->Push(0, push_ids, g, 0);
  ASSERT_TRUE(p.ok());
  auto push_req = shards_[0]->Receive();
  ASSERT_TRUE(push_req.has_value());
  EXPECT_EQ(client_->Wait(*p, DeadlineIn(20)).code(), StatusCode::kDeadlineExceeded);

  shards_[0]->Answer(*req, kDim, /*version=*/5);
  ASSERT_TRUE(client_->Wait(*t, DeadlineIn(5000)).ok());
  ASSERT_EQ(out.size(), ids.size() * kDim);
  for (size_t i = 0; i < ids.size(); ++i)
    for (uint32_t j = 0; j < kDim; ++j) EXPECT_EQ(out[i * kDim + j], ids[i] + 0.5f);
  // The ticket is consumed.
  EXPECT_EQ(client_->Wait(*t, DeadlineIn(10)).code(), StatusCode::kNotFound);

  shards_[0]->Answer(*push_req, kDim);
  EXPECT_TRUE(client_->Wait(*p, DeadlineIn(5000)).ok());
  // The next push carries the version the rows were pulled at.
  auto p2 = client_->Push(0, push_ids, g, 1);
  ASSERT_TRUE(p2.ok());
  auto push2 = shards_[0]->Receive();
  ASSERT_TRUE(push2.has_value());
  EXPECT_EQ(push2->header.version_seen, 5);
  shards_[0]->Answer(*push2, kDim);
  EXPECT_TRUE(client_->Wait(*p2, DeadlineIn(5000)).ok());
}

// The tracing hook (trainer/timeline.h): once per request, when its last
// shard answered, before Wait() returns, with its kind, variable and the
// times of the call and of the last reply.
TEST_F(PsClientTest, OnCompleteReportsEachRequestWhenItsLastShardAnswered) {
  std::mutex mu;
  std::vector<CompletedRequest> done;
  on_complete_ = [&](const CompletedRequest& c) {
    std::lock_guard<std::mutex> lock(mu);
    done.push_back(c);
  };
  Start(2, 2);
  const auto before = std::chrono::steady_clock::now();
  std::vector<float> out;
  std::vector<int64_t> ids = {1, 900};  // range partitions: one id on each shard
  auto t = client_->Pull(0, ids, 0, &out);
  ASSERT_TRUE(t.ok());
  auto r0 = shards_[0]->Receive();
  auto r1 = shards_[1]->Receive();
  ASSERT_TRUE(r0.has_value() && r1.has_value());
  shards_[0]->Answer(*r0, kDim);
  EXPECT_EQ(client_->Wait(*t, DeadlineIn(50)).code(), StatusCode::kDeadlineExceeded);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(done.empty()) << "reported before its last shard answered";
  }
  shards_[1]->Answer(*r1, kDim);
  ASSERT_TRUE(client_->Wait(*t, DeadlineIn(5000)).ok());
  std::vector<float> g(kDim, 1.0f);
  std::vector<int64_t> push_ids = {2};
  auto p = client_->Push(0, push_ids, g, 0);
  ASSERT_TRUE(p.ok());
  auto push = shards_[0]->Receive();
  ASSERT_TRUE(push.has_value());
  shards_[0]->Answer(*push, kDim);
  ASSERT_TRUE(client_->Wait(*p, DeadlineIn(5000)).ok());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].kind, CompletedRequest::Kind::kPull);
  EXPECT_EQ(done[1].kind, CompletedRequest::Kind::kPush);
  EXPECT_EQ(done[0].var, 0u);
  EXPECT_LE(before, done[0].submitted);
  EXPECT_LT(done[0].submitted, done[0].completed);
  EXPECT_LE(done[0].completed, done[1].submitted);
  EXPECT_LT(done[1].submitted, done[1].completed);
}

TEST_F(PsClientTest, PushSumsRepeatedIdsBeforeSending) {
  Start(1, 1);
  std::vector<int64_t> ids = {9, 4, 9};
  std::vector<float> g = {1, 1, 1, 2, 2, 2, 10, 20, 30};
  auto t = client_->Push(0, ids, g, 0);
  ASSERT_TRUE(t.ok());
  auto req = shards_[0]->Receive();
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->ids, (std::vector<int64_t>{9, 4}));
  EXPECT_EQ(req->values, (std::vector<float>{11, 21, 31, 2, 2, 2}));
  shards_[0]->Answer(*req, kDim);
  EXPECT_TRUE(client_->Wait(*t, DeadlineIn(5000)).ok());
}

TEST_F(PsClientTest, SplitsByPartitionSendsToAllShardsAtOnceAndReassembles) {
  Start(2, 4);  // range blocks of 250 ids; partitions 0,2 on shard 0 and 1,3 on shard 1
  std::vector<int64_t> ids = {999, 10, 260, 510, 11, 999};
  std::vector<float> out;
  auto t = client_->Pull(0, ids, 0, &out);
  ASSERT_TRUE(t.ok());
  // Every part reaches its shard before any shard answers.
  std::vector<FakeShard::Received> got[2];
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 2; ++k) {
      auto r = shards_[s]->Receive();
      ASSERT_TRUE(r.has_value()) << "shard " << s;
      got[s].push_back(*r);
    }
  }
  std::map<uint32_t, std::vector<int64_t>> by_partition;
  for (int s = 0; s < 2; ++s)
    for (auto& r : got[s]) by_partition[r.header.partition] = r.ids;
  EXPECT_EQ(by_partition[0], (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(by_partition[1], (std::vector<int64_t>{260}));
  EXPECT_EQ(by_partition[2], (std::vector<int64_t>{510}));
  EXPECT_EQ(by_partition[3], (std::vector<int64_t>{999}));
  // Answer in reverse order; the result is in the caller's order.
  for (int s = 1; s >= 0; --s)
    for (auto& r : got[s]) shards_[s]->Answer(r, kDim);
  ASSERT_TRUE(client_->Wait(*t, DeadlineIn(5000)).ok());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(out[i * kDim], ids[i] + 0.5f) << i;
}

TEST_F(PsClientTest, SyncPushReachesEveryPartition) {
  Start(2, 4, Consistency::kSync);
  std::vector<int64_t> ids = {5};
  std::vector<float> g(kDim, 1.0f);
  auto t = client_->Push(0, ids, g, 3);
  ASSERT_TRUE(t.ok());
  int empty = 0;
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 2; ++k) {
      auto r = shards_[s]->Receive();
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(r->header.clock, 3);
      empty += r->ids.empty();
      shards_[s]->Answer(*r, kDim);
    }
  }
  EXPECT_EQ(empty, 3);
  EXPECT_TRUE(client_->Wait(*t, DeadlineIn(5000)).ok());
}

// Metrics by path are counted at the socket: a push of 2 distinct rows to
// one shard is a 64-byte header frame + 2 int64 ids + 2×dim float32 values;
// its ack (header + two empty frames, as the shard sends it) is what comes
// back. A pull counts on the pull path only.
TEST_F(PsClientTest, CountsTransportBytesOfAPushAndAPullByPath) {
  Start(1, 1);
  EXPECT_EQ(client_->transport_bytes().push_sent, 0);
  std::vector<int64_t> ids = {9, 4, 9};
  std::vector<float> g(ids.size() * kDim, 1.0f);
  auto t = client_->Push(0, ids, g, 0);
  ASSERT_TRUE(t.ok());
  auto req = shards_[0]->Receive();
  ASSERT_TRUE(req.has_value());
  shards_[0]->Answer(*req, kDim);
  ASSERT_TRUE(client_->Wait(*t, DeadlineIn(5000)).ok());
  const int64_t header = static_cast<int64_t>(ps_wire::kHeaderSize);
  TransportBytes b = client_->transport_bytes();
  EXPECT_EQ(header, 64);
  EXPECT_EQ(b.push_sent, header + 2 * 8 + 2 * kDim * 4);
  EXPECT_EQ(b.push_received, header);  // the ack: header, empty ids, empty values
  EXPECT_EQ(b.pull_sent, 0);
  EXPECT_EQ(b.pull_received, 0);

  std::vector<float> out;
  std::vector<int64_t> pull_ids = {1, 2, 3};
  auto p = client_->Pull(0, pull_ids, 0, &out);
  ASSERT_TRUE(p.ok());
  auto preq = shards_[0]->Receive();
  ASSERT_TRUE(preq.has_value());
  shards_[0]->Answer(*preq, kDim);
  ASSERT_TRUE(client_->Wait(*p, DeadlineIn(5000)).ok());
  b = client_->transport_bytes();
  EXPECT_EQ(b.pull_sent, header + 3 * 8);
  EXPECT_EQ(b.pull_received, header + 3 * kDim * 4);
  EXPECT_EQ(b.push_sent, header + 2 * 8 + 2 * kDim * 4);  // unchanged
}

TEST_F(PsClientTest, ShardErrorsReachWait) {
  Start(1, 1);
  std::vector<int64_t> ids = {1};
  std::vector<float> g(kDim, 1.0f);
  auto t = client_->Push(0, ids, g, 0);
  ASSERT_TRUE(t.ok());
  auto r = shards_[0]->Receive();
  ASSERT_TRUE(r.has_value());
  shards_[0]->AnswerError(*r, ErrorCode::kNonFinite, "gradient is NaN");
  Status s = client_->Wait(*t, DeadlineIn(5000));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("NON_FINITE: gradient is NaN"), std::string::npos) << s.ToString();
}

TEST_F(PsClientTest, RejectsBadArgumentsBeforeSending) {
  Start(1, 1);
  std::vector<float> out;
  std::vector<int64_t> outside = {1000};
  EXPECT_EQ(client_->Pull(0, outside, 0, &out).status().code(), StatusCode::kInvalidArgument);
  std::vector<int64_t> neg = {-1};
  EXPECT_EQ(client_->Pull(0, neg, 0, &out).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Pull(5, outside, 0, &out).status().code(), StatusCode::kInvalidArgument);
  std::vector<int64_t> ok = {1};
  std::vector<float> short_grads(kDim - 1, 0.0f);
  EXPECT_EQ(client_->Push(0, ok, short_grads, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Wait(12345, DeadlineIn(1)).code(), StatusCode::kNotFound);
  EXPECT_FALSE(shards_[0]->Receive(50).has_value());
}

}  // namespace
}  // namespace parallax::ps
