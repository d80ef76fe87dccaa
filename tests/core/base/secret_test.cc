#include "core/base/secret.h"

#include <sys/stat.h>

#include <fstream>

#include <gtest/gtest.h>

#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

class SecretFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    std::string path = dir_.File(name);
    std::ofstream(path, std::ios::binary) << text;
    chmod(path.c_str(), mode);
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(SecretFileTest, ReadsTheSecretWithoutTrailingNewline) {
  StatusOr<std::string> s = ReadSecretFile(Write("s", "hunter2\n", 0600));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, "hunter2");
  s = ReadSecretFile(Write("crlf", "abc\r\n", 0400));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, "abc");
}

TEST_F(SecretFileTest, RefusesAFileOthersCanRead) {
  std::string path = Write("s", "hunter2\n", 0644);
  StatusOr<std::string> s = ReadSecretFile(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("chmod 600"), std::string::npos) << s.status().message();
  EXPECT_EQ(s.status().message().find("hunter2"), std::string::npos);
  EXPECT_FALSE(ReadSecretFile(Write("g", "x", 0640)).ok());
  EXPECT_FALSE(ReadSecretFile(Write("w", "x", 0602)).ok());
}

TEST_F(SecretFileTest, RefusesEmptyMissingAndHugeFiles) {
  StatusOr<std::string> s = ReadSecretFile(Write("e", "\n", 0600));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("is empty"), std::string::npos) << s.status().message();
  s = ReadSecretFile(dir_.File("missing"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("missing"), std::string::npos);
  EXPECT_FALSE(ReadSecretFile(Write("big", std::string(5000, 'x'), 0600)).ok());
  EXPECT_FALSE(ReadSecretFile(dir_.path()).ok());  // a directory
}

TEST_F(SecretFileTest, ResolveTakesTheFirstSourceAndWarnsAboutToken) {
  std::string file = Write("s", "from-file\n", 0600);
  std::string warning;
  StatusOr<std::string> s = ResolveSecret({file, "", "", "env-token"}, &warning);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "from-file");
  EXPECT_TRUE(warning.empty());
  s = ResolveSecret({"", "flag", file, "env-token"}, &warning);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "flag");
  EXPECT_NE(warning.find("ps"), std::string::npos);
  s = ResolveSecret({"", "", file, "env-token"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "from-file");
  s = ResolveSecret({"", "", "", "env-token"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "env-token");
  s = ResolveSecret({"", "", "", ""});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "");
  EXPECT_FALSE(ResolveSecret({file, "flag", "", ""}).ok());
}

}  // namespace
}  // namespace parallax
