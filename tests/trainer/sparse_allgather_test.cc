// The all-gather path's exchange of sparse rows (trainer/sparse_allgather.h):
// ranks as threads on loopback Gloo, the result against a serial reference.
#include "trainer/sparse_allgather.h"

#include <gtest/gtest.h>

#include <map>

#include "core/comm/rendezvous_store.h"
#include "tests/core/comm/rank_threads.h"

namespace parallax::trainer {
namespace {

using comm::testing::CreateGlooWorld;
using comm::testing::RunRanks;

// Rank r's rows of table t: ids and integer-valued rows (sums exact).
ps::SparseRows RowsOf(int r, size_t t, uint32_t dim) {
  ps::SparseRows rows;
  const int n = (r == 1 && t == 0) ? 0 : 3 + r + static_cast<int>(t);  // rank 1 sends none of t0
  for (int i = 0; i < n; ++i) {
    rows.ids.push_back((i * 7 + r * 3 + static_cast<int>(t)) % 11);  // ids repeat across ranks
  }
  std::sort(rows.ids.begin(), rows.ids.end());
  rows.ids.erase(std::unique(rows.ids.begin(), rows.ids.end()), rows.ids.end());
  for (int64_t id : rows.ids) {
    for (uint32_t j = 0; j < dim; ++j) {
      rows.values.push_back(static_cast<float>((r + 1) * 4 + id * 2 + j));
    }
  }
  return rows;
}

TEST(SparseAllGatherTest, EveryRankGetsTheMeanOrSumOfAllRanksRowsPerTable) {
  const std::vector<uint32_t> dims = {3, 1, 5};
  for (auto [world, op] : {std::pair{2, comm::ReduceOp::kMean}, std::pair{3, comm::ReduceOp::kMean},
                           std::pair{3, comm::ReduceOp::kSum}}) {
    const float divisor = op == comm::ReduceOp::kMean ? static_cast<float>(world) : 1.0f;
    auto store = comm::NewInMemoryRendezvousStore();
    auto comms = CreateGlooWorld(world, store.get(), "sag" + std::to_string(world));
    ASSERT_EQ(comms.size(), static_cast<size_t>(world));
    std::vector<std::vector<ps::SparseRows>> got(world);
    RunRanks(world, [&](int r) {
      std::vector<ps::SparseRows> mine;
      for (size_t t = 0; t < dims.size(); ++t) mine.push_back(RowsOf(r, t, dims[t]));
      auto out = AllGatherSparse(comms[r].get(), mine, dims, op,
                                     comm::DeadlineAfter(std::chrono::milliseconds(20'000)));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      got[r] = std::move(out).value();
    });
    for (size_t t = 0; t < dims.size(); ++t) {
      std::map<int64_t, std::vector<float>> sum;  // the serial reference
      for (int r = 0; r < world; ++r) {
        ps::SparseRows rows = RowsOf(r, t, dims[t]);
        for (size_t i = 0; i < rows.ids.size(); ++i) {
          auto& row = sum[rows.ids[i]];
          row.resize(dims[t], 0.0f);
          for (uint32_t j = 0; j < dims[t]; ++j) row[j] += rows.values[i * dims[t] + j];
        }
      }
      for (int r = 0; r < world; ++r) {
        const ps::SparseRows& out = got[r][t];
        ASSERT_EQ(out.ids.size(), sum.size()) << "world " << world << " table " << t;
        ASSERT_EQ(out.values.size(), sum.size() * dims[t]);
        size_t i = 0;
        for (const auto& [id, row] : sum) {
          EXPECT_EQ(out.ids[i], id);
          for (uint32_t j = 0; j < dims[t]; ++j) {
            EXPECT_FLOAT_EQ(out.values[i * dims[t] + j], row[j] / divisor)
                << "world " << world << " table " << t << " id " << id;
          }
          ++i;
        }
      }
    }
  }
}

TEST(SparseAllGatherTest, WithAMergeRankOnlyThatRankGetsTheSums) {
  const std::vector<uint32_t> dims = {3, 1};
  const int world = 3, merge_rank = 1;
  auto store = comm::NewInMemoryRendezvousStore();
  auto comms = CreateGlooWorld(world, store.get(), "merge-rank");
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  std::vector<std::vector<ps::SparseRows>> got(world), everywhere(world);
  RunRanks(world, [&](int r) {
    std::vector<ps::SparseRows> mine;
    for (size_t t = 0; t < dims.size(); ++t) mine.push_back(RowsOf(r, t, dims[t]));
    const auto deadline = comm::DeadlineAfter(std::chrono::milliseconds(20'000));
    auto out = AllGatherSparse(comms[r].get(), mine, dims, comm::ReduceOp::kSum, deadline,
                               merge_rank);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    got[r] = std::move(out).value();
    auto all = AllGatherSparse(comms[r].get(), mine, dims, comm::ReduceOp::kSum, deadline);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    everywhere[r] = std::move(all).value();
  });
  for (int r = 0; r < world; ++r) {
    if (r != merge_rank) {
      EXPECT_TRUE(got[r].empty()) << "rank " << r;
      continue;
    }
    ASSERT_EQ(got[r].size(), dims.size());
    for (size_t t = 0; t < dims.size(); ++t) {
      ASSERT_FALSE(got[r][t].ids.empty());
      EXPECT_EQ(got[r][t].ids, everywhere[r][t].ids) << "table " << t;
      EXPECT_EQ(got[r][t].values, everywhere[r][t].values) << "table " << t;
    }
  }
}

TEST(SparseAllGatherTest, NoRowsAnywhereNeedsNoDataExchange) {
  auto store = comm::NewInMemoryRendezvousStore();
  auto comms = CreateGlooWorld(2, store.get(), "empty");
  ASSERT_EQ(comms.size(), 2u);
  RunRanks(2, [&](int r) {
    auto out = AllGatherSparse(comms[r].get(), {ps::SparseRows{}, ps::SparseRows{}}, {4, 2},
                                   comm::ReduceOp::kSum,
                                   comm::DeadlineAfter(std::chrono::milliseconds(20'000)));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->size(), 2u);
    EXPECT_TRUE((*out)[0].ids.empty());
    EXPECT_TRUE((*out)[1].values.empty());
  });
}

TEST(SparseAllGatherTest, RowsThatDisagreeWithTheDimAreRefusedBeforeSending) {
  auto store = comm::NewInMemoryRendezvousStore();
  auto comms = CreateGlooWorld(1, store.get(), "bad");
  ASSERT_EQ(comms.size(), 1u);
  ps::SparseRows rows;
  rows.ids = {1, 2};
  rows.values = {1, 2, 3};  // dim 2 needs 4
  auto out = AllGatherSparse(comms[0].get(), {rows}, {2}, comm::ReduceOp::kSum,
                                 comm::DeadlineAfter(std::chrono::milliseconds(5'000)));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("2 ids and 3 values for dim 2"), std::string::npos)
      << out.status().ToString();
}

}  // namespace
}  // namespace parallax::trainer
