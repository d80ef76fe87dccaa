// The Gloo backend with shared memory (CommunicatorOptions::shared_memory):
// ranks as threads of this process, their segments in a fresh directory
// under /dev/shm, "hosts" told apart with host_id.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>

#include "core/comm/communicator.h"
#include "core/comm/gradient_fusion.h"
#include "core/comm/half.h"
#include "core/comm/rendezvous_store.h"
#include "core/comm/wire_bytes.h"
#include "tests/core/comm/rank_threads.h"
#include "tests/testing/temp_dir.h"

namespace parallax::comm {
namespace {

using std::chrono::milliseconds;
using testing::CreateWorld;
using testing::RunRanks;
using testing::Value;

Deadline Soon() { return DeadlineAfter(milliseconds(20'000)); }

class ShmCommunicatorTest : public ::testing::Test {
 protected:
  CommunicatorOptions Options(int rank, int world, const std::string& prefix) {
    CommunicatorOptions o = testing::GlooOptions(rank, world, prefix);
    o.shared_memory = true;
    o.shm_directory = dir_.path();
    o.shm_chunk_bytes = 64 << 10;
    return o;
  }

  std::vector<std::unique_ptr<Communicator>> Create(
      int world, const std::string& prefix,
      const std::function<void(int, CommunicatorOptions&)>& tweak = nullptr) {
    return CreateWorld(world, store_.get(), [&](int r) {
      CommunicatorOptions o = Options(r, world, prefix);
      if (tweak) tweak(r, o);
      return o;
    });
  }

  std::vector<std::string> FilesInDir() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      names.push_back(e.path().filename());
    }
    return names;
  }

  parallax::testing::TempDir dir_{"/dev/shm"};
  std::unique_ptr<RendezvousStore> store_ = NewInMemoryRendezvousStore();
};

// (world, chunk bytes): 4 KiB chunks always sum directly; 256 KiB chunks
// reduce-scatter at 3 and 4 ranks.
class ShmAllReduceTest : public ShmCommunicatorTest,
                         public ::testing::WithParamInterface<std::tuple<int, size_t>> {};

TEST_P(ShmAllReduceTest, SumsEqualTheSerialSumOnEveryRankBitForBit) {
  const auto [world, chunk] = GetParam();
  auto comms =
      Create(world, "sum", [&](int, CommunicatorOptions& o) { o.shm_chunk_bytes = chunk; });
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  for (size_t n :
       {size_t{1}, size_t{13}, size_t{1024}, size_t{1025}, size_t{65'536 + 7}, size_t{300'007}}) {
    std::vector<std::vector<float>> data(world);
    RunRanks(world, [&](int r) {
      data[r].resize(n);
      for (size_t i = 0; i < n; ++i) data[r][i] = Value(r, i);
      Status s = comms[r]->AllReduce(data[r], ReduceOp::kSum, Soon());
      EXPECT_TRUE(s.ok()) << s.ToString();
    });
    for (size_t i = 0; i < n; ++i) {
      float expected = 0;
      for (int r = 0; r < world; ++r) expected += Value(r, i);
      ASSERT_EQ(data[0][i], expected) << "n=" << n << " i=" << i;
    }
    for (int r = 1; r < world; ++r) ASSERT_EQ(data[r], data[0]) << "rank " << r << " n=" << n;
  }
  // Every rank adds in the same order: non-integer values agree bit for bit.
  std::vector<std::vector<float>> noisy(world);
  RunRanks(world, [&](int r) {
    std::mt19937 gen(r);
    std::normal_distribution<float> normal;
    noisy[r].resize(200'001);
    for (float& v : noisy[r]) v = normal(gen);
    EXPECT_TRUE(comms[r]->AllReduce(noisy[r], ReduceOp::kSum, Soon()).ok());
  });
  for (int r = 1; r < world; ++r) EXPECT_EQ(noisy[r], noisy[0]) << "rank " << r;
  for (const auto& c : comms) EXPECT_EQ(c->wire_bytes().allreduce, WireBytes{});
}

INSTANTIATE_TEST_SUITE_P(WorldsAndChunks, ShmAllReduceTest,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(size_t{4096}, size_t{256} << 10)));

TEST_F(ShmCommunicatorTest, MeanHalfBFloat16AndInt32) {
  const int world = 3;
  auto comms = Create(world, "types");
  ASSERT_EQ(comms.size(), 3u);
  RunRanks(world, [&](int r) {
    std::vector<float> mean(1000, float(3 * (r + 1)));
    ASSERT_TRUE(comms[r]->AllReduce(mean, ReduceOp::kMean, Soon()).ok());
    EXPECT_EQ(mean[999], 6.0f);
    std::vector<uint16_t> half(5000, FloatToHalf(float(r + 1)));
    ASSERT_TRUE(
        comms[r]
            ->AllReduce(half.data(), half.size(), DataType::kFloat16, ReduceOp::kSum, Soon())
            .ok());
    EXPECT_EQ(HalfToFloat(half[4999]), 6.0f);
    std::vector<uint16_t> bf(5000, FloatToBFloat16(float(r + 1)));
    ASSERT_TRUE(comms[r]
                    ->AllReduce(bf.data(), bf.size(), DataType::kBFloat16, ReduceOp::kMean, Soon())
                    .ok());
    EXPECT_EQ(BFloat16ToFloat(bf[0]), 2.0f);
    std::vector<int32_t> ints(70'000, r + 1);
    ASSERT_TRUE(comms[r]
                    ->AllReduce(ints.data(), ints.size(), DataType::kInt32, ReduceOp::kSum, Soon())
                    .ok());
    EXPECT_EQ(ints[69'999], 6);
    std::vector<uint8_t> bytes(4);
    EXPECT_EQ(comms[r]
                  ->AllReduce(bytes.data(), bytes.size(), DataType::kUInt8, ReduceOp::kSum, Soon())
                  .code(),
              StatusCode::kInvalidArgument);
  });
}

TEST_F(ShmCommunicatorTest, OtherCollectivesStayOnGloo) {
  const int world = 2;
  auto comms = Create(world, "others");
  ASSERT_EQ(comms.size(), 2u);
  RunRanks(world, [&](int r) {
    std::vector<float> data(1000, float(r));
    ASSERT_TRUE(comms[r]->Broadcast(data, 1, Soon()).ok());
    EXPECT_EQ(data[0], 1.0f);
    std::vector<float> out(2);
    float mine = float(r + 10);
    ASSERT_TRUE(comms[r]->AllGather(&mine, 1, DataType::kFloat32, out.data(), Soon()).ok());
    EXPECT_EQ(out, (std::vector<float>{10, 11}));
    ASSERT_TRUE(comms[r]->Barrier(Soon()).ok());
  });
  EXPECT_GT(comms[0]->wire_bytes().other.sent, 0);
  EXPECT_GT(comms[0]->wire_bytes().allgather.sent, 0);
}

// 2 hosts x 2 ranks, and an uneven 1 + 3 + 1: the hierarchical all-reduce
// gives what the flat Gloo ring gives, and only a host's first rank puts
// all-reduce bytes on a socket: the ring among hosts, for one rank's buffer.
class HierarchicalTest : public ShmCommunicatorTest,
                         public ::testing::WithParamInterface<std::vector<std::string>> {};

TEST_P(HierarchicalTest, EqualsTheFlatAllReduceAndOnlyLeadersUseSockets) {
  const std::vector<std::string> hosts = GetParam();
  const int world = static_cast<int>(hosts.size());
  auto hier = Create(world, "hier", [&](int r, CommunicatorOptions& o) {
    o.host_id = hosts[r];
    o.verify_arguments = false;  // count the all-reduce's bytes only
  });
  ASSERT_EQ(hier.size(), hosts.size());
  auto flat = testing::CreateGlooWorld(world, store_.get(), "flat");
  ASSERT_EQ(flat.size(), hosts.size());
  const size_t n = 250'003;
  std::vector<std::vector<float>> a(world), b(world);
  RunRanks(world, [&](int r) {
    std::mt19937 gen(100 + r);
    std::uniform_real_distribution<float> uniform(-1, 1);
    a[r].resize(n);
    for (float& v : a[r]) v = uniform(gen);
    b[r] = a[r];
    ASSERT_TRUE(hier[r]->AllReduce(a[r], ReduceOp::kSum, Soon()).ok());
    ASSERT_TRUE(flat[r]->AllReduce(b[r], ReduceOp::kSum, Soon()).ok());
  });
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(a[r][i], b[r][i], 1e-5f) << "rank " << r;
    EXPECT_EQ(a[r], a[0]) << "every rank of every host gets the leaders' bits";
  }
  std::vector<std::string> seen;
  const int num_hosts = static_cast<int>(std::set<std::string>(hosts.begin(), hosts.end()).size());
  int host = 0;
  for (int r = 0; r < world; ++r) {
    const WireBytes w = hier[r]->wire_bytes().allreduce;
    if (std::find(seen.begin(), seen.end(), hosts[r]) != seen.end()) {
      EXPECT_EQ(w, WireBytes{}) << "rank " << r << " is not its host's first rank";
      continue;
    }
    seen.push_back(hosts[r]);
    EXPECT_EQ(w, GlooAllReduceWire(num_hosts, host++, n * 4, 4)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, HierarchicalTest,
                         ::testing::Values(std::vector<std::string>{"a", "a", "b", "b"},
                                           std::vector<std::string>{"a", "b", "c", "b", "b"}));

// GradientFusion hands a bucket's gradients to the communicator where they
// lie (no packing): on one host and across two, odd sizes, empty ones, one
// larger than a bucket, pieces that straddle chunks.
TEST_F(ShmCommunicatorTest, FusedBucketsAreReducedWhereTheGradientsLie) {
  for (const std::vector<std::string>& hosts :
       {std::vector<std::string>{"a", "a", "a"}, std::vector<std::string>{"a", "a", "b", "b"}}) {
    const int world = static_cast<int>(hosts.size());
    auto comms =
        Create(world, "fusion" + std::to_string(world), [&](int r, CommunicatorOptions& o) {
          o.host_id = hosts[r];
          o.shm_chunk_bytes = 4096;
        });
    ASSERT_EQ(comms.size(), hosts.size());
    EXPECT_TRUE(comms[0]->ReducesPiecesInPlace());
    const std::vector<size_t> sizes = {0, 999, 3, 2500, 1, 0, 7000, 1024, 5};
    std::vector<std::vector<std::vector<float>>> grads(world);
    RunRanks(world, [&](int r) {
      FusionOptions fo;
      fo.bucket_bytes = 4000 * sizeof(float);
      GradientFusion fusion(comms[r].get(), fo);
      for (int step = 0; step < 2; ++step) {
        grads[r].clear();
        for (size_t n : sizes) {
          grads[r].emplace_back(n);
          for (size_t i = 0; i < n; ++i) grads[r].back()[i] = Value(r, i + step);
        }
        for (auto& g : grads[r]) ASSERT_TRUE(fusion.Register(g.data(), g.size()).ok());
        Status s = fusion.Synchronize(Soon());
        ASSERT_TRUE(s.ok()) << s.ToString();
      }
    });
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) {
        float sum = 0;
        for (int r = 0; r < world; ++r) sum += Value(r, i + 1);
        for (int r = 0; r < world; ++r) {
          ASSERT_FLOAT_EQ(grads[r][k][i], sum / world) << "gradient " << k << " rank " << r;
        }
      }
    }
  }
}

TEST_F(ShmCommunicatorTest, MismatchedCountsAreNamedWithoutAnExtraRound) {
  const int world = 2;
  auto comms = Create(world, "mismatch");
  ASSERT_EQ(comms.size(), 2u);
  std::vector<Status> statuses(world);
  RunRanks(world, [&](int r) {
    std::vector<float> data(r == 0 ? 10 : 12, 1.0f);
    statuses[r] = comms[r]->AllReduce(data, ReduceOp::kSum, Soon());
  });
  EXPECT_EQ(statuses[0].code(), StatusCode::kInvalidArgument) << statuses[0].ToString();
  EXPECT_NE(statuses[0].message().find(
                "rank 1 called AllReduce of 12 float32 but rank 0 called AllReduce of 10 float32"),
            std::string::npos)
      << statuses[0].ToString();
  EXPECT_EQ(statuses[1].code(), StatusCode::kInvalidArgument) << statuses[1].ToString();
  EXPECT_NE(statuses[1].message().find(
                "rank 0 called AllReduce of 10 float32 but rank 1 called AllReduce of 12 float32"),
            std::string::npos)
      << statuses[1].ToString();
  EXPECT_EQ(comms[0]->wire_bytes().allreduce, WireBytes{});
}

TEST_F(ShmCommunicatorTest, PeerThatNeverCallsTimesOutNamingIt) {
  auto comms = Create(3, "absent");
  ASSERT_EQ(comms.size(), 3u);
  std::vector<Status> statuses(2);
  const auto start = std::chrono::steady_clock::now();
  RunRanks(2, [&](int r) {
    std::vector<float> data(100, 1.0f);
    statuses[r] = comms[r]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(300)));
  });
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, std::chrono::seconds(10));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kDeadlineExceeded) << statuses[r].ToString();
    EXPECT_NE(statuses[r].message().find("rank 2 did not arrive before the deadline"),
              std::string::npos)
        << statuses[r].ToString();
  }
  std::vector<float> data(100);
  EXPECT_EQ(comms[0]->AllReduce(data, ReduceOp::kSum, Soon()).code(),
            StatusCode::kFailedPrecondition);
}

