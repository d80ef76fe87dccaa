// Same-host shared memory (schemas/ps_wire.md, "Shared memory"): the
// allocator, the shard's ATTACH and kFlagShm requests (including every bad
// reference), and a client that moves rows through shared memory against
// real shard servers on ipc://.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/ps/client.h"
#include "core/ps/shm_region.h"
#include "ps/shard_server.h"
#include "tests/ps/ps_test_util.h"

namespace parallax::ps {
namespace {

using testing::MakeHeader;
using testing::ReplyHeader;
using testing::Request;
using testing::Send;

constexpr uint32_t kDim = 4;

// Async SGD (lr 0.1), one variable "emb" of `rows` × kDim, partition p on shard p.
PsPlan AsyncPlan(int64_t rows, uint32_t shards) {
  PsPlan plan;
  plan.consistency = Consistency::kAsync;
  plan.num_workers = 2;
  plan.num_shards = shards;
  VariableSpec v;
  v.id = 0;
  v.name = "emb";
  v.rows = rows;
  v.dim = kDim;
  v.partitions = shards;
  for (uint32_t p = 0; p < shards; ++p) v.partition_shards.push_back(p);
  v.optimizer.type = OptimizerType::kSgd;
  v.optimizer.lr = 0.1f;
  plan.variables.push_back(v);
  return plan;
}

TEST(ShmArenaTest, AllocatesAlignedRangesMergesFreedOnesAndSaysWhenFull) {
  ShmArena arena(0, 4096);
  auto a = arena.Allocate(100);  // 128 with alignment
  auto b = arena.Allocate(64);
  auto c = arena.Allocate(3000);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 128u);
  EXPECT_EQ(*c % 64, 0u);
  EXPECT_FALSE(arena.Allocate(1024));  // 4096 − 128 − 64 − 3008 = 896 left
  arena.Free(*a);
  arena.Free(*b);  // merges with a's range
  auto d = arena.Allocate(192);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, 0u);
  arena.Free(*d);
  arena.Free(*c);
  EXPECT_EQ(arena.free_bytes(), 4096u);
  EXPECT_TRUE(arena.Allocate(4096));
}

TEST(ShmRegionTest, AttachRefusesForeignNamesAndBadSizes) {
  auto region = ShmRegion::Create(ShmRegion::NewName(), 8192);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  std::memcpy((*region)->data() + 100, "hello", 5);
  auto other = ShmRegion::Attach((*region)->name(), 1 << 20);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(std::string((*other)->data() + 100, 5), "hello");  // the same memory
  EXPECT_EQ(ShmRegion::Attach((*region)->name(), 4096).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ShmRegion::Attach("/etc-passwd", 1 << 20).ok());
  EXPECT_FALSE(ShmRegion::Attach("/px-ps-a/b", 1 << 20).ok());
  // An object of the right name that is not the region the worker made.
  (*other)->data()[3] = 'X';
  EXPECT_EQ(ShmRegion::Attach((*region)->name(), 1 << 20).status().code(), StatusCode::kInvalidArgument);
  (*other)->data()[3] = (*region)->name()[3];
  EXPECT_TRUE(ShmRegion::Attach((*region)->name(), 1 << 20).ok());
  (*region)->Unlink();
  EXPECT_FALSE(ShmRegion::Attach((*region)->name(), 1 << 20).ok());  // gone by name
  EXPECT_EQ(std::string((*other)->data() + 100, 5), "hello");      // still mapped
}

