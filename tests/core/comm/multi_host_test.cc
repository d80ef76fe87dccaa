// 2 hosts x 2 ranks: the ranks are threads of this process, each moved into
// its host's network namespace (tests/testing/net_hosts.h) and bound to its
// host's address, so the communicator tells the hosts apart by itself (the
// namespaces differ) and every byte between hosts crosses a veth whose
// kernel counters are read here. Needs root and `ip netns`; skips with the
// reason where the sandbox refuses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <barrier>
#include <random>
#include <thread>

#include "core/comm/communicator.h"
#include "core/comm/rendezvous_store.h"
#include "tests/testing/net_hosts.h"

namespace parallax::comm {
namespace {

using parallax::testing::LinkBytes;
using parallax::testing::NetHosts;
using parallax::testing::NetHostsOptions;
using std::chrono::milliseconds;

constexpr int kHosts = 2;
constexpr int kRanks = 4;  // ranks 0, 1 on host 0; 2, 3 on host 1

Deadline Soon() { return DeadlineAfter(milliseconds(60'000)); }

class MultiHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns (euid " << geteuid() << ")";
    if (std::string failed = net_.Create(); !failed.empty()) {
      GTEST_SKIP() << "the sandbox refused `" << failed << "`";
    }
  }

  static int HostOf(int rank) { return rank / (kRanks / kHosts); }

  // Runs fn(rank) on one thread per rank, each inside its host.
  void RunInHosts(const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        EXPECT_EQ(net_.EnterInThisThread(HostOf(r)), "") << "rank " << r;
        fn(r);  // even so: the others wait for it
      });
    }
    for (auto& t : threads) t.join();
  }

  LinkBytes Link(int host) const {
    auto bytes = net_.Bytes(host);
    EXPECT_TRUE(bytes.has_value()) << "host " << host;
    return bytes.value_or(LinkBytes{});
  }

  NetHosts net_{NetHostsOptions{kHosts, 0}};
  std::unique_ptr<RendezvousStore> store_ = NewInMemoryRendezvousStore();
};

// The hierarchical all-reduce (shared memory within a host, one rank per
// host on the network) gives what the flat Gloo ring gives, and each host's
// link carries one rank's ring bytes among the hosts, where the flat ring
// over 4 ranks puts 1.5 times that on it.
TEST_F(MultiHostTest, HierarchicalEqualsFlatAndEachLinkCarriesOneRanksBytes) {
  const size_t n = 2u << 20;  // 8 MiB of float32
  std::vector<std::vector<float>> hier(kRanks), flat(kRanks);
  std::vector<std::unique_ptr<Communicator>> hier_comm(kRanks), flat_comm(kRanks);
  std::barrier sync(kRanks + 1);
  std::vector<LinkBytes> before(kHosts), after_hier(kHosts), after_flat(kHosts);
  std::thread measure([&] {
    sync.arrive_and_wait();  // communicators made
    for (int h = 0; h < kHosts; ++h) before[h] = Link(h);
    sync.arrive_and_wait();  // go
    sync.arrive_and_wait();  // hierarchical all-reduce done
    for (int h = 0; h < kHosts; ++h) after_hier[h] = Link(h);
    sync.arrive_and_wait();  // go
    sync.arrive_and_wait();  // flat all-reduce done
    for (int h = 0; h < kHosts; ++h) after_flat[h] = Link(h);
  });
  RunInHosts([&](int r) {
    CommunicatorOptions o;
    o.rank = r;
    o.world_size = kRanks;
    o.bind_address = net_.Host(HostOf(r));
    o.rendezvous_timeout = milliseconds(30'000);
    o.verify_arguments = false;  // only the all-reduce on the links
    o.key_prefix = "hier";
    auto h = Communicator::Create(o, store_.get());
    o.key_prefix = "flat";
    o.shared_memory = false;
    auto f = Communicator::Create(o, store_.get());
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (h.ok()) hier_comm[r] = std::move(h).value();
    if (f.ok()) flat_comm[r] = std::move(f).value();
    std::mt19937 gen(7 + r);
    std::uniform_real_distribution<float> uniform(-1, 1);
    hier[r].resize(n);
    for (float& v : hier[r]) v = uniform(gen);
    flat[r] = hier[r];
    const bool ready = hier_comm[r] != nullptr && flat_comm[r] != nullptr;
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    if (ready) {
      EXPECT_TRUE(hier_comm[r]->AllReduce(hier[r], ReduceOp::kSum, Soon()).ok()) << "rank " << r;
    }
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    if (ready) {
      EXPECT_TRUE(flat_comm[r]->AllReduce(flat[r], ReduceOp::kSum, Soon()).ok()) << "rank " << r;
    }
    sync.arrive_and_wait();
  });
  measure.join();
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(hier[r], hier[0]) << "rank " << r;
    for (size_t i = 0; i < n; i += 997) ASSERT_NEAR(hier[r][i], flat[r][i], 1e-5f) << i;
  }
  // Followers put nothing on a socket; each leader its ring among 2 hosts.
  EXPECT_EQ(hier_comm[1]->wire_bytes().allreduce, WireBytes{});
  EXPECT_EQ(hier_comm[3]->wire_bytes().allreduce, WireBytes{});
  for (int h = 0; h < kHosts; ++h) {
    const WireBytes leader = hier_comm[h * 2]->wire_bytes().allreduce;
    const double link_sent = static_cast<double>(after_hier[h].sent - before[h].sent);
    const double link_received = static_cast<double>(after_hier[h].received - before[h].received);
    // What the leader's sockets moved, plus TCP/IP and Ethernet headers and
    // the ACKs of what it received (a few percent).
    EXPECT_GE(link_sent, static_cast<double>(leader.sent)) << "host " << h;
    EXPECT_LT(link_sent, 1.1 * static_cast<double>(leader.sent)) << "host " << h;
    EXPECT_GE(link_received, static_cast<double>(leader.received)) << "host " << h;
    EXPECT_LT(link_received, 1.1 * static_cast<double>(leader.received)) << "host " << h;
    // One rank's ring among 2 hosts: about the buffer each way.
    EXPECT_GT(static_cast<double>(leader.sent), n * 4.0);
    EXPECT_LT(static_cast<double>(leader.sent), n * 4.0 * 1.01);
    const double flat_sent = static_cast<double>(after_flat[h].sent - after_hier[h].sent);
    EXPECT_GT(flat_sent, 1.4 * n * 4.0) << "host " << h << ": the flat ring crosses it 1.5x";
    EXPECT_LT(link_sent, 0.75 * flat_sent) << "host " << h;
  }
}

}  // namespace
}  // namespace parallax::comm
