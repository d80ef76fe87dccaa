// coordinator/orchestration/resize.h: what a resume with other counts writes, and the
// elastic choices (shrink after the replacement wait, grow when free).
#include "coordinator/orchestration/resize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace parallax::coordinator {
namespace {

using ::testing::HasSubstr;

JobRecord Job(const std::string& text) {
  JobRecord job;
  job.id = 7;
  job.state = JobState::kFailed;
  job.job_text = text;
  job.job_path = "/jobs/j.toml";
  return job;
}

constexpr char kText[] =
    "[job]\nname = \"j\"\nworkers = 4\n[trainer]\nmodel = \"lm\"\n[ps]\nshards = 2\n";

TEST(EditForResumeTest, SetsWorkersAndShardsAndSaysSo) {
  auto edit = EditForResume(Job(kText), {.workers = 2, .shards = 3});
  ASSERT_TRUE(edit.ok()) << edit.status().ToString();
  EXPECT_EQ(edit->workers, 2);
  EXPECT_EQ(edit->job_path, "/jobs/j.toml");
  auto config = ParseJobConfig(edit->job_text, "x", {.check_paths = false});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->job.workers, 2);
  EXPECT_EQ(config->ps.shards, 3);
  EXPECT_THAT(edit->what, HasSubstr("resumed with workers 4 -> 2, PS shards 2 -> 3"));
}

TEST(EditForResumeTest, ANewJobFileIsCheckedAndNamed) {
  const std::string text =
      "[job]\nname = \"j\"\nworkers = 3\nmin_workers = 2\n[trainer]\nmodel = \"lm\"\n";
  auto edit = EditForResume(Job(kText), {.job_text = text, .job_path = "/jobs/new.toml"});
  ASSERT_TRUE(edit.ok()) << edit.status().ToString();
  EXPECT_EQ(edit->workers, 3);
  EXPECT_EQ(edit->job_path, "/jobs/new.toml");
  EXPECT_THAT(edit->what, HasSubstr("a new job file (/jobs/new.toml), workers 4 -> 3"));
  auto bad = EditForResume(Job(kText), {.job_text = std::string("[job]\nname = \"j\"\nworkers = 2\n"
                                                                "min_workers = 3\n[trainer]\n"
                                                                "model = \"lm\"\n")});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("min_workers"));
}

TEST(EditForResumeTest, RefusesWhatTheJobCannotTake) {
  EXPECT_EQ(EditForResume(Job(kText), {.workers = 0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EditForResume(Job(kText), {.shards = -1}).status().code(),
            StatusCode::kInvalidArgument);
  const std::string allreduce =
      "[job]\nname = \"j\"\narch = \"allreduce\"\n[trainer]\nmodel = \"lm\"\n";
  auto no_ps = EditForResume(Job(allreduce), {.shards = 2});
  ASSERT_FALSE(no_ps.ok());
  EXPECT_THAT(no_ps.status().message(), HasSubstr("allreduce"));
}

PendingJob Elastic() {
  PendingJob p;
  p.id = 1;
  p.attempt = 1;
  p.workers = 3;
  p.min_workers = 2;
  p.replace_timeout_ms = 5000;
  p.since = 10'000;
  return p;
}

TEST(ChooseElasticWorkersTest, WaitsForAReplacementThenTakesTheFreeSlots) {
  ElasticChoice wait = ChooseElasticWorkers(Elastic(), 2, 12'000);
  EXPECT_EQ(wait.workers, 0);
  EXPECT_EQ(wait.recheck_at, 15'000);
  EXPECT_THAT(wait.reason, HasSubstr("waiting up to 3 s"));
  ElasticChoice go = ChooseElasticWorkers(Elastic(), 2, 15'000);
  EXPECT_EQ(go.workers, 2);
  EXPECT_THAT(go.reason, HasSubstr("shrinks to 2 of 3 workers (min_workers = 2)"));
  ElasticChoice too_few = ChooseElasticWorkers(Elastic(), 1, 20'000);
  EXPECT_EQ(too_few.workers, 0);
  EXPECT_EQ(too_few.recheck_at, 0);
  EXPECT_THAT(too_few.reason, HasSubstr("fewer than min_workers = 2"));
}

TEST(ChooseElasticWorkersTest, NotElasticOrFirstAttemptNeverShrinks) {
  PendingJob rigid = Elastic();
  rigid.min_workers = 3;
  EXPECT_EQ(ChooseElasticWorkers(rigid, 2, 99'000).workers, 0);
  EXPECT_TRUE(ChooseElasticWorkers(rigid, 2, 99'000).reason.empty());
  PendingJob first = Elastic();
  first.attempt = 0;
  EXPECT_EQ(ChooseElasticWorkers(first, 2, 99'000).workers, 0);
}

TEST(GrowToTest, GrowsUpToWorkersWithTheFreeSlots) {
  JobConfig c;
  c.job.workers = 4;
  c.job.min_workers = 2;
  EXPECT_EQ(GrowTo(c, 2, 1), 3);
  EXPECT_EQ(GrowTo(c, 2, 5), 4);
  EXPECT_EQ(GrowTo(c, 2, 0), 0);
  EXPECT_EQ(GrowTo(c, 4, 3), 0);
  c.job.min_workers = 4;
  EXPECT_EQ(GrowTo(c, 2, 3), 0);
}

}  // namespace
}  // namespace parallax::coordinator
