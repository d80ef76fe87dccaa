#include "core/ps/aggregate.h"

#include <gtest/gtest.h>

namespace parallax::ps {
namespace {

class AggregateTest : public ::testing::Test {};

TEST_F(AggregateTest, DedupeKeepsEveryPositionsIndex) {
  std::vector<int64_t> ids = {9, 2, 9, 5, 2};
  Dedupe d = DedupeIds(ids);
  EXPECT_EQ(d.unique, (std::vector<int64_t>{2, 5, 9}));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(d.unique[d.index_of[i]], ids[i]);
}

TEST_F(AggregateTest, DedupeFirstSeenKeepsFirstOccurrenceOrder) {
  std::vector<int64_t> ids = {9, 2, 9, 5, 2};
  std::vector<uint32_t> first;
  Dedupe d = DedupeIdsFirstSeen(ids, &first);
  EXPECT_EQ(d.unique, (std::vector<int64_t>{9, 2, 5}));
  EXPECT_EQ(first, (std::vector<uint32_t>{0, 1, 3}));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(d.unique[d.index_of[i]], ids[i]);
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 5000; ++i) many.push_back((i * 7919) % 3001);
  d = DedupeIdsFirstSeen(many, &first);
  EXPECT_EQ(d.unique.size(), 3001u);
  for (size_t i = 0; i < many.size(); ++i) ASSERT_EQ(d.unique[d.index_of[i]], many[i]);
}

TEST_F(AggregateTest, DedupeSumAddsRepeatedRows) {
  std::vector<int64_t> ids = {4, 1, 4};
  std::vector<float> g = {1, 2, 10, 20, 100, 200};
  SparseRows r = DedupeSum(ids, g, 2);
  EXPECT_EQ(r.ids, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(r.values, (std::vector<float>{10, 20, 101, 202}));
}

TEST_F(AggregateTest, DedupeSumFirstSeenGivesTheSameSumsInFirstOccurrenceOrder) {
  std::vector<int64_t> ids = {4, 1, 4, 7, 4};
  std::vector<float> g = {1, 2, 10, 20, 100, 200, 3, 3, 0.5f, 0.25f};
  SparseRows r = DedupeSumFirstSeen(ids, g, 2);
  EXPECT_EQ(r.ids, (std::vector<int64_t>{4, 1, 7}));
  EXPECT_EQ(r.values, (std::vector<float>{101.5f, 202.25f, 10, 20, 3, 3}));
  SparseRows sorted = DedupeSum(ids, g, 2);
  EXPECT_EQ(sorted.values[1 * 2], r.values[0]);  // id 4, the same additions in the same order
  EXPECT_TRUE(DedupeSumFirstSeen({}, {}, 2).ids.empty());
}

TEST_F(AggregateTest, MergeSparseCombinesWorkersOfAHost) {
  std::vector<SparseRows> parts(3);
  parts[0] = {{1, 3}, {1, 1, 3, 3}};
  parts[1] = {{3}, {30, 30}};
  parts[2] = {{0, 1}, {5, 5, 7, 7}};
  SparseRows m = MergeSparse(parts, 2);
  EXPECT_EQ(m.ids, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(m.values, (std::vector<float>{5, 5, 8, 8, 33, 33}));
  EXPECT_TRUE(MergeSparse({}, 2).ids.empty());
}

}  // namespace
}  // namespace parallax::ps
