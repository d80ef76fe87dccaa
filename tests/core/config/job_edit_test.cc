#include "core/config/job_edit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/config/job_config.h"

namespace parallax {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class JobEditTest : public ::testing::Test {};

// The key goes right after the [trainer] header; the rest keeps its lines.
TEST_F(JobEditTest, AddsTheKeyUnderTheTrainerHeader) {
  const std::string text =
      "# comment\n[job]\nname = \"t\"\n[trainer]\nmodel = \"lm\"\n[ps]\nshards = 1\n";
  StatusOr<std::string> out = SetTrainerString(text, "job.toml", "timeline", "/tmp/a \"b\"");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_THAT(*out,
              ::testing::StartsWith("# comment\n[job]\nname = \"t\"\n[trainer]\ntimeline = "));
  EXPECT_THAT(*out, ::testing::EndsWith("\nmodel = \"lm\"\n[ps]\nshards = 1\n"));
  StatusOr<JobConfig> c = ParseJobConfig(*out, "/jobs/job.toml", {.check_paths = false});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->trainer.timeline, "/tmp/a \"b\"");
  EXPECT_EQ(c->ps.shards, 1);
}

TEST_F(JobEditTest, ReplacesAnExistingValue) {
  const std::string text = "[job]\nname = \"t\"\n[trainer]\nmodel = \"lm\"\ntimeline = \"x\"\n";
  StatusOr<std::string> out = SetTrainerString(text, "job.toml", "timeline", "/y");
  ASSERT_TRUE(out.ok());
  EXPECT_THAT(*out, ::testing::StartsWith("[job]\nname = \"t\"\n[trainer]\nmodel = \"lm\"\n"));
  EXPECT_THAT(*out, Not(HasSubstr("\"x\"")));
  StatusOr<JobConfig> c = ParseJobConfig(*out, "/jobs/job.toml", {.check_paths = false});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->trainer.timeline, "/y");
}

// Dotted keys define [trainer] without a header: the document is re-serialised.
TEST_F(JobEditTest, ReserialisesATrainerWithoutHeader) {
  const std::string text = "trainer.model = \"lm\"\n[job]\nname = \"t\"\n";
  StatusOr<std::string> out = SetTrainerString(text, "job.toml", "timeline", "/y");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  StatusOr<JobConfig> c = ParseJobConfig(*out, "/jobs/job.toml", {.check_paths = false});
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << *out;
  EXPECT_EQ(c->trainer.timeline, "/y");
  EXPECT_EQ(c->trainer.model, "lm");
}

// What `parallax resume --workers M --shards S` does: [job] workers replaced
// in place, [ps] shards added under a [ps] written later, or a [ps] table
// made when there is none.
TEST_F(JobEditTest, SetsIntegersInOtherTables) {
  const std::string text = "[job]\nname = \"t\"\nworkers = 4 # four\n[trainer]\nmodel = \"lm\"\n[ps]\n";
  StatusOr<std::string> out = SetInteger(text, "job.toml", "job", "workers", 2);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  out = SetInteger(*out, "job.toml", "ps", "shards", 3);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "[job]\nname = \"t\"\nworkers = 2\n[trainer]\nmodel = \"lm\"\n[ps]\nshards = 3\n");
  StatusOr<std::string> made = SetInteger("[job]\nname = \"t\"\n[trainer]\nmodel = \"lm\"\n",
                                          "job.toml", "ps", "shards", 5);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  StatusOr<JobConfig> c = ParseJobConfig(*made, "/jobs/job.toml", {.check_paths = false});
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << *made;
  EXPECT_EQ(c->ps.shards, 5);
}

TEST_F(JobEditTest, RejectsTextThatIsNotToml) {
  StatusOr<std::string> out = SetTrainerString("[job\n", "bad.toml", "timeline", "/y");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("bad.toml"));
}

}  // namespace
}  // namespace parallax