// A host whose first rank loses its link to the other hosts tells its own
// ranks, which fail with UNAVAILABLE instead of waiting for their deadline.
TEST_F(ShmCommunicatorTest, LeaderFailureBetweenHostsReachesItsHostsRanks) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  auto comms =
      Create(4, "leaderfail", [&](int r, CommunicatorOptions& o) { o.host_id = hosts[r]; });
  ASSERT_EQ(comms.size(), 4u);
  comms[2].reset();  // host b's first rank goes away: its sockets close
  std::vector<Status> statuses(2);
  const auto start = std::chrono::steady_clock::now();
  RunRanks(2, [&](int r) {
    std::vector<float> data(1000, 1.0f);
    statuses[r] = comms[r]->AllReduce(data, ReduceOp::kSum, DeadlineAfter(milliseconds(15'000)));
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(statuses[0].code(), StatusCode::kUnavailable) << statuses[0].ToString();
  EXPECT_EQ(statuses[1].code(), StatusCode::kUnavailable) << statuses[1].ToString();
  EXPECT_NE(statuses[1].message().find(
                "rank 0, which reduces this host's sum with the other hosts, failed"),
            std::string::npos)
      << statuses[1].ToString();
}

TEST_F(ShmCommunicatorTest, NothingIsLeftInTheDirectoryOnceEveryRankMappedIt) {
  auto comms = Create(3, "gone");
  ASSERT_EQ(comms.size(), 3u);
  EXPECT_EQ(FilesInDir(), std::vector<std::string>{});
  RunRanks(3, [&](int r) {
    std::vector<float> data(10, 1.0f);
    EXPECT_TRUE(comms[r]->AllReduce(data, ReduceOp::kSum, Soon()).ok());
  });
}

TEST_F(ShmCommunicatorTest, RemovesSegmentsOfCreatorsThatDiedButNotLiveOnes) {
  // A creator killed between making its segment and every rank mapping it
  // leaves a named file nobody holds; a live creator holds a flock on its.
  const std::string stale = dir_.File("px-comm-00000000deadbeef");
  const std::string live = dir_.File("px-comm-00000000000a11fe");
  int fd = open(stale.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  int held = open(live.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_SH), 0);
  auto comms = Create(2, "stale");
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  close(held);
}

TEST_F(ShmCommunicatorTest, TooSmallDirectoryFallsBackToSocketsWithAWarning) {
  // 2 ranks x 2 sets x 1 TiB: more than any /dev/shm has.
  ::testing::internal::CaptureStderr();
  auto comms =
      Create(2, "small", [](int, CommunicatorOptions& o) { o.shm_chunk_bytes = 1ull << 40; });
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_NE(err.find("shared memory cannot be used on rank 0's host"), std::string::npos) << err;
  EXPECT_NE(err.find("free there"), std::string::npos) << err;
  EXPECT_NE(err.find("goes over TCP sockets"), std::string::npos) << err;
  RunRanks(2, [&](int r) {
    std::vector<float> data(1000, float(r + 1));
    ASSERT_TRUE(comms[r]->AllReduce(data, ReduceOp::kSum, Soon()).ok());
    EXPECT_EQ(data[999], 3.0f);
  });
  EXPECT_GT(comms[0]->wire_bytes().allreduce.sent, 4000);
  EXPECT_EQ(FilesInDir(), std::vector<std::string>{});
}

}  // namespace
}  // namespace parallax::comm
