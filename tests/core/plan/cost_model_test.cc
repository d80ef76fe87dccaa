#include "core/plan/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace parallax::plan {
namespace {

VariableStats Sparse(int64_t rows, int64_t dim, double alpha, int partitions = 1) {
  VariableStats v;
  v.name = "emb";
  v.sparse = true;
  v.rows = rows;
  v.dim = dim;
  v.alpha = alpha;
  v.partitions = partitions;
  return v;
}

// The default figures with the all-reduce as Gloo's ring over every rank
// (no shared memory): what most tests here are about.
CostOptions Ring() {
  CostOptions o;
  o.shm_allreduce = false;
  return o;
}

// Figures that make the predicted time the link bytes alone (1 GB/s, no
// per-operation cost, the ring all-reduce): the choice is by bytes, as before
// time counted.
CostOptions BytesOnly() {
  CostOptions o = Ring();
  o.bandwidth_bytes_per_s = 1e9;
  o.collective_latency_s = 0;
  o.ps_rtt_s = 0;
  return o;
}

CostOptions WithLatency(double collective_s, double ps_rtt_s) {
  CostOptions o = BytesOnly();
  o.collective_latency_s = collective_s;
  o.ps_rtt_s = ps_rtt_s;
  return o;
}

TEST(CostModelTest, AllReduceIsTheRingVolume) {
  VariableStats dense;
  dense.name = "w";
  dense.rows = 1;
  dense.dim = 1000;
  // 4 workers: 2·3/4·1000·4 = 6000 bytes each way.
  EXPECT_DOUBLE_EQ(AllReduceCost(dense, {.workers = 4}, Ring()).bytes, 12000);
  EXPECT_DOUBLE_EQ(AllReduceCost(dense, {.workers = 1}, Ring()).bytes, 0);
  Choice c = ChoosePath(dense, {.workers = 4, .shards = 2}, {});
  EXPECT_EQ(c.path, VariablePath::kAllReduce);
  EXPECT_NE(c.reason.find("dense"), std::string::npos) << c.reason;
}

// 4 ranks, a 1000-float buffer: through shared memory on one host nothing
// crosses a socket; on 2 hosts only each host's first rank is on the
// network, in a ring of 2; one rank per host is Gloo's ring again.
TEST(CostModelTest, SharedMemoryAndHierarchicalAllReduce) {
  VariableStats dense;
  dense.name = "w";
  dense.rows = 1;
  dense.dim = 1000;
  CostOptions o;  // shm_allreduce: the default
  o.bandwidth_bytes_per_s = 1e9;
  o.collective_latency_s = 100e-6;
  o.shm_call_s = 10e-6;
  o.shm_bytes_per_s = 2e9;
  const PathCost one = AllReduceCost(dense, {.workers = 4, .hosts = 1}, o);
  EXPECT_DOUBLE_EQ(one.bytes, 0);
  EXPECT_DOUBLE_EQ(one.link_bytes, 0);
  EXPECT_NEAR(one.seconds, 10e-6 + 4000 / 2e9, 1e-12);
  // 2 hosts: the leaders' ring of 2 moves 2·1/2·4000 each way; the mean over
  // a host's 2 ranks is half of the leader's 2 · 4000.
  const PathCost two = AllReduceCost(dense, {.workers = 4, .hosts = 2}, o);
  EXPECT_DOUBLE_EQ(two.link_bytes, 4000);
  EXPECT_DOUBLE_EQ(two.bytes, 4000);
  EXPECT_NEAR(two.seconds, 4000e-9 + 10e-6 + 1.5 * 100e-6 + 2 * 4000 / 2e9, 1e-12);
  // The ring over all 4 ranks would put 2 ranks' 2·3/4·4000 on each link.
  EXPECT_DOUBLE_EQ(AllReduceCost(dense, {.workers = 4, .hosts = 2}, Ring()).link_bytes, 12000);
  // 8 ranks on 2 hosts: 4000 on a link instead of 4 · 2·7/8 · 4000 = 28000.
  EXPECT_DOUBLE_EQ(AllReduceCost(dense, {.workers = 8, .hosts = 2}, o).link_bytes, 4000);
  EXPECT_DOUBLE_EQ(AllReduceCost(dense, {.workers = 8, .hosts = 2}, Ring()).link_bytes, 28000);
  // One rank per host: nothing to share, Gloo's ring.
  EXPECT_DOUBLE_EQ(AllReduceCost(dense, {.workers = 4, .hosts = 4}, o).bytes, 12000);
  // A sparse table of as many elements all-reduced whole: the same bytes and
  // 2 more passes (its gradient made whole, every row updated).
  VariableStats table = Sparse(250, 4, 0.1);
  EXPECT_DOUBLE_EQ(AllReduceCost(table, {.workers = 4, .hosts = 2}, o).link_bytes, 4000);
  EXPECT_NEAR(AllReduceCost(table, {.workers = 4, .hosts = 1}, o).seconds,
              10e-6 + 3 * 4000 / 2e9, 1e-12);
  EXPECT_NEAR(AllReduceCost(table, {.workers = 4, .hosts = 2}, o).seconds,
              4000e-9 + 10e-6 + 1.5 * 100e-6 + 4 * 4000 / 2e9, 1e-12);
}

// A dynamic table has rows = 0: priced by its rows, a replica would cost
// nothing. Only the PS can hold it, so the other paths are infeasible, with
// the reason, and the choice is the PS (or nothing without shards).
TEST(CostModelTest, ADynamicTableIsFeasibleOnlyOnThePs) {
  VariableStats v = Sparse(0, 16, 1.0);
  v.dynamic = true;
  ClusterShape c{.workers = 4, .hosts = 2, .shards = 2};
  const Choice choice = ChoosePath(v, c, Ring());
  EXPECT_EQ(choice.path, VariablePath::kPs);
  EXPECT_TRUE(choice.ps.feasible);
  for (const PathCost* off : {&choice.allreduce, &choice.allgather}) {
    EXPECT_FALSE(off->feasible);
    EXPECT_NE(off->why_not.find("dynamic table"), std::string::npos) << off->why_not;
  }
  c.shards = 0;
  const Choice none = ChoosePath(v, c, Ring());
  EXPECT_EQ(none.path, VariablePath::kPs);
  EXPECT_NE(none.reason.find("no feasible path"), std::string::npos) << none.reason;
}

TEST(CostModelTest, GlooFramingOfAnAllGatheredVariable) {
  // Per direction, 2 workers: 1 gloo::allgather (the row counts) of 2
  // transfers and 1 gloo::allgatherv (the packed rows) of 1, 3 preambles of
  // 48 bytes per transfer: 3 · 144 = 432, plus the 4-byte count: 436 (the
  // arguments are checked only the first time a call shape is used).
  EXPECT_DOUBLE_EQ(AllGatherFramingBytes(2), 436);
  EXPECT_DOUBLE_EQ(AllGatherFramingBytes(4), 3 * 436);
  EXPECT_DOUBLE_EQ(AllGatherFramingBytes(1), 0);
}

TEST(CostModelTest, HandComputedSparseCosts) {
  // 10,000 × 16, α = 0.01: 100 rows of 8 + 64 bytes each.
  VariableStats v = Sparse(10'000, 16, 0.01, /*partitions=*/2);
  ClusterShape two{.workers = 2, .hosts = 1, .shards = 2};
  // PS: pull 100·72 + 2 messages · 2 headers · 64, push the same.
  EXPECT_DOUBLE_EQ(PsCost(v, two, {}, false).bytes, 2 * (7200 + 256));
  // All-gather: (N−1)·(100·72 + Gloo's 436 bytes of framing) each way.
  EXPECT_DOUBLE_EQ(AllGatherCost(v, two, {}).bytes, 2 * (7200 + 436));
  // All-reduce of the whole table (Gloo's ring): 2·1/2·160,000·4 each way.
  EXPECT_DOUBLE_EQ(AllReduceCost(v, two, Ring()).bytes, 2 * 640'000);
  // A host's link: its 2 workers' traffic, and for PS its shards' too.
  EXPECT_DOUBLE_EQ(AllGatherCost(v, two, {}).link_bytes, 2 * (7200 + 436));
  EXPECT_DOUBLE_EQ(PsCost(v, two, {}, false).link_bytes, 2 * 2 * (7200 + 256));
  // Predicted times: link bytes at 1 GB/s plus the operations.
  const CostOptions figures = WithLatency(/*collective_s=*/100e-6, /*ps_rtt_s=*/200e-6);
  EXPECT_NEAR(AllGatherCost(v, two, figures).seconds, 15'272e-9 + 2 * 100e-6, 1e-12);
  EXPECT_NEAR(PsCost(v, two, figures, false).seconds, 29'824e-9 + 2 * 200e-6, 1e-12);
  // All-reduce: one fusion-bucket call of 3(N−1) rounds = 1.5 · (N−1) calls.
  EXPECT_NEAR(AllReduceCost(v, two, figures).seconds, 1'280'000e-9 + 1.5 * 100e-6, 1e-12);
  // By bytes, two workers: all-gather is cheapest; four: it grows with N and PS wins.
  EXPECT_EQ(ChoosePath(v, two, BytesOnly()).path, VariablePath::kAllGather);
  ClusterShape four{.workers = 4, .hosts = 1, .shards = 2};
  EXPECT_DOUBLE_EQ(AllGatherCost(v, four, {}).bytes, 2 * 3 * (7200 + 436));
  Choice c = ChoosePath(v, four, BytesOnly());
  EXPECT_EQ(c.path, VariablePath::kPs);
  // The reason shows the predicted times.
  EXPECT_NE(c.reason.find("ps 0.0596 ms/step"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("allgather 0.0916 ms/step"), std::string::npos) << c.reason;
  // Four workers on four hosts, a shard on each: the same choice; a host's
  // link carries its worker's traffic to the 3 remote shards and its shard's
  // to the 3 remote workers, 3/4 of a worker's 14,912 bytes each way.
  ClusterShape spread{.workers = 4, .hosts = 4, .shards = 4};
  EXPECT_DOUBLE_EQ(PsCost(v, spread, {}, false).link_bytes, 0.75 * 14'912);
  EXPECT_EQ(ChoosePath(v, spread, BytesOnly()).path, VariablePath::kPs);
}

// A worker's rows whose shard runs on its own host go through loopback, not
// the link: on 2 hosts with a shard each, half of them. The worker sends
// 8,256 bytes a step (ids 800 + pushed rows 7,200 + 4 headers of 64) and
// receives 6,656 (pulled rows 6,400 + 4 headers): its host's link carries
// the remote half of what it sends and its shard's replies to the other
// host's worker, 4,128 + 3,328 = 7,456 each way; 7,456 go through loopback.
// The model once put all 14,912 on the link: its predicted PS time was 1.7-3.4
// times the wait measured on the emulated cluster at 2 and 4 hosts.
TEST(CostModelTest, HostLocalPsBytesStayOffTheLink) {
  VariableStats v = Sparse(10'000, 16, 0.01, /*partitions=*/2);
  const ClusterShape two_hosts{.workers = 2, .hosts = 2, .shards = 2};
  CostOptions o = WithLatency(0, 0);
  o.loopback_bytes_per_s = 4e9;
  const PathCost c = PsCost(v, two_hosts, o, false);
  EXPECT_DOUBLE_EQ(c.bytes, 14'912);
  EXPECT_DOUBLE_EQ(c.link_bytes, 7'456);
  EXPECT_DOUBLE_EQ(c.loopback_bytes, 7'456);
  EXPECT_NEAR(c.seconds, 7'456 / 1e9 + 7'456 / 4e9, 1e-12);
  // One shard on 2 hosts: its host's link carries the other host's whole
  // traffic to it (its own worker's stays home): the busier direction is
  // the shard's replies and the remote pushes, 8,256.
  const PathCost one_shard = PsCost(v, {.workers = 2, .hosts = 2, .shards = 1}, o, false);
  EXPECT_DOUBLE_EQ(HostLocalShardFraction({.workers = 2, .hosts = 2, .shards = 1}), 1.0);
  EXPECT_DOUBLE_EQ(one_shard.link_bytes, 8'256);
  // Shared memory takes the local rows' values off loopback, not the link.
  o.ps_shared_memory = true;
  const PathCost shm = PsCost(v, two_hosts, o, false);
  EXPECT_DOUBLE_EQ(shm.link_bytes, 7'456);
  EXPECT_LT(shm.loopback_bytes, 7'456 - 6'000);
  // On one host loopback is the link and carries everything.
  EXPECT_DOUBLE_EQ(PsCost(v, {.workers = 2, .hosts = 1, .shards = 2}, WithLatency(0, 0), false)
                       .link_bytes,
                   2 * 14'912);
}

// Shards on PS hosts of their own: nothing is local. The worker of the test
// above sends 8,256 and receives 6,656 a step, all over its host's link
// whatever the number of workers; the PS host with the most shards carries
// its share of every worker's: at 8 workers and 2 shards on 2 PS hosts, half
// of 8 · 8,256 into it.
TEST(CostModelTest, OnPsHostsAWorkerHostsLinkCarriesItsOwnWorkersOnly) {
  VariableStats v = Sparse(10'000, 16, 0.01, /*partitions=*/2);
  CostOptions o = WithLatency(0, 0);
  o.loopback_bytes_per_s = 4e9;
  for (int n : {2, 4, 8}) {
    const ClusterShape shape{.workers = n, .hosts = n, .shards = 2, .ps_hosts = 2};
    EXPECT_DOUBLE_EQ(HostLocalShardFraction(shape), 0.0);
    const PathCost c = PsCost(v, shape, o, false);
    EXPECT_DOUBLE_EQ(c.bytes, 14'912) << n;
    EXPECT_DOUBLE_EQ(c.link_bytes, 8'256) << n;
    EXPECT_DOUBLE_EQ(c.loopback_bytes, 0) << n;
    EXPECT_DOUBLE_EQ(c.ps_host_link_bytes, n * 8'256 / 2.0) << n;
    // The busier of the two links sets the time.
    EXPECT_NEAR(c.seconds, std::max(8'256.0, n * 8'256 / 2.0) / 1e9, 1e-12) << n;
  }
  // 3 shards on 2 PS hosts: one host has 2 of 3.
  const PathCost uneven =
      PsCost(v, {.workers = 4, .hosts = 4, .shards = 3, .ps_hosts = 2}, o, false);
  EXPECT_DOUBLE_EQ(uneven.ps_host_link_bytes, 4 * 8'256 * 2.0 / 3.0);
  // Shared memory saves nothing: no shard is on the worker's machine.
  o.ps_shared_memory = true;
  EXPECT_DOUBLE_EQ(
      PsCost(v, {.workers = 2, .hosts = 2, .shards = 2, .ps_hosts = 2}, o, false).bytes, 14'912);
}

TEST(CostModelTest, ChoiceFlipsFromAllGatherToPsAsPerOperationLatencyGrows) {
  // Two workers: all-gather puts 15,272 bytes on the host's link, PS 29,824
  // (its shard's side too): 14.552 us apart at 1 GB/s. Both take 2
  // operations a step, so the flip comes as a collective call gets dearer
  // than a PS round trip: at c − r = 7.276 us.
  VariableStats v = Sparse(10'000, 16, 0.01, /*partitions=*/2);
  ClusterShape two{.workers = 2, .hosts = 1, .shards = 2};
  EXPECT_EQ(ChoosePath(v, two, WithLatency(0, 0)).path, VariablePath::kAllGather);
  EXPECT_EQ(ChoosePath(v, two, WithLatency(1e-3, 1e-3)).path, VariablePath::kAllGather);
  EXPECT_EQ(ChoosePath(v, two, WithLatency(7e-6, 0)).path, VariablePath::kAllGather);
  EXPECT_EQ(ChoosePath(v, two, WithLatency(8e-6, 0)).path, VariablePath::kPs);
  EXPECT_EQ(ChoosePath(v, two, WithLatency(107e-6, 100e-6)).path, VariablePath::kAllGather);
  EXPECT_EQ(ChoosePath(v, two, WithLatency(108e-6, 100e-6)).path, VariablePath::kPs);
  // Collective calls dear and PS round trips dearer: all-reduce of the whole
  // table (1.28 ms of bytes + 1.5 calls = 5.78 ms) beats all-gather's 2
  // calls (6.02 ms) and the PS (6.03 ms).
  Choice slow_ps = ChoosePath(v, two, WithLatency(3e-3, 3e-3));
  EXPECT_EQ(slow_ps.path, VariablePath::kAllReduce) << slow_ps.reason;
  EXPECT_NE(slow_ps.reason.find("allreduce 5.78 ms/step"), std::string::npos) << slow_ps.reason;
  // W3's output embedding at 2 workers with the figures measured here (50,000
  // × 128, ≈ 2,900 rows a step): all-gather by bytes, PS by time when the
  // all-reduce is Gloo's ring over the sockets.
  VariableStats out = Sparse(50'000, 128, 0.058);
  EXPECT_EQ(ChoosePath(out, two, BytesOnly()).path, VariablePath::kAllGather);
  Choice w3 = ChoosePath(out, two, Ring());  // this machine's figures
  EXPECT_EQ(w3.path, VariablePath::kPs) << w3.reason;
  EXPECT_NE(w3.reason.find("ps 20.1 ms/step"), std::string::npos) << w3.reason;
  // Through shared memory (the default) the 2 workers of one host reduce the
  // whole 25.6 MB table with nothing on the link, 20 us + 25.6 MB / 1.4 GB/s
  // = 18.3 ms, but making its gradient whole and updating every row are 2
  // more passes: 54.9 ms, and the PS stays. On 2 hosts of one worker each
  // there is no host to share: the ring, and the PS.
  Choice w3_shm = ChoosePath(out, two, {});
  EXPECT_EQ(w3_shm.path, VariablePath::kPs) << w3_shm.reason;
  EXPECT_NE(w3_shm.reason.find("allreduce 54.9 ms/step (0 B"), std::string::npos) << w3_shm.reason;
  // Its bias (50,000 × 1, 200 KB) is all-reduced whole: 20 us + 3 passes.
  Choice bias = ChoosePath(Sparse(50'000, 1, 0.058), two, {});
  EXPECT_EQ(bias.path, VariablePath::kAllReduce) << bias.reason;
  EXPECT_NE(bias.reason.find("allreduce 0.449 ms/step (0 B"), std::string::npos) << bias.reason;
  EXPECT_EQ(ChoosePath(out, {.workers = 2, .hosts = 2, .shards = 2}, {}).path, VariablePath::kPs);
}

TEST(CostModelTest, ChoiceFlipsFromAllReduceToPsAsAlphaFalls) {
  ClusterShape cluster{.workers = 4, .hosts = 1, .shards = 1};
  // 1000 × 16 on 4 workers of one host: all-reduce puts 4 · 96,000 bytes on
  // the host's link; PS 4 · (144,000·α + 256).
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 1.0), cluster, BytesOnly()).path, VariablePath::kAllReduce);
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.7), cluster, BytesOnly()).path, VariablePath::kAllReduce);
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.6), cluster, BytesOnly()).path, VariablePath::kPs);
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.01), cluster, BytesOnly()).path, VariablePath::kPs);
  // With per-operation costs and a slow link, the same flip: at 10 MB/s
  // all-reduce takes 38.4 ms + 1.5 · 3 · 1 ms = 42.9 ms, PS 0.4 us per byte
  // · (144,000·α + 256) + 2 · 2 ms: 44.4 ms at α = 0.7, 38.7 ms at 0.6.
  CostOptions slow = WithLatency(1e-3, 2e-3);
  slow.bandwidth_bytes_per_s = 10e6;
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.7), cluster, slow).path, VariablePath::kAllReduce);
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.6), cluster, slow).path, VariablePath::kPs);
  // Expensive collective calls (10 ms: 45 ms per all-reduce at 4 workers):
  // PS even when every row changes.
  CostOptions costly = slow;
  costly.collective_latency_s = 10e-3;
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 1.0), cluster, costly).path, VariablePath::kPs);
  for (const CostOptions& o : {BytesOnly(), slow, Ring()}) {
    VariablePath previous = VariablePath::kAllReduce;
    for (double alpha = 1.0; alpha > 0.01; alpha *= 0.8) {
      VariablePath p = ChoosePath(Sparse(1000, 16, alpha), cluster, o).path;
      if (previous != VariablePath::kAllReduce) {
        EXPECT_NE(p, VariablePath::kAllReduce) << "α = " << alpha;  // never flips back
      }
      previous = p;
    }
    EXPECT_EQ(previous, VariablePath::kPs);
  }
  // A handful of rows: Gloo's framing of all-gather's 2 calls (3 · 436
  // bytes each way at 4 workers) outweighs PS's 4 headers of 64.
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.001), cluster, BytesOnly()).path, VariablePath::kPs);
}

