// `parallax set`'s NAME=VALUE words.
#include "cli/set_command.h"

#include <gtest/gtest.h>

namespace parallax::cli {
namespace {

TEST(SetCommandTest, ParsesConsistencyAndStaleness) {
  EXPECT_EQ(*ParseSetArguments({"consistency=async"}), "async");
  EXPECT_EQ(*ParseSetArguments({"consistency=sync"}), "sync");
  EXPECT_EQ(*ParseSetArguments({"staleness=4", "consistency=ssp"}), "ssp:4");
  EXPECT_EQ(*ParseSetArguments({"consistency=ssp"}), "ssp:0");
}

TEST(SetCommandTest, RefusesWhatItCannotSetWithWhatItAccepts) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"staleness=2"},
      {"consistency=fast"},
      {"consistency=async", "staleness=2"},
      {"consistency=ssp", "staleness=-1"},
      {"consistency=ssp", "staleness=two"},
      {"consistency=async", "consistency=sync"},
      {"lr=0.1"},
      {"async"},
  };
  for (const auto& words : bad) {
    StatusOr<std::string> r = ParseSetArguments(words);
    ASSERT_FALSE(r.ok()) << (words.empty() ? "(nothing)" : words[0]);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(r.status().message().empty());
  }
  EXPECT_NE(ParseSetArguments({"lr=0.1"}).status().message().find("consistency=async|ssp|sync"),
            std::string::npos);
}

}  // namespace
}  // namespace parallax::cli
