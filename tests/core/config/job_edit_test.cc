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

TEST_F(JobEditTest, RejectsTextThatIsNotToml) {
  StatusOr<std::string> out = SetTrainerString("[job\n", "bad.toml", "timeline", "/y");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("bad.toml"));
}

}  // namespace
}  // namespace parallax
