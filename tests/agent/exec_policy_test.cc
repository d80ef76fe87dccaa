#include "agent/exec_policy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/testing/temp_dir.h"

namespace parallax::agent {
namespace {

class ExecPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.File("allowed"));
    std::filesystem::create_directories(dir_.File("other"));
    Exe("allowed/trainer");
    Exe("other/evil");
  }
  std::string Exe(const std::string& name) {
    std::string path = dir_.File(name);
    std::ofstream(path) << "#!/bin/sh\nexit 0\n";
    chmod(path.c_str(), 0755);
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(ExecPolicyTest, AllowsAProgramUnderAnAllowedDirectoryByItsRealPath) {
  StatusOr<std::string> p = ResolveAllowedExecutable(
      dir_.File("allowed/../allowed/trainer"), {dir_.File("allowed")}, "");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, std::filesystem::canonical(dir_.File("allowed/trainer")).string());
}

TEST_F(ExecPolicyTest, RefusesAProgramElsewhereNamingItAndTheFlag) {
  StatusOr<std::string> p =
      ResolveAllowedExecutable(dir_.File("other/evil"), {dir_.File("allowed")}, "");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(p.status().message().find("other/evil"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("--allow-exec"), std::string::npos);
}

TEST_F(ExecPolicyTest, ADotDotEscapeOrASymlinkOutIsRefused) {
  EXPECT_FALSE(
      ResolveAllowedExecutable(dir_.File("allowed/../other/evil"), {dir_.File("allowed")}, "").ok());
  ASSERT_EQ(symlink(dir_.File("other/evil").c_str(), dir_.File("allowed/link").c_str()), 0);
  StatusOr<std::string> p =
      ResolveAllowedExecutable(dir_.File("allowed/link"), {dir_.File("allowed")}, "");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kPermissionDenied);
  // A directory whose name merely starts like an allowed one is not under it.
  std::filesystem::create_directories(dir_.File("allowed2"));
  std::string twin = Exe("allowed2/x");
  EXPECT_FALSE(ResolveAllowedExecutable(twin, {dir_.File("allowed")}, "").ok());
}

TEST_F(ExecPolicyTest, ABareNameIsLookedUpInPath) {
  StatusOr<std::string> p = ResolveAllowedExecutable(
      "trainer", {dir_.File("allowed")}, dir_.File("other") + ":" + dir_.File("allowed"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  p = ResolveAllowedExecutable("evil", {dir_.File("allowed")}, dir_.File("other"));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kPermissionDenied);
}

TEST_F(ExecPolicyTest, AMissingProgramSaysSo) {
  StatusOr<std::string> p =
      ResolveAllowedExecutable(dir_.File("allowed/nope"), {dir_.File("allowed")}, "");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("No such file"), std::string::npos) << p.status().message();
}

TEST(AllowedExecDirectoriesTest, TheBinDirStaysAllowedWhateverTheFlagsAdd) {
  EXPECT_EQ(AllowedExecDirectories("/opt/px/bin", {}), std::vector<std::string>{"/opt/px/bin"});
  EXPECT_EQ(AllowedExecDirectories("/opt/px/bin", {"/opt/trainers", "/opt/px/bin", "/opt/trainers"}),
            (std::vector<std::string>{"/opt/px/bin", "/opt/trainers"}));
}

}  // namespace
}  // namespace parallax::agent
