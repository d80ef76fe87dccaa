#include "core/plan/cost_model.h"

#include <gtest/gtest.h>

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

TEST(CostModelTest, AllReduceIsTheRingVolume) {
  VariableStats dense;
  dense.name = "w";
  dense.rows = 1;
  dense.dim = 1000;
  // 4 workers: 2·3/4·1000·4 = 6000 bytes each way.
  EXPECT_DOUBLE_EQ(AllReduceCost(dense, {.workers = 4}, {}).bytes, 12000);
  EXPECT_DOUBLE_EQ(AllReduceCost(dense, {.workers = 1}, {}).bytes, 0);
  Choice c = ChoosePath(dense, {.workers = 4, .shards = 2}, {});
  EXPECT_EQ(c.path, Path::kAllReduce);
  EXPECT_NE(c.reason.find("dense"), std::string::npos) << c.reason;
}

TEST(CostModelTest, HandComputedSparseCosts) {
  // 10,000 × 16, α = 0.01: 100 rows of 8 + 64 bytes each.
  VariableStats v = Sparse(10'000, 16, 0.01, /*partitions=*/2);
  ClusterShape two{.workers = 2, .hosts = 1, .shards = 2};
  // PS: pull 100·72 + 2 messages · 2 headers · 64, push the same.
  EXPECT_DOUBLE_EQ(PsCost(v, two, {}, false).bytes, 2 * (7200 + 256));
  // All-gather: (N−1)·100·72 each way.
  EXPECT_DOUBLE_EQ(AllGatherCost(v, two, {}).bytes, 2 * 7200);
  // All-reduce of the whole table: 2·1/2·160,000·4 each way.
  EXPECT_DOUBLE_EQ(AllReduceCost(v, two, {}).bytes, 2 * 640'000);
  // A host's link: its 2 workers' traffic, and for PS its shards' too.
  EXPECT_DOUBLE_EQ(AllGatherCost(v, two, {}).link_bytes, 2 * 7200);
  EXPECT_DOUBLE_EQ(PsCost(v, two, {}, false).link_bytes, 2 * 2 * (7200 + 256));
  // Two workers: all-gather is cheapest; four: it grows with N and PS wins.
  EXPECT_EQ(ChoosePath(v, two, {}).path, Path::kAllGather);
  ClusterShape four{.workers = 4, .hosts = 1, .shards = 2};
  EXPECT_DOUBLE_EQ(AllGatherCost(v, four, {}).bytes, 2 * 3 * 7200);
  Choice c = ChoosePath(v, four, {});
  EXPECT_EQ(c.path, Path::kPs);
  EXPECT_NE(c.reason.find("ps puts"), std::string::npos) << c.reason;
  // Four workers on four hosts: the same choice, a quarter of the link bytes.
  ClusterShape spread{.workers = 4, .hosts = 4, .shards = 4};
  EXPECT_DOUBLE_EQ(PsCost(v, spread, {}, false).link_bytes, PsCost(v, spread, {}, false).bytes);
  EXPECT_EQ(ChoosePath(v, spread, {}).path, Path::kPs);
}

TEST(CostModelTest, ChoiceFlipsFromAllReduceToPsAsAlphaFalls) {
  ClusterShape cluster{.workers = 4, .hosts = 1, .shards = 1};
  // 1000 × 16 on 4 workers of one host: all-reduce puts 4 · 96,000 bytes on
  // the host's link; PS 4 · (144,000·α + 256).
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 1.0), cluster, {}).path, Path::kAllReduce);
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.7), cluster, {}).path, Path::kAllReduce);
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.6), cluster, {}).path, Path::kPs);
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.01), cluster, {}).path, Path::kPs);
  Path previous = Path::kAllReduce;
  for (double alpha = 1.0; alpha > 0.01; alpha *= 0.8) {
    Path p = ChoosePath(Sparse(1000, 16, alpha), cluster, {}).path;
    if (previous != Path::kAllReduce) {
      EXPECT_NE(p, Path::kAllReduce) << "α = " << alpha;  // never flips back
    }
    previous = p;
  }
  EXPECT_EQ(previous, Path::kPs);
  // A handful of rows: PS's per-message headers outweigh all-gather's
  // (N−1)-fold rows.
  EXPECT_EQ(ChoosePath(Sparse(1000, 16, 0.001), cluster, {}).path, Path::kAllGather);
}

TEST(CostModelTest, LocalAggregationSharesTheHostsPush) {
  VariableStats v = Sparse(1000, 16, 0.1);
  v.alpha_host = 0.2;  // 4 workers' batches overlap: 200 distinct rows, not 400
  ClusterShape cluster{.workers = 4, .hosts = 1, .shards = 1};
  EXPECT_DOUBLE_EQ(PsCost(v, cluster, {}, false).bytes, 2 * (100 * 72 + 128));
  // Push: 200 rows once for the host, 50 per worker.
  EXPECT_DOUBLE_EQ(PsCost(v, cluster, {}, true).bytes, (100 * 72 + 128) + (50 * 72 + 128));
  Choice c = ChoosePath(v, cluster, {.local_aggregation = true});
  EXPECT_EQ(c.path, Path::kPs);
  EXPECT_DOUBLE_EQ(c.cost(Path::kPs).bytes, c.ps_aggregated.bytes);
}

TEST(CostModelTest, NoShardsOrTooBigForAReplica) {
  VariableStats v = Sparse(1'000'000, 128, 0.001);
  Choice no_shards = ChoosePath(v, {.workers = 8, .shards = 0}, {});
  EXPECT_FALSE(no_shards.ps.feasible);
  EXPECT_EQ(no_shards.path, Path::kAllGather);
  // 512 MB table, 1 GB with Adagrad state: over a 0.5 GB budget.
  Choice big = ChoosePath(v, {.workers = 8, .shards = 0}, {.worker_memory_bytes = 0.5e9});
  EXPECT_FALSE(big.allgather.feasible);
  EXPECT_NE(big.allgather.why_not.find("memory budget"), std::string::npos);
  EXPECT_EQ(big.path, Path::kAllReduce);
}

TEST(CostModelTest, Fp16HalvesTheValueBytes) {
  VariableStats v = Sparse(10'000, 64, 0.01);
  ClusterShape c{.workers = 2, .shards = 1};
  const double fp32 = PsCost(v, c, {}, false).bytes;
  const double fp16 = PsCost(v, c, {.value_bytes = 2}, false).bytes;
  EXPECT_DOUBLE_EQ(fp32 - fp16, 2 * 100 * 64 * 2);
}

}  // namespace
}  // namespace parallax::plan