// A worker's side of a shard connection, without sockets: its region and the
// messages it would send.
class ShardShmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = AsyncPlan(100, 1);
    plan_.variables[0].init.type = Initializer::Type::kZeros;
    Make();
  }

  void Make(size_t max_regions = 1024) {
    ShardOptions o;
    o.plan = plan_;
    o.max_shm_bytes = 1 << 20;
    o.max_shm_regions = max_regions;
    auto core = ShardCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    core_ = std::move(core).value();
  }

  static testing::Frames AttachFrames(const std::string& name) {
    testing::Frames f = Request(MakeHeader(Op::kAttach, 0, 0, 0, 0, 0, 0), {}, {});
    f.f[1] = name;
    return f;
  }

  // A region attached for peer `who`.
  std::unique_ptr<ShmRegion> Attach(const std::string& who, size_t bytes = 64 * 1024) {
    auto region = ShmRegion::Create(ShmRegion::NewName(), bytes);
    EXPECT_TRUE(region.ok()) << region.status().ToString();
    auto out = Send(core_.get(), AttachFrames((*region)->name()), who);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kAttach)) << out[0].frames[1];
    return std::move(region).value();
  }

  // A kFlagShm request: gradients (if any) copied into the region at
  // `values`, rows asked at `reply`.
  static testing::Frames ShmRequest(Op op, ShmRegion* region, const std::vector<int64_t>& ids,
                                    const std::vector<float>& grads, uint64_t values, uint64_t reply,
                                    int64_t clock = 0, uint32_t worker = 0) {
    Header h = MakeHeader(op, 0, 0, worker, static_cast<uint32_t>(ids.size()), kDim, clock);
    h.flags |= ps_wire::kFlagShm;
    testing::Frames f = Request(h, ids, {});
    if (!grads.empty() && region != nullptr && region->Contains(values, grads.size() * 4))
      std::memcpy(region->data() + values, grads.data(), grads.size() * 4);
    ps_wire::ShmRef ref{values, reply};
    f.f[2].assign(reinterpret_cast<const char*>(&ref), sizeof ref);
    return f;
  }

  std::vector<float> PullInline(const std::vector<int64_t>& ids) {
    auto out = Send(core_.get(), Request(MakeHeader(Op::kPull, 0, 0, 0, static_cast<uint32_t>(ids.size()), kDim, 0), ids, {}));
    EXPECT_EQ(out.size(), 1u);
    return testing::ReplyValues(out[0]);
  }

  static std::vector<float> Rows(ShmRegion* region, uint64_t offset, size_t n) {
    std::vector<float> v(n * kDim);
    std::memcpy(v.data(), region->data() + offset, v.size() * 4);
    return v;
  }

  void ExpectError(const testing::Frames& f, ErrorCode code, const std::string& who = "w") {
    const std::vector<float> before = PullInline({1, 2, 3});
    testing::ExpectOneErrorReply(Send(core_.get(), f, who), code);
    EXPECT_EQ(PullInline({1, 2, 3}), before);  // nothing applied
  }

  PsPlan plan_;
  std::unique_ptr<ShardCore> core_;
};

TEST_F(ShardShmTest, PushPullAndPullMoveRowsThroughTheRegion) {
  auto region = Attach("w");
  const std::vector<float> g = {1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4};
  auto out = Send(core_.get(), ShmRequest(Op::kPushPull, region.get(), {1, 2, 3}, g, 0, 4096), "w");
  ASSERT_EQ(out.size(), 1u);
  Header h = ReplyHeader(out[0]);
  ASSERT_EQ(h.op, static_cast<uint8_t>(Op::kPushPull)) << out[0].frames[1];
  EXPECT_TRUE(h.flags & ps_wire::kFlagShm);
  EXPECT_EQ(h.count, 3u);
  EXPECT_TRUE(out[0].values.empty());  // nothing on the socket
  const std::vector<float> rows = Rows(region.get(), 4096, 3);
  EXPECT_FLOAT_EQ(rows[4], -0.2f);
  EXPECT_EQ(rows, PullInline({1, 2, 3}));

  out = Send(core_.get(), ShmRequest(Op::kPull, region.get(), {3, 1}, {}, 0, 8192), "w");
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPull)) << out[0].frames[1];
  EXPECT_EQ(Rows(region.get(), 8192, 2), PullInline({3, 1}));

  out = Send(core_.get(), ShmRequest(Op::kPush, region.get(), {2}, {10, 10, 10, 10}, 512, 0), "w");
  ASSERT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
  EXPECT_FLOAT_EQ(PullInline({2})[0], -1.2f);
}

TEST_F(ShardShmTest, SyncPushPullIsAnsweredIntoEachWorkersRegionOnceTheStepApplied) {
  plan_.consistency = Consistency::kSync;
  plan_.sync_mean = false;
  Make();
  auto r0 = Attach("w0");
  auto r1 = Attach("w1");
  auto out = Send(core_.get(), ShmRequest(Op::kPushPull, r0.get(), {5}, {1, 1, 1, 1}, 0, 1024, 0, 0), "w0");
  EXPECT_TRUE(out.empty());  // held until worker 1 pushed step 0
  out = Send(core_.get(), ShmRequest(Op::kPushPull, r1.get(), {5}, {2, 2, 2, 2}, 0, 2048, 0, 1), "w1");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(Rows(r0.get(), 1024, 1), std::vector<float>(kDim, -0.3f));
  EXPECT_EQ(Rows(r1.get(), 2048, 1), std::vector<float>(kDim, -0.3f));
}

