// The Gloo communicator with ranks as threads on loopback (ephemeral ports),
// rendezvous through the in-memory store.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>

#include "core/comm/communicator.h"
#include "core/comm/half.h"
#include "core/comm/rendezvous_store.h"
#include "core/comm/wire_bytes.h"
#include "tests/core/comm/rank_threads.h"

namespace parallax::comm {
namespace {

using std::chrono::milliseconds;
using testing::CreateGlooWorld;
using testing::RunRanks;
using testing::Value;

class GlooCommunicatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<RendezvousStore> store_ = NewInMemoryRendezvousStore();
};

TEST_F(GlooCommunicatorTest, AllReduceSumEqualsSerialSumForManySizes) {
  for (int world : {2, 3}) {
    auto comms = CreateGlooWorld(world, store_.get(), "sum" + std::to_string(world));
    ASSERT_EQ(comms.size(), static_cast<size_t>(world));
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1001}, size_t{65537},
                     size_t{300'007}}) {
      std::vector<std::vector<float>> data(world);
      RunRanks(world, [&](int r) {
        data[r].resize(n);
        for (size_t i = 0; i < n; ++i) data[r][i] = Value(r, i);
        Status s =
            comms[r]->AllReduce(data[r], ReduceOp::kSum, DeadlineAfter(milliseconds(20'000)));
        EXPECT_TRUE(s.ok()) << s.ToString();
      });
      for (size_t i = 0; i < n; ++i) {
        float expected = 0;
        for (int r = 0; r < world; ++r) expected += Value(r, i);
        for (int r = 0; r < world; ++r) {
          ASSERT_EQ(data[r][i], expected) << "world " << world << " n " << n << " i " << i;
        }
      }
    }
  }
}

TEST_F(GlooCommunicatorTest, MeanIsSumDividedByWorldSize) {
  const int world = 4;
  auto comms = CreateGlooWorld(world, store_.get());
  ASSERT_EQ(comms.size(), 4u);
  const size_t n = 5003;
  std::vector<std::vector<float>> data(world);
  RunRanks(world, [&](int r) {
    for (size_t i = 0; i < n; ++i) data[r].push_back(Value(r, i) + 0.25f * r);
    Status s = comms[r]->AllReduce(data[r], ReduceOp::kMean, DeadlineAfter(milliseconds(20'000)));
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  for (size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int r = 0; r < world; ++r) sum += Value(r, i) + 0.25f * r;
    for (int r = 0; r < world; ++r) ASSERT_EQ(data[r][i], sum / world) << i;
  }
}

TEST_F(GlooCommunicatorTest, AllReducesHalfAndBFloat16) {
  const int world = 2;
  auto comms = CreateGlooWorld(world, store_.get());
  ASSERT_EQ(comms.size(), 2u);
  const size_t n = 1025;
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<std::vector<uint16_t>> data(world, std::vector<uint16_t>(n));
    RunRanks(world, [&](int r) {
      for (size_t i = 0; i < n; ++i) {
        float v = static_cast<float>(static_cast<int>(i % 50) * (r + 1));
        data[r][i] = type == DataType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      }
      Status s = comms[r]->AllReduce(data[r].data(), n, type, ReduceOp::kMean,
                                     DeadlineAfter(milliseconds(20'000)));
      EXPECT_TRUE(s.ok()) << s.ToString();
    });
    for (size_t i = 0; i < n; ++i) {
      float expected = static_cast<float>(static_cast<int>(i % 50) * 3) / 2;
      float got =
          type == DataType::kFloat16 ? HalfToFloat(data[1][i]) : BFloat16ToFloat(data[1][i]);
      ASSERT_EQ(got, expected) << DataTypeName(type) << " " << i;
      ASSERT_EQ(data[0][i], data[1][i]);
    }
  }
}

TEST_F(GlooCommunicatorTest, BroadcastCopiesTheRootsValues) {
  const int world = 3;
  auto comms = CreateGlooWorld(world, store_.get());
  ASSERT_EQ(comms.size(), 3u);
  std::vector<std::vector<float>> data(world);
  RunRanks(world, [&](int r) {
    for (size_t i = 0; i < 10'001; ++i) data[r].push_back(Value(r, i));
    Status s = comms[r]->Broadcast(data[r], 1, DeadlineAfter(milliseconds(20'000)));
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < data[r].size(); ++i) ASSERT_EQ(data[r][i], Value(1, i));
  }
}

TEST_F(GlooCommunicatorTest, AllGatherAndAllGathervConcatenateInRankOrder) {
  const int world = 3;
  auto comms = CreateGlooWorld(world, store_.get());
  ASSERT_EQ(comms.size(), 3u);
  const std::vector<size_t> counts = {3, 0, 5};
  std::vector<std::vector<float>> gathered(world), gatheredv(world);
  RunRanks(world, [&](int r) {
    std::vector<float> mine = {float(r), float(r) + 0.5f};
    gathered[r].resize(2 * world);
    Status s = comms[r]->AllGather(mine.data(), 2, DataType::kFloat32, gathered[r].data(),
                                   DeadlineAfter(milliseconds(20'000)));
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::vector<float> part(counts[r], float(10 * r));
    gatheredv[r].resize(8);
    s = comms[r]->AllGatherv(part.data(), counts, DataType::kFloat32, gatheredv[r].data(),
                             DeadlineAfter(milliseconds(20'000)));
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(comms[r]->Barrier(DeadlineAfter(milliseconds(20'000))).ok());
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
    EXPECT_EQ(gatheredv[r], (std::vector<float>{0, 0, 0, 20, 20, 20, 20, 20}));
  }
}

TEST_F(GlooCommunicatorTest, MissingRankTimesOutNamingIt) {
  // World of 3, but rank 2 never arrives.
  std::vector<Status> statuses(2);
  auto start = std::chrono::steady_clock::now();
  RunRanks(2, [&](int r) {
    CommunicatorOptions o = testing::GlooOptions(r, 3, "missing");
    o.rendezvous_timeout = milliseconds(1'000);
    statuses[r] = Communicator::Create(o, store_.get()).status();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("rendezvous"), std::string::npos) << s.ToString();
  }
}

TEST_F(GlooCommunicatorTest, MismatchedCountsAreNamedAndTheCommunicatorStaysUsable) {
  const int world = 2;
  auto comms = CreateGlooWorld(world, store_.get());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<Status> statuses(world);
  RunRanks(world, [&](int r) {
    std::vector<float> data(r == 0 ? 10 : 12, 1.0f);
    statuses[r] = comms[r]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(20'000)));
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kInvalidArgument) << statuses[r].ToString();
    EXPECT_NE(statuses[r].message().find("rank 1 called AllReduce of 12 float32 but rank 0 "
                                         "called AllReduce of 10 float32"),
              std::string::npos)
        << statuses[r].ToString();
  }
  RunRanks(world, [&](int r) {
    std::vector<float> data(10, 1.0f);
    EXPECT_TRUE(
        comms[r]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(20'000))).ok());
    EXPECT_EQ(data[9], 2.0f);
  });
}

// The argument check is one extra round the first time a call shape is
// used; later calls of that shape go straight to the collective.
TEST_F(GlooCommunicatorTest, ChecksEachCallShapeOnceUnlessAskedForEveryCall) {
  for (bool every_call : {false, true}) {
    const int world = 2;
    auto comms = testing::CreateWorld(world, store_.get(), [&](int r) {
      CommunicatorOptions o = testing::GlooOptions(r, world, every_call ? "every" : "once");
      o.verify_every_call = every_call;
      return o;
    });
    ASSERT_EQ(comms.size(), 2u);
    const size_t n = 1000;
    const WireBytes call = GlooAllReduceWire(world, 0, n * 4, 4);
    const WireBytes check = GlooAllGatherWire(world, 0, 24);
    std::vector<WireBytes> after;
    for (size_t count : {n, n, size_t{7}, n}) {
      RunRanks(world, [&](int r) {
        std::vector<float> data(count, 1.0f);
        EXPECT_TRUE(
            comms[r]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(20'000))).ok());
      });
      after.push_back(comms[0]->wire_bytes().allreduce);
    }
    WireBytes first = call;
    first += check;
    EXPECT_EQ(after[0], first);
    WireBytes second = call;
    if (every_call) second += check;
    EXPECT_EQ(after[1].sent - after[0].sent, second.sent) << "every_call=" << every_call;
    EXPECT_EQ(after[3].sent - after[2].sent, second.sent) << "every_call=" << every_call;
  }
}

// Ranks that pass different counts to a call that skips the check (a shape
// each has used before, or checks off) must not bring Gloo down: the call
// fails on every rank, naming what each rank called.
TEST_F(GlooCommunicatorTest, UncheckedMismatchFailsCleanlyNamingTheRanks) {
  for (bool verify : {true, false}) {
    const int world = 2;
    auto comms = CreateGlooWorld(world, store_.get(), verify ? "seen" : "unchecked", verify);
    ASSERT_EQ(comms.size(), 2u);
    if (verify) {  // both shapes checked and used once by every rank
      RunRanks(world, [&](int r) {
        for (size_t count : {10, 12}) {
          std::vector<float> data(count, 1.0f);
          EXPECT_TRUE(
              comms[r]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(20'000))).ok());
        }
      });
    }
    std::vector<Status> statuses(world);
    const auto start = std::chrono::steady_clock::now();
    RunRanks(world, [&](int r) {
      std::vector<float> data(r == 0 ? 10 : 12, 1.0f);
      statuses[r] = comms[r]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(1'000)));
    });
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(statuses[r].code() == StatusCode::kDeadlineExceeded ||
                  statuses[r].code() == StatusCode::kUnavailable)
          << statuses[r].ToString();
      const std::string other = r == 0 ? "rank 1 called AllReduce of 12 float32 but rank 0 called "
                                         "AllReduce of 10 float32"
                                       : "rank 0 called AllReduce of 10 float32 but rank 1 called "
                                         "AllReduce of 12 float32";
      EXPECT_NE(statuses[r].message().find("ranks disagree on the collective; " + other),
                std::string::npos)
          << "verify=" << verify << ": " << statuses[r].ToString();
    }
  }
}

// AllGatherv is checked once per type (its counts change every step): a
// later call whose count vectors differ between ranks fails cleanly, naming
// what each rank called, instead of bringing Gloo down.
TEST_F(GlooCommunicatorTest, AllGathervCountsThatDifferLaterFailCleanly) {
  const int world = 2;
  auto comms = CreateGlooWorld(world, store_.get(), "gatherv");
  ASSERT_EQ(comms.size(), 2u);
  std::vector<Status> first(world), second(world);
  RunRanks(world, [&](int r) {
    const Deadline d = DeadlineAfter(milliseconds(20'000));
    std::vector<float> mine(3, float(r)), all(6);
    first[r] = comms[r]->AllGatherv(mine.data(), {3, 3}, DataType::kFloat32, all.data(), d);
    // Rank 1 thinks it sends 5 rows, rank 0 that rank 1 sends 4.
    const std::vector<size_t> counts = {3, r == 0 ? size_t{4} : size_t{5}};
    mine.resize(counts[r]);
    all.resize(counts[0] + counts[1]);
    second[r] = comms[r]->AllGatherv(mine.data(), counts, DataType::kFloat32, all.data(),
                                     DeadlineAfter(milliseconds(1'000)));
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(first[r].ok()) << first[r].ToString();
    EXPECT_TRUE(second[r].code() == StatusCode::kDeadlineExceeded ||
                second[r].code() == StatusCode::kUnavailable)
        << second[r].ToString();
    EXPECT_NE(second[r].message().find("ranks disagree on the collective; rank " +
                                       std::to_string(1 - r) + " called AllGatherv of " +
                                       (r == 0 ? "8" : "7") + " float32 in total"),
              std::string::npos)
        << second[r].ToString();
  }
}

TEST_F(GlooCommunicatorTest, PeerThatNeverCallsTimesOutAtTheDeadline) {
  auto comms = CreateGlooWorld(2, store_.get());
  ASSERT_EQ(comms.size(), 2u);
  std::vector<float> data(100, 1.0f);
  auto start = std::chrono::steady_clock::now();
  Status s = comms[0]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(500)));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 of 2 (gloo): AllReduce of 100 float32"), std::string::npos)
      << s.ToString();
  EXPECT_GE(took, milliseconds(400));
  EXPECT_LT(took, std::chrono::seconds(10));
  // The communicator is broken now, and says so.
  Status again = comms[0]->Barrier(DeadlineAfter(milliseconds(500)));
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
}

TEST_F(GlooCommunicatorTest, PeerThatGoesAwayFailsTheCollectiveBeforeTheDeadline) {
  auto comms = CreateGlooWorld(2, store_.get());
  ASSERT_EQ(comms.size(), 2u);
  // Rank 1 completes one collective, then goes away (its sockets close) while
  // rank 0 is in the next one.
  std::atomic<bool> entered{false};
  Status s0;
  auto start = std::chrono::steady_clock::now();
  std::thread rank0([&] {
    std::vector<float> data(1 << 20, 1.0f);
    EXPECT_TRUE(comms[0]->Barrier(DeadlineAfter(milliseconds(20'000))).ok());
    entered = true;
    s0 = comms[0]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(30'000)));
  });
  EXPECT_TRUE(comms[1]->Barrier(DeadlineAfter(milliseconds(20'000))).ok());
  comms[1].reset();
  rank0.join();
  EXPECT_TRUE(entered);
  EXPECT_EQ(s0.code(), StatusCode::kUnavailable) << s0.ToString();
  EXPECT_NE(s0.message().find("rank 0 of 2 (gloo): AllReduce"), std::string::npos) << s0.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST_F(GlooCommunicatorTest, RejectsBadArgumentsBeforeCommunicating) {
  CommunicatorOptions o = testing::GlooOptions(3, 2);
  auto c = Communicator::Create(o, store_.get());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  o = testing::GlooOptions(0, 1);
  o.bind_address = "no-such-host.invalid";
  c = Communicator::Create(o, store_.get());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  auto solo = Communicator::Create(testing::GlooOptions(0, 1, "solo"), store_.get());
  ASSERT_TRUE(solo.ok()) << solo.status().ToString();
  std::vector<float> data = {1, 2, 3};
  EXPECT_TRUE(
      solo.value()->AllReduce(data, ReduceOp::kMean, DeadlineAfter(milliseconds(1000))).ok());
  EXPECT_EQ(data, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(solo.value()->Broadcast(data, 5, DeadlineAfter(milliseconds(1000))).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::comm
