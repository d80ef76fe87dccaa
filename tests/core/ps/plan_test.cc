#include "core/ps/plan.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "core/ps/initializer.h"

namespace parallax::ps {
namespace {

class PsPlanTest : public ::testing::Test {};

// What the plan JSON carries of a PsPlan, and its bad forms, are
// tests/core/plan/job_plan_test.cc's.

TEST_F(PsPlanTest, RangePartitionsAreContiguousBlocks) {
  VariableSpec v;
  v.rows = 10;
  v.partitions = 3;
  v.scheme = PartitionScheme::kRange;
  std::vector<uint32_t> got;
  for (int64_t id = 0; id < 10; ++id) got.push_back(PartitionOf(v, id));
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}));
}

TEST_F(PsPlanTest, PartitionerAgreesWithPartitionOf) {
  std::mt19937_64 rng(7);
  for (PartitionScheme scheme : {PartitionScheme::kRange, PartitionScheme::kHash}) {
    for (int64_t rows : {int64_t{1}, int64_t{10}, int64_t{999'983}, int64_t{1'000'000},
                         int64_t{1} << 40}) {
      for (uint32_t partitions : {1u, 2u, 3u, 7u, 64u}) {
        VariableSpec v;
        v.rows = rows;
        v.partitions = partitions;
        v.scheme = scheme;
        const Partitioner partition_of(v);
        std::uniform_int_distribution<int64_t> any(0, rows - 1);
        // Every block edge (where an estimate is most likely off by one) and random ids.
        const int64_t block = (rows + partitions - 1) / partitions;
        std::vector<int64_t> ids = {0, rows - 1};
        for (uint32_t p = 1; p <= partitions; ++p) {
          for (int64_t d : {-1, 0, 1}) {
            const int64_t id = int64_t{p} * block + d;
            if (id >= 0 && id < rows) ids.push_back(id);
          }
        }
        for (int i = 0; i < 2000; ++i) ids.push_back(any(rng));
        for (int64_t id : ids)
          ASSERT_EQ(partition_of(id), PartitionOf(v, id)) << "rows " << rows << " partitions " << partitions << " id " << id;
      }
    }
  }
}

TEST_F(PsPlanTest, HashPartitionsSpreadConsecutiveIds) {
  VariableSpec v;
  v.rows = 100000;
  v.partitions = 8;
  std::vector<int> counts(8, 0);
  for (int64_t id = 0; id < 8000; ++id) ++counts[PartitionOf(v, id)];
  for (int c : counts) {
    EXPECT_GT(c, 850);
    EXPECT_LT(c, 1150);
  }
}

TEST_F(PsPlanTest, Mix64IsReversible) {
  for (uint64_t x : {0ULL, 1ULL, 12345ULL, 0xffffffffffffffffULL, 0x8000000000000000ULL})
    EXPECT_EQ(UnMix64(Mix64(x)), x);
  std::set<uint64_t> seen;
  for (uint64_t x = 0; x < 1000; ++x) seen.insert(Mix64(x));
  EXPECT_EQ(seen.size(), 1000u);
}

TEST_F(PsPlanTest, InitializerIsAPureFunctionOfSeedVariableAndRow) {
  Initializer init;
  init.seed = 7;
  init.scale = 0.5f;
  std::vector<float> a(16), b(16), c(16), d(16);
  InitializeRow(init, 0, 42, 16, a.data());
  InitializeRow(init, 0, 42, 16, b.data());
  InitializeRow(init, 1, 42, 16, c.data());
  InitializeRow(init, 0, 43, 16, d.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  for (float x : a) {
    EXPECT_GE(x, -0.5f);
    EXPECT_LT(x, 0.5f);
  }
  init.seed = 8;
  InitializeRow(init, 0, 42, 16, b.data());
  EXPECT_NE(a, b);
  init.type = Initializer::Type::kZeros;
  InitializeRow(init, 0, 42, 16, b.data());
  EXPECT_EQ(b, std::vector<float>(16, 0.0f));
}

}  // namespace
}  // namespace parallax::ps