TEST_F(ShardShmTest, BadReferencesAndAttachesAreRefusedAndChangeNothing) {
  auto region = Attach("w", 64 * 1024);
  const std::vector<float> g(3 * kDim, 1.0f);
  // A peer that attached nothing.
  ExpectError(ShmRequest(Op::kPush, nullptr, {1, 2, 3}, g, 0, 0), ErrorCode::kSharedMemory, "stranger");
  // Gradients or rows outside the region (a PUSH_PULL whose reply cannot be
  // written is not applied either), offsets near 2^64, misaligned offsets.
  ExpectError(ShmRequest(Op::kPush, region.get(), {1, 2, 3}, g, 64 * 1024 - 16, 0), ErrorCode::kSharedMemory);
  ExpectError(ShmRequest(Op::kPushPull, region.get(), {1, 2, 3}, g, 0, 64 * 1024), ErrorCode::kSharedMemory);
  ExpectError(ShmRequest(Op::kPushPull, region.get(), {1, 2, 3}, g, ~uint64_t{0} - 3, 0),
              ErrorCode::kSharedMemory);
  ExpectError(ShmRequest(Op::kPush, region.get(), {1, 2, 3}, g, 2, 0), ErrorCode::kSharedMemory);
  // A reference frame of the wrong size; the SHM flag on a control op.
  testing::Frames f = ShmRequest(Op::kPush, region.get(), {1, 2, 3}, g, 0, 0);
  f.f[2].resize(12);
  ExpectError(f, ErrorCode::kBadCount);
  Header clock = MakeHeader(Op::kClock, 0, 0, 0, 0, 0, 0);
  clock.flags |= ps_wire::kFlagShm;
  ExpectError(Request(clock, {}, {}), ErrorCode::kBadFlags);
  // ATTACH of a foreign name, a missing object, one over max_shm_bytes.
  ExpectError(AttachFrames("/etc-shadow"), ErrorCode::kSharedMemory, "x");
  ExpectError(AttachFrames("/px-ps-does-not-exist"), ErrorCode::kSharedMemory, "x");
  auto big = ShmRegion::Create(ShmRegion::NewName(), 2 << 20);
  ASSERT_TRUE(big.ok());
  ExpectError(AttachFrames((*big)->name()), ErrorCode::kSharedMemory, "x");
  // The refused ATTACHes left "x" without a region; "w" still works.
  ExpectError(ShmRequest(Op::kPush, region.get(), {1}, {1, 1, 1, 1}, 0, 0), ErrorCode::kSharedMemory, "x");
  auto out = Send(core_.get(), ShmRequest(Op::kPush, region.get(), {1}, {1, 1, 1, 1}, 0, 0), "w");
  EXPECT_EQ(ReplyHeader(out[0]).op, static_cast<uint8_t>(Op::kPush)) << out[0].frames[1];
}

TEST_F(ShardShmTest, RegionsPerShardAreBounded) {
  Make(/*max_regions=*/1);
  auto a = Attach("a");
  auto b = ShmRegion::Create(ShmRegion::NewName(), 8192);
  ASSERT_TRUE(b.ok());
  ExpectError(AttachFrames((*b)->name()), ErrorCode::kSharedMemory, "b");
  auto again = Attach("a");  // re-attaching replaces, within the bound
}