TEST(CostModelTest, LocalAggregationSharesTheHostsPush) {
  VariableStats v = Sparse(1000, 16, 0.1);
  v.alpha_host = 0.2;  // 4 workers' batches overlap: 200 distinct rows, not 400
  ClusterShape cluster{.workers = 4, .hosts = 1, .shards = 1};
  EXPECT_DOUBLE_EQ(PsCost(v, cluster, {}, false).bytes, 2 * (100 * 72 + 128));
  // Push: 200 rows once for the host, 50 per worker.
  EXPECT_DOUBLE_EQ(PsCost(v, cluster, {}, true).bytes, (100 * 72 + 128) + (50 * 72 + 128));
  CostOptions o = BytesOnly();
  o.local_aggregation = true;
  Choice c = ChoosePath(v, cluster, o);
  EXPECT_EQ(c.path, VariablePath::kPs);
  EXPECT_DOUBLE_EQ(c.cost(VariablePath::kPs).bytes, c.ps_aggregated.bytes);
}

TEST(CostModelTest, NoShardsOrTooBigForAReplica) {
  VariableStats v = Sparse(1'000'000, 128, 0.001);
  Choice no_shards = ChoosePath(v, {.workers = 8, .shards = 0}, BytesOnly());
  EXPECT_FALSE(no_shards.ps.feasible);
  EXPECT_EQ(no_shards.path, VariablePath::kAllGather);
  // 512 MB table, 1 GB with Adagrad state: over a 0.5 GB budget.
  CostOptions small = BytesOnly();
  small.worker_memory_bytes = 0.5e9;
  Choice big = ChoosePath(v, {.workers = 8, .shards = 0}, small);
  EXPECT_FALSE(big.allgather.feasible);
  EXPECT_NE(big.allgather.why_not.find("memory budget"), std::string::npos);
  EXPECT_EQ(big.path, VariablePath::kAllReduce);
}

