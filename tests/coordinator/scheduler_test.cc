#include "coordinator/scheduler.h"

#include <gtest/gtest.h>

namespace parallax::coordinator {
namespace {

using Fit = Placement::Fit;
using Names = std::vector<std::string>;

TEST(SchedulerTest, PacksOnTheSmallestAgentThatHoldsEveryRank) {
  Placement p = PlaceJob({4, -1, {}}, {{"big", 8, 8}, {"small", 4, 4}, {"tiny", 2, 2}});
  ASSERT_EQ(p.fit, Fit::kPlaced);
  EXPECT_EQ(p.trainer_agents, Names(4, "small"));
  EXPECT_TRUE(p.ps_agents.empty());
}

TEST(SchedulerTest, SpreadsOverFewestAgentsWithContiguousRanks) {
  Placement p = PlaceJob({5, -1, {}}, {{"a", 2, 2}, {"b", 4, 3}, {"c", 2, 2}});
  ASSERT_EQ(p.fit, Fit::kPlaced);
  EXPECT_EQ(p.trainer_agents, (Names{"b", "b", "b", "a", "a"}));
}

TEST(SchedulerTest, WaitsWhenTheClusterIsBusy) {
  Placement p = PlaceJob({4, 0, {}}, {{"a", 4, 1}, {"b", 4, 2}});
  EXPECT_EQ(p.fit, Fit::kWait);
  EXPECT_EQ(p.reason, "needs 4 slots; 3 slots free now");
}

TEST(SchedulerTest, TooLargeForTheCluster) {
  Placement p = PlaceJob({9, 0, {}}, {{"a", 4, 4}, {"b", 4, 4}});
  EXPECT_EQ(p.fit, Fit::kTooLarge);
  EXPECT_EQ(p.reason, "needs 9 slots; the cluster has 8 slots on 2 available agent(s)");
  EXPECT_EQ(PlaceJob({1, 0, {}}, {}).fit, Fit::kTooLarge);
}

TEST(SchedulerTest, OnePsShardPerUsedAgentByDefault) {
  Placement p = PlaceJob({6, 0, {}}, {{"a", 4, 4}, {"b", 4, 4}, {"c", 4, 4}});
  ASSERT_EQ(p.fit, Fit::kPlaced);
  EXPECT_EQ(p.trainer_agents, (Names{"a", "a", "a", "a", "b", "b"}));
  EXPECT_EQ(p.ps_agents, (Names{"a", "b"}));
}

TEST(SchedulerTest, FixedShardCountIsSpreadRoundRobin) {
  Placement p = PlaceJob({2, 3, {}}, {{"a", 1, 1}, {"b", 1, 1}});
  ASSERT_EQ(p.fit, Fit::kPlaced);
  EXPECT_EQ(p.ps_agents, (Names{"a", "b", "a"}));
}

TEST(SchedulerTest, ReusesThePreviousPlacementWhenItFits) {
  // Best fit alone would pick "b"; the previous attempt ran on "a".
  Placement p = PlaceJob({2, -1, {"a", "a"}}, {{"a", 4, 4}, {"b", 2, 2}});
  EXPECT_EQ(p.trainer_agents, (Names{"a", "a"}));
  // When "a" no longer has room, a fresh placement is made.
  p = PlaceJob({2, -1, {"a", "a"}}, {{"a", 4, 1}, {"b", 2, 2}});
  EXPECT_EQ(p.trainer_agents, (Names{"b", "b"}));
}

}  // namespace
}  // namespace parallax::coordinator
