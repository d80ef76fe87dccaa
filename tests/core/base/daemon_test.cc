#include "core/base/daemon.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DaemonTest, WriteFileAtomicallyReplacesTheWholeFile) {
  testing::TempDir dir;
  std::string path = dir.File("port");
  ASSERT_TRUE(WriteFileAtomically(path, "12345\n").ok());
  EXPECT_EQ(Read(path), "12345\n");
  ASSERT_TRUE(WriteFileAtomically(path, "7\n").ok());
  EXPECT_EQ(Read(path), "7\n");
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());  // nothing left behind
}

TEST(DaemonTest, WriteFileAtomicallyNamesThePathItCannotWrite) {
  testing::TempDir dir;
  Status s = WriteFileAtomically(dir.File("missing/dir/port"), "1\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("missing/dir/port"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace parallax