TEST(CostModelTest, Fp16HalvesTheValueBytes) {
  VariableStats v = Sparse(10'000, 64, 0.01);
  ClusterShape c{.workers = 2, .shards = 1};
  const double fp32 = PsCost(v, c, {}, false).bytes;
  CostOptions half;
  half.value_bytes = 2;
  const double fp16 = PsCost(v, c, half, false).bytes;
  EXPECT_DOUBLE_EQ(fp32 - fp16, 2 * 100 * 64 * 2);
}

// [ps] shared_memory: rows whose shard is on the worker's machine (1/H of
// them, shards spread over the hosts) leave their values off the sockets, and
// each message carries a 16-byte reference instead.
TEST(CostModelTest, SharedMemoryTakesSameMachineValuesOffTheSockets) {
  VariableStats v = Sparse(10'000, 16, 0.01, /*partitions=*/2);  // 100 rows, 2 messages
  CostOptions shm;
  shm.ps_shared_memory = true;
  ClusterShape one{.workers = 2, .hosts = 1, .shards = 2};
  // One host: ids, headers and references only, both ways.
  EXPECT_DOUBLE_EQ(PsCost(v, one, shm, false).bytes, 2 * (100 * 8 + 256 + 2 * 16));
  EXPECT_DOUBLE_EQ(PsCost(v, one, shm, false).link_bytes, 2 * PsCost(v, one, shm, false).bytes);
  // Two hosts: half the rows' values stay on the sockets.
  ClusterShape two{.workers = 2, .hosts = 2, .shards = 2};
  EXPECT_DOUBLE_EQ(PsCost(v, two, {}, false).bytes - PsCost(v, two, shm, false).bytes,
                   2 * (0.5 * 100 * 64 - 0.5 * 2 * 16));
  // Cheaper PS can change the choice: by bytes, two workers on one host
  // prefer all-gather without it (HandComputedSparseCosts) and PS with it.
  CostOptions bytes_only = BytesOnly();
  bytes_only.ps_shared_memory = true;
  EXPECT_EQ(ChoosePath(v, one, bytes_only).path, VariablePath::kPs);
}

}  // namespace
}  // namespace parallax::plan
