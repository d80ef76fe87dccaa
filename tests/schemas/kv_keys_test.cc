// The key-value keys (schemas/kv_keys.h): every builder's form, as
// schemas/kv_keys.md states it, and the parser's answer for each of them and
// for keys that are not Parallax's.
#include "schemas/kv_keys.h"

#include <gtest/gtest.h>

namespace parallax::kv_keys {
namespace {

using Scope = ParsedKey::Scope;

TEST(KvKeysTest, BuildersSpellThePagesForms) {
  EXPECT_EQ(JobPrefix(7), "job/7/");
  EXPECT_EQ(JobPrefixEnd(7), "job/70");
  EXPECT_EQ(SearchState(7), "job/7/search");
  EXPECT_EQ(Consistency(7), "job/7/consistency");
  EXPECT_EQ(PlanCorrection(7), "job/7/replan");
  EXPECT_EQ(HotRowPresence(7), "job/7/hot_rows");
  EXPECT_EQ(AttemptPrefix(7, 3), "job/7/3/");
  EXPECT_EQ(TrialSpec(7, 3), "job/7/3/search");
  EXPECT_EQ(TrialStepSeconds(7, 3), "job/7/3/trial/step_seconds");
  EXPECT_EQ(ShardEndpoint(7, 3, 2), "job/7/3/ps/2");
  EXPECT_EQ(ShardEndpoint(7, 3, 2, 1), "job/7/3/ps/2");
  EXPECT_EQ(ShardEndpoint(7, 3, 2, 4), "job/7/3/ps/2/4");
  EXPECT_EQ(ShardCurveKey(7, 3, 2), "job/7/3/ps-keys/2");
  EXPECT_EQ(ShardCurveKey(7, 3, 2, 4), "job/7/3/ps-keys/2/4");
  EXPECT_EQ(ShardLostUpdates(7, 3, 2, 4), "job/7/3/ps/2/4/lost_updates");
  EXPECT_EQ(ClientCurveKey(7, 3, "ab01"), "job/7/3/ps-clients/ab01");
  EXPECT_EQ(CommPrefix(7, 3), "job/7/3/comm");
  EXPECT_EQ(RankRegistrations(7, 3, 5), "job/7/3/trainer/5/registrations");
  EXPECT_EQ(CheckpointRankPart(7, 3, 500, 5), "job/7/3/ckpt/500/rank/5");
  EXPECT_EQ(ResumeStep(7, 3), "job/7/3/resume");
  EXPECT_EQ(HostFigures("host-a"), "host/host-a/figures");
  EXPECT_EQ(MeasuredCalls("10.0.0.5", "ps"), "host/10.0.0.5/calls/ps");
  EXPECT_EQ(Straggler(8), "cluster/straggler/8");
}

TEST(KvKeysTest, AJobRangeHoldsEveryKeyOfTheJobAndNoOther) {
  const std::string begin = JobPrefix(7), end = JobPrefixEnd(7);
  for (const std::string& k : {SearchState(7), TrialSpec(7, 12), CommPrefix(7, 1) + "/x"}) {
    EXPECT_TRUE(k >= begin && k < end) << k;
  }
  for (const std::string& k : {SearchState(70), SearchState(8), JobPrefix(71), Straggler(7)}) {
    EXPECT_FALSE(k >= begin && k < end) << k;
  }
}

TEST(KvKeysTest, ParsesEveryScope) {
  ParsedKey p = ParseKey(ShardEndpoint(7, 3, 2, 4));
  EXPECT_EQ(p.scope, Scope::kAttempt);
  EXPECT_EQ(p.job_id, 7);
  EXPECT_EQ(p.attempt, 3);
  EXPECT_EQ(p.leaf, "ps/2/4");

  p = ParseKey(Consistency(12345678901));
  EXPECT_EQ(p.scope, Scope::kJob);
  EXPECT_EQ(p.job_id, 12345678901);
  EXPECT_EQ(p.leaf, "consistency");

  p = ParseKey(HostFigures("a"));
  EXPECT_EQ(p.scope, Scope::kCluster);
  EXPECT_EQ(p.leaf, "a/figures");
  EXPECT_EQ(ParseKey(Straggler(4)).scope, Scope::kCluster);
}

TEST(KvKeysTest, KeysThatAreNotParallaxsAreOther) {
  for (const char* k : {"", "job", "job/", "job/x/1/ps/0", "job/-1/search", "job/7",
                        "jobs/7/search", "my/own/key", "job/123456789012345678/1/ps/0"}) {
    EXPECT_EQ(ParseKey(k).scope, Scope::kOther) << k;
  }
  // A job key whose second part is not a number is the job's, not an attempt's.
  ParsedKey p = ParseKey("job/7/notanumber/x");
  EXPECT_EQ(p.scope, Scope::kJob);
  EXPECT_EQ(p.leaf, "notanumber/x");
}

TEST(KvKeysTest, OnlyTheSearchKeysAreTheCoordinatorsAlone) {
  EXPECT_TRUE(IsCoordinatorOnly(ParseKey(SearchState(7))));
  EXPECT_TRUE(IsCoordinatorOnly(ParseKey(TrialSpec(7, 2))));
  EXPECT_FALSE(IsCoordinatorOnly(ParseKey(TrialStepSeconds(7, 2))));
  EXPECT_FALSE(IsCoordinatorOnly(ParseKey(ShardEndpoint(7, 2, 0))));
  EXPECT_FALSE(IsCoordinatorOnly(ParseKey("other/search")));
}

}  // namespace
}  // namespace parallax::kv_keys