// Clients against real shard servers on ipc://.
class ShmClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("px-shm-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    plan_ = AsyncPlan(1000, 2);
    StartShards("shard");
  }

  // Two shards of plan_ on ipc://<dir_>/<name><s>, replacing any running.
  void StartShards(const std::string& name) {
    servers_.clear();
    endpoints_ = testing::StartShardServers(plan_, &servers_, [&](uint32_t s, ShardServerOptions* o) {
      o->listen = "ipc://" + (dir_ / (name + std::to_string(s))).string();
    });
    ASSERT_EQ(endpoints_.size(), plan_.num_shards);
  }
  void TearDown() override {
    servers_.clear();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<PsClient> Client(bool shm, size_t bytes = 1 << 20) {
    PsClientOptions o;
    o.plan = plan_;
    o.shard_endpoints = endpoints_;
    o.shared_memory = shm;
    o.shared_memory_bytes = bytes;
    auto c = PsClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    // The ATTACH went out first on each socket, so its answer is handled
    // before the STATS reply.
    std::vector<std::string> stats;
    Ok(c->get(), (*c)->Stats(&stats));
    return std::move(c).value();
  }

  static void Ok(PsClient* c, StatusOr<Ticket> t) {
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    Status s = c->Wait(*t, DeadlineIn(10'000));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  static int64_t DataBytes(const TransportBytes& t) {
    return t.push_sent + t.push_received + t.pull_sent + t.pull_received;
  }

  std::filesystem::path dir_;
  PsPlan plan_;
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<ShardServer>> servers_;
};

TEST_F(ShmClientTest, RowsAndGradientsGoThroughSharedMemoryAndMatchTheSocketPath) {
  auto shm = Client(true);
  auto plain = Client(false);
  // Each shard mapped the one client's region (STATS "shm_regions").
  std::vector<std::string> stats;
  Ok(plain.get(), plain->Stats(&stats));
  for (const auto& j : stats) EXPECT_NE(j.find("\"shm_regions\":1"), std::string::npos) << j;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 1000; i += 7) ids.push_back(i);
  ids.push_back(14);  // a repeat
  std::vector<float> grads(ids.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i % 97);
  std::vector<float> via_shm, via_socket;
  const int64_t before = DataBytes(shm->transport_bytes());
  Ok(shm.get(), shm->PushPull(0, ids, grads, 0, &via_shm));
  const int64_t shm_bytes = DataBytes(shm->transport_bytes()) - before;
  Ok(plain.get(), plain->Pull(0, ids, 0, &via_socket));
  EXPECT_EQ(via_shm, via_socket);
  // 143 distinct rows of 16 bytes each way would be 4.6 KB on the socket; the
  // shared-memory request carries headers, ids and offsets only.
  const size_t distinct = ids.size() - 1;
  EXPECT_LT(shm_bytes, static_cast<int64_t>(distinct * 8 + 4 * 100)) << shm_bytes;
  // A pull and a push through shared memory agree with the socket path too.
  Ok(shm.get(), shm->Push(0, ids, grads, 1));
  Ok(shm.get(), shm->Pull(0, ids, 2, &via_shm));
  Ok(plain.get(), plain->Pull(0, ids, 2, &via_socket));
  EXPECT_EQ(via_shm, via_socket);
}

TEST_F(ShmClientTest, RequestsThatDoNotFitTheRegionGoInline) {
  auto shm = Client(true, /*bytes=*/4096);  // 256 rows of 16 bytes at most, both spans
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 1000; i += 2) ids.push_back(i);  // 250 rows per shard: 4 KB each way
  std::vector<float> grads(ids.size() * kDim, 0.5f), rows, expect;
  const int64_t before = DataBytes(shm->transport_bytes());
  Ok(shm.get(), shm->PushPull(0, ids, grads, 0, &rows));
  EXPECT_GT(DataBytes(shm->transport_bytes()) - before, static_cast<int64_t>(ids.size() * kDim * 4 * 2));
  auto plain = Client(false);
  Ok(plain.get(), plain->Pull(0, ids, 1, &expect));
  EXPECT_EQ(rows, expect);
  // A smaller request fits and goes through shared memory: 40 rows inline
  // would be 2 × 64 × 2 + 40 × 8 + 40 × 16 = 1216 bytes; here the rows stay
  // out of the socket (at most 2 parts: 2 × (64 + 16 + 64) + 40 × 8 = 608).
  std::vector<int64_t> few;
  for (int64_t i = 0; i < 40; ++i) few.push_back(i);
  const int64_t small_before = DataBytes(shm->transport_bytes());
  Ok(shm.get(), shm->Pull(0, few, 1, &rows));
  EXPECT_LE(DataBytes(shm->transport_bytes()) - small_before, 608);
  Ok(plain.get(), plain->Pull(0, few, 1, &expect));
  EXPECT_EQ(rows, expect);
}

