#include "core/comm/gradient_fusion.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "core/comm/rendezvous_store.h"
#include "tests/core/comm/rank_threads.h"

namespace parallax::comm {
namespace {

using std::chrono::milliseconds;
using testing::CreateGlooWorld;
using testing::RunRanks;
using testing::Value;

// Records a rank's fusion events and lets the test wait for one.
class EventLog {
 public:
  void Add(const FusionEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    cv_.notify_all();
  }
  bool WaitFor(FusionEvent::Kind kind, int index, milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return Position(kind, index) >= 0; });
  }
  int Position(FusionEvent::Kind kind, int index) const {
    for (size_t i = 0; i < events_.size(); ++i) {
      if (events_[i].kind == kind && events_[i].index == index) return static_cast<int>(i);
    }
    return -1;
  }
  int PositionLocked(FusionEvent::Kind kind, int index) {
    std::lock_guard<std::mutex> lock(mu_);
    return Position(kind, index);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<FusionEvent> events_;
};

class GradientFusionTest : public ::testing::Test {
 protected:
  // Runs one step over `world` ranks: gradient k of rank r has sizes[k]
  // elements of Value(r + k, i); returns every rank's gradients afterwards.
  std::vector<std::vector<std::vector<float>>> Step(int world, const std::vector<size_t>& sizes,
                                                    FusionOptions options, int steps = 1) {
    auto comms = CreateGlooWorld(world, store_.get(), "fusion" + std::to_string(next_++));
    EXPECT_EQ(comms.size(), static_cast<size_t>(world));
    std::vector<std::vector<std::vector<float>>> grads(world);
    if (comms.empty()) return grads;
    RunRanks(world, [&](int r) {
      GradientFusion fusion(comms[r].get(), options);
      for (int step = 0; step < steps; ++step) {
        grads[r].assign(sizes.size(), {});
        for (size_t k = 0; k < sizes.size(); ++k) {
          for (size_t i = 0; i < sizes[k]; ++i) grads[r][k].push_back(Value(r + int(k), i));
          Status s = fusion.Register(grads[r][k].data(), sizes[k]);
          EXPECT_TRUE(s.ok()) << s.ToString();
        }
        Status s = fusion.Synchronize(DeadlineAfter(milliseconds(30'000)));
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
    });
    return grads;
  }

  std::unique_ptr<RendezvousStore> store_ = NewInMemoryRendezvousStore();
  int next_ = 0;
};

TEST_F(GradientFusionTest, BucketAllReduceStartsBeforeTheNextGradientIsRegistered) {
  const int world = 2;
  const int kGrads = 5;
  auto comms = CreateGlooWorld(world, store_.get());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<EventLog> logs(world);
  std::vector<std::vector<std::vector<float>>> grads(world);
  RunRanks(world, [&](int r) {
    FusionOptions options;
    options.bucket_bytes = 4 * sizeof(float);  // one 4-element gradient fills a bucket
    options.op = ReduceOp::kSum;
    options.observer = [&, r](const FusionEvent& e) { logs[r].Add(e); };
    GradientFusion fusion(comms[r].get(), options);
    grads[r].resize(kGrads);
    for (int k = 0; k < kGrads; ++k) {
      grads[r][k] = {float(r), float(k), 1, 2};
      ASSERT_TRUE(fusion.Register(grads[r][k].data(), 4).ok());
      // Backward would go on computing gradient k+1 here; bucket k must
      // already be on the wire without any call from this thread.
      ASSERT_TRUE(logs[r].WaitFor(FusionEvent::kBucketStarted, k, milliseconds(20'000)))
          << "bucket " << k << " never started on rank " << r;
    }
    ASSERT_TRUE(fusion.Synchronize(DeadlineAfter(milliseconds(20'000))).ok());
    EXPECT_EQ(fusion.buckets_in_step(), 0);
  });
  for (int r = 0; r < world; ++r) {
    for (int k = 0; k < kGrads; ++k) {
      int registered = logs[r].PositionLocked(FusionEvent::kRegistered, k);
      int started = logs[r].PositionLocked(FusionEvent::kBucketStarted, k);
      ASSERT_GE(registered, 0);
      EXPECT_LT(registered, started) << "rank " << r << " bucket " << k;
      if (k + 1 < kGrads) {
        EXPECT_LT(started, logs[r].PositionLocked(FusionEvent::kRegistered, k + 1))
            << "rank " << r << ": bucket " << k << " started only after gradient " << k + 1;
      }
      EXPECT_GE(logs[r].PositionLocked(FusionEvent::kBucketFinished, k), 0);
      EXPECT_EQ(grads[r][k], (std::vector<float>{1, float(2 * k), 2, 4}));
    }
  }
}

TEST(FusionBucketRuleTest, PacksAsDocumented) {
  constexpr size_t kBucket = 10 * sizeof(float);
  auto count = [](std::vector<size_t> sizes, size_t bucket_bytes = 10 * sizeof(float)) {
    return CountFusionBuckets(sizes, bucket_bytes);
  };
  EXPECT_EQ(count({}), 0);
  EXPECT_EQ(count(std::vector<size_t>(10, 1)), 1);  // 10 small gradients, one bucket
  EXPECT_EQ(count(std::vector<size_t>(11, 1)), 2);
  EXPECT_EQ(count({4, 4, 4}), 2);                    // the third does not fit: [4 4] [4]
  EXPECT_EQ(count({25}), 1);                         // larger than a bucket: alone, in place
  EXPECT_EQ(count({3, 25, 3}), 3);                   // [3] [25] [3]
  EXPECT_EQ(count({10, 1}), 2);                      // a full bucket is sealed at once
  EXPECT_EQ(count({1, 1, 1}, 0), 3);                 // no fusion: one bucket each
  FusionBucketRule rule(kBucket);
  FusionBucketRule::Placement p = rule.Add(25);
  EXPECT_TRUE(p.opens && p.in_place && p.seal_after && !p.seal_before);
  p = rule.Add(6);
  EXPECT_TRUE(p.opens && !p.in_place && !p.seal_after);
  p = rule.Add(6);
  EXPECT_TRUE(p.seal_before && p.opens && !p.seal_after);
  EXPECT_EQ(rule.buckets(), 3);
  rule.Reset();
  EXPECT_EQ(rule.buckets(), 0);
}

// GradientFusion forms the buckets CountFusionBuckets (what the planner
// predicts with) counts, one all-reduce each, every step.
TEST_F(GradientFusionTest, FormsTheBucketsTheRuleCounts) {
  const std::vector<std::vector<size_t>> cases = {
      {3, 3, 3, 3}, {1, 20, 1, 1}, {16, 16, 16}, {5, 11, 2, 9, 9, 1}, {0, 4, 0}};
  for (const std::vector<size_t>& sizes : cases) {
    std::atomic<int> started{0};
    FusionOptions options;
    options.bucket_bytes = 16 * sizeof(float);
    options.op = ReduceOp::kSum;
    options.observer = [&](const FusionEvent& e) {
      if (e.kind == FusionEvent::kBucketStarted) ++started;
    };
    const int steps = 2;
    Step(/*world=*/2, sizes, options, steps);
    EXPECT_EQ(started.load(), 2 * steps * CountFusionBuckets(sizes, options.bucket_bytes))
        << "sizes[0] " << sizes[0] << ", " << sizes.size() << " gradients";
  }
}

TEST_F(GradientFusionTest, FusedEqualsUnfusedEqualsSerialSum) {
  const int world = 3;
  // 0, 1, odd sizes, one larger than a bucket, totals not a multiple of it.
  const std::vector<size_t> sizes = {0, 1, 3, 1000, 17, 5000, 4099, 1, 2047, 0, 333};
  FusionOptions fused;
  fused.bucket_bytes = 4096 * sizeof(float);
  fused.op = ReduceOp::kSum;
  FusionOptions unfused = fused;
  unfused.bucket_bytes = 0;
  FusionOptions one_bucket = fused;
  one_bucket.bucket_bytes = 64u << 20;
  auto a = Step(world, sizes, fused, /*steps=*/2);
  auto b = Step(world, sizes, unfused);
  auto c = Step(world, sizes, one_bucket);
  for (int r = 0; r < world; ++r) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      ASSERT_EQ(a[r][k].size(), sizes[k]);
      for (size_t i = 0; i < sizes[k]; ++i) {
        float expected = 0;
        for (int q = 0; q < world; ++q) expected += Value(q + int(k), i);
        ASSERT_EQ(a[r][k][i], expected) << "rank " << r << " grad " << k << " i " << i;
      }
      ASSERT_EQ(a[r][k], b[r][k]);
      ASSERT_EQ(a[r][k], c[r][k]);
    }
  }
}

TEST_F(GradientFusionTest, MeanAndFp16CompressionAreExactOnSmallIntegers) {
  const int world = 2;
  const std::vector<size_t> sizes = {5, 1000, 7};
  FusionOptions options;
  options.bucket_bytes = 512 * sizeof(float);
  options.op = ReduceOp::kMean;
  options.fp16_compression = true;
  auto got = Step(world, sizes, options);
  for (int r = 0; r < world; ++r) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) {
        float expected = (Value(int(k), i) + Value(1 + int(k), i)) / 2;
        ASSERT_EQ(got[r][k][i], expected) << k << " " << i;
      }
    }
  }
}

TEST_F(GradientFusionTest, PeerFailureSurfacesFromSynchronize) {
  auto comms = CreateGlooWorld(2, store_.get());
  ASSERT_EQ(comms.size(), 2u);
  FusionOptions options;
  options.bucket_timeout = milliseconds(300);
  GradientFusion fusion(comms[0].get(), options);
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(fusion.Register(g.data(), g.size()).ok());
  Status s = fusion.Synchronize(DeadlineAfter(milliseconds(20'000)));  // rank 1 never joins
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("GradientFusion bucket 0"), std::string::npos) << s.ToString();
  EXPECT_FALSE(fusion.Register(g.data(), g.size()).ok());
}

}  // namespace
}  // namespace parallax::comm
