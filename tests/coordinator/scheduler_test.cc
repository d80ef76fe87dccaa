#include "coordinator/orchestration/scheduler.h"

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

TEST(SchedulerTest, BestFitTakesTheFewestFreeSlotsThenTheFirstName) {
  Capacity c({{"d", 8, 3}, {"c", 8, 2}, {"b", 8, 2}, {"a", 8, 1}});
  ASSERT_NE(c.BestFit(2), nullptr);
  EXPECT_EQ(*c.BestFit(2), "b");
  EXPECT_EQ(*c.BestFit(3), "d");
  EXPECT_EQ(c.BestFit(4), nullptr);
  EXPECT_EQ(c.total_slots(), 32);
  EXPECT_EQ(c.free_slots(), 8);
}

TEST(SchedulerTest, TakingSlotsMovesAnAgentInTheIndex) {
  Capacity c({{"a", 4, 4}, {"b", 4, 3}});
  c.Take("a", 2);
  EXPECT_EQ(c.FreeOf("a"), 2);
  EXPECT_EQ(c.free_slots(), 5);
  EXPECT_EQ(*c.BestFit(2), "a");
  c.Take("b", 3);
  EXPECT_EQ(c.BestFit(3), nullptr);
  using Free = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(c.MostFreeFirst(100), (Free{{"a", 2}}));
  // A re-registration with fewer slots than its tasks hold counts as none free.
  c.Set({"b", 1, -2});
  EXPECT_EQ(c.FreeOf("b"), 0);
  EXPECT_EQ(c.total_slots(), 5);
}

TEST(SchedulerTest, MostFreeFirstStopsOnceEnoughIsFound) {
  Capacity c({{"a", 4, 1}, {"b", 4, 4}, {"c", 4, 4}, {"d", 4, 2}});
  using Free = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(c.MostFreeFirst(5), (Free{{"b", 4}, {"c", 4}}));
  EXPECT_EQ(c.MostFreeFirst(100), (Free{{"b", 4}, {"c", 4}, {"d", 2}, {"a", 1}}));
}

TEST(SchedulerTest, A512RankJobFillsEvery128AgentWithContiguousRanks) {
  std::vector<AgentCapacity> agents;
  for (int a = 0; a < 128; ++a) {
    std::string name = "agent-" + std::string(a < 100 ? (a < 10 ? "00" : "0") : "") + std::to_string(a);
    agents.push_back({name, 4, 4});
  }
  Placement p = PlaceJob({512, 0, {}}, agents);
  ASSERT_EQ(p.fit, Fit::kPlaced);
  ASSERT_EQ(p.trainer_agents.size(), 512u);
  for (int r = 0; r < 512; ++r) EXPECT_EQ(p.trainer_agents[r], agents[r / 4].name) << r;
  ASSERT_EQ(p.ps_agents.size(), 128u);  // one shard per host
  EXPECT_EQ(p.ps_agents.front(), "agent-000");
  EXPECT_EQ(p.ps_agents.back(), "agent-127");
}

// Agents started with --role ps: hosts for PS shards only.
AgentCapacity PsHost(const std::string& name, int shards = 0) {
  return {name, 4, 4, /*ps_host=*/true, shards};
}

PlacementRequest OnPsHosts(int workers, int shards) {
  PlacementRequest r{workers, shards, {}};
  r.ps_hosts = PsHosts::kPs;
  return r;
}

TEST(SchedulerTest, PsHostsTakeNoTrainerRank) {
  // "p" has the most free slots, but it hosts shards only.
  Placement p = PlaceJob({2, 0, {}}, {{"a", 1, 1}, {"b", 1, 1}, PsHost("p")});
  ASSERT_EQ(p.fit, Fit::kPlaced);
  EXPECT_EQ(p.trainer_agents, (Names{"a", "b"}));
  // Default [ps] hosts = "workers": the shards stay on the ranks' agents.
  EXPECT_EQ(p.ps_agents, (Names{"a", "b"}));
  p = PlaceJob({3, 0, {}}, {{"a", 1, 1}, {"b", 1, 1}, PsHost("p")});
  EXPECT_EQ(p.fit, Fit::kTooLarge);
  EXPECT_EQ(p.reason, "needs 3 slots; the cluster has 2 slots on 2 available agent(s)");
}

TEST(SchedulerTest, ShardsGoOnePerPsHostWhenTheJobAsksForPsHosts) {
  Placement p = PlaceJob(OnPsHosts(4, 0), {{"w1", 2, 2}, {"w2", 2, 2}, PsHost("p2"), PsHost("p1")});
  ASSERT_EQ(p.fit, Fit::kPlaced);
  EXPECT_EQ(p.trainer_agents, (Names{"w1", "w1", "w2", "w2"}));
  EXPECT_EQ(p.ps_agents, (Names{"p1", "p2"}));
}

TEST(SchedulerTest, AFixedShardCountGoesRoundRobinOverTheLeastLoadedPsHosts) {
  Placement p =
      PlaceJob(OnPsHosts(1, 5), {{"w", 1, 1}, PsHost("p1", 3), PsHost("p2", 0), PsHost("p3", 1)});
  ASSERT_EQ(p.fit, Fit::kPlaced);
  EXPECT_EQ(p.ps_agents, (Names{"p2", "p3", "p1", "p2", "p3"}));
}

TEST(SchedulerTest, ShardsOfJobsPlacedInOnePassSpreadOverThePsHosts) {
  Capacity c({{"w", 4, 4}, PsHost("p1"), PsHost("p2")});
  Placement first = PlaceJobIn(OnPsHosts(1, 1), c);
  ASSERT_EQ(first.ps_agents, Names{"p1"});
  c.AddShards("p1", 1);
  Placement second = PlaceJobIn(OnPsHosts(1, 1), c);
  EXPECT_EQ(second.ps_agents, Names{"p2"});
}

TEST(SchedulerTest, AJobAskingForPsHostsWaitsWithAReasonWhenThereIsNone) {
  Placement p = PlaceJob(OnPsHosts(1, 0), {{"w", 4, 4}});
  EXPECT_EQ(p.fit, Fit::kTooLarge);  // later jobs may go first
  EXPECT_EQ(p.reason,
            "its PS shards go on PS hosts ([ps] hosts = \"ps\") and no PS host is available: "
            "start one with `parallax-agent --role ps`, or set [ps] hosts = \"workers\"");
  // A job without shards (all-reduce) does not need one.
  EXPECT_EQ(PlaceJob(OnPsHosts(1, -1), {{"w", 4, 4}}).fit, Fit::kPlaced);
}

TEST(SchedulerTest, AnAgentThatBecomesAPsHostGivesUpItsSlots) {
  Capacity c({{"a", 4, 4}});
  c.Set(PsHost("a"));
  EXPECT_EQ(c.total_slots(), 0);
  EXPECT_EQ(c.ps_hosts(), 1u);
  c.Set({"a", 4, 4});
  EXPECT_EQ(c.total_slots(), 4);
  EXPECT_EQ(c.ps_hosts(), 0u);
}

}  // namespace
}  // namespace parallax::coordinator