// Threads sharing one client: requests of every size, some larger than the
// region's free space (inline), others through it, all at once. lr 1 on
// rows that start at 0 and gradients of 1: each row ends at minus the number
// of pushes that named it, whichever way they went.
TEST_F(ShmClientTest, ConcurrentRequestsOfOneClientShareTheRegionCorrectly) {
  plan_.variables[0].init.type = Initializer::Type::kZeros;
  plan_.variables[0].optimizer.lr = 1.0f;
  ASSERT_NO_FATAL_FAILURE(StartShards("zero-shard"));
  auto shm = Client(true, /*bytes=*/16 * 1024);  // ~16 KB: about 500 rows of 16 B in flight
  constexpr int kThreads = 4, kRequests = 40;
  std::vector<std::vector<int>> pushes(kThreads, std::vector<int>(1000, 0));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(17 + t);
      for (int i = 0; i < kRequests; ++i) {
        std::vector<int64_t> ids;
        const int n = 1 + static_cast<int>(rng() % 700);
        for (int j = 0; j < n; ++j) ids.push_back(static_cast<int64_t>(rng() % 1000));
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        for (int64_t id : ids) ++pushes[t][id];
        std::vector<float> g(ids.size() * kDim, 1.0f), rows;
        auto ticket = i % 2 ? shm->PushPull(0, ids, g, i, &rows) : shm->Push(0, ids, g, i);
        ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
        Status s = shm->Wait(*ticket, DeadlineIn(10'000));
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (float v : rows) ASSERT_LE(v, -1.0f);  // at least this push applied
      }
    });
  }
  for (auto& th : threads) th.join();
  // Both routes were taken: the gradient bytes on the socket lie strictly
  // between none (all through the region) and all of them (all inline).
  int64_t rows_pushed = 0;
  for (const auto& p : pushes)
    for (int c : p) rows_pushed += c;
  const int64_t frames = int64_t{kThreads} * kRequests * 2 * (64 + 16);  // headers + references, at most
  const int64_t push_sent = shm->transport_bytes().push_sent;
  EXPECT_GT(push_sent, rows_pushed * 8 + frames) << "nothing went inline";
  EXPECT_LT(push_sent, rows_pushed * (8 + kDim * 4)) << "nothing went through shared memory";
  std::vector<int64_t> all(1000);
  for (int64_t i = 0; i < 1000; ++i) all[i] = i;
  std::vector<float> rows;
  Ok(shm.get(), shm->Pull(0, all, 0, &rows));
  for (int64_t id = 0; id < 1000; ++id) {
    int n = 0;
    for (int t = 0; t < kThreads; ++t) n += pushes[t][id];
    for (uint32_t j = 0; j < kDim; ++j) ASSERT_EQ(rows[id * kDim + j], -static_cast<float>(n)) << "row " << id;
  }
}

TEST_F(ShmClientTest, TcpShardsOnThisMachineUseItAndShardsThatCannotMapItDoNot) {
  // TCP shards: the same machine, so shared memory works over TCP too. A
  // shard that cannot map the region (here: one limited to 1 MiB regions;
  // in a job: one on another machine) refuses ATTACH and the values stay on
  // the socket.
  std::vector<std::unique_ptr<ShardServer>> tcp;
  const std::vector<std::string> eps =
      testing::StartShardServers(plan_, &tcp, [](uint32_t s, ShardServerOptions* o) {
        if (s == 1) o->shard.max_shm_bytes = 1 << 20;
      });
  ASSERT_EQ(eps.size(), 2u);
  PsClientOptions o;
  o.plan = plan_;
  o.shard_endpoints = eps;
  o.shared_memory = true;
  o.shared_memory_bytes = 2 << 20;
  auto c = PsClient::Create(o);
  ASSERT_TRUE(c.ok());
  std::vector<std::string> stats;
  Ok(c->get(), (*c)->Stats(&stats));
  // Rows of one partition each: 200 rows × 16 bytes = 3.2 KB inline.
  std::vector<int64_t> on0, on1;
  const Partitioner partition_of(plan_.variables[0]);
  for (int64_t id = 0; id < 1000 && (on0.size() < 200 || on1.size() < 200); ++id)
    (partition_of(id) == 0 ? on0 : on1).push_back(id);
  on0.resize(200);
  on1.resize(200);
  std::vector<float> rows, expect;
  auto plain = Client(false);
  int64_t before = (*c)->transport_bytes().pull_received;
  Ok(c->get(), (*c)->Pull(0, on0, 0, &rows));
  EXPECT_EQ((*c)->transport_bytes().pull_received - before, 64);  // header only: rows in memory
  Ok(plain.get(), plain->Pull(0, on0, 0, &expect));
  EXPECT_EQ(rows, expect);
  before = (*c)->transport_bytes().pull_received;
  Ok(c->get(), (*c)->Pull(0, on1, 0, &rows));
  EXPECT_EQ((*c)->transport_bytes().pull_received - before, 64 + 200 * 16);  // rows inline
  Ok(plain.get(), plain->Pull(0, on1, 0, &expect));
  EXPECT_EQ(rows, expect);
}

}  // namespace
}  // namespace parallax::ps
