#include "agent/task_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/agent/test_util.h"
#include "tests/testing/temp_dir.h"

namespace parallax::agent {
namespace {

using testing::ReadAll;

class TaskLogTest : public ::testing::Test {
 protected:
  void Append(const std::string& text) {
    std::ofstream(TaskLogPath(dir_.path()), std::ios::app) << text;
  }
  parallax::testing::TempDir dir_;
};

TEST_F(TaskLogTest, ReadsFromOffsetsAndTheEnd) {
  Append("0123456789");
  StatusOr<rpc::LogChunk> c = ReadTaskLog(dir_.path(), 0, 4, false);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->data, "0123");
  EXPECT_EQ(c->next_offset, 4);
  EXPECT_EQ(c->first_offset, 0);
  EXPECT_FALSE(c->complete);
  c = ReadTaskLog(dir_.path(), c->next_offset, 100, true);
  EXPECT_EQ(c->data, "456789");
  EXPECT_EQ(c->next_offset, 10);
  EXPECT_TRUE(c->complete);
  c = ReadTaskLog(dir_.path(), -1, 3, false);
  EXPECT_EQ(c->data, "789");
  EXPECT_EQ(c->next_offset, 10);
  c = ReadTaskLog(dir_.path(), -1, 100, false);
  EXPECT_EQ(c->data, "0123456789");
  c = ReadTaskLog(dir_.path(), 50, 100, false);  // past the end: nothing yet
  EXPECT_EQ(c->data, "");
  EXPECT_EQ(c->next_offset, 10);
}

TEST_F(TaskLogTest, RejectsBadArguments) {
  Append("x");
  EXPECT_EQ(ReadTaskLog(dir_.path(), 0, 0, false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTaskLog(dir_.path(), -2, 10, false).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(TaskLogTest, CapsReadsAtOneMebibyte) {
  Append(std::string(kMaxReadBytes + 10, 'a'));
  StatusOr<rpc::LogChunk> c = ReadTaskLog(dir_.path(), 0, 1 << 30, false);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data.size(), static_cast<size_t>(kMaxReadBytes));
}

TEST_F(TaskLogTest, RotationKeepsOffsetsAbsolute) {
  Append("aaaaaaaaaa");  // 10 bytes
  StatusOr<bool> rotated = RotateIfNeeded(dir_.path(), 20);
  ASSERT_TRUE(rotated.ok());
  EXPECT_FALSE(*rotated);
  Append("bbbbbbbbbbbbbbb");  // 25 bytes now
  rotated = RotateIfNeeded(dir_.path(), 20);
  ASSERT_TRUE(rotated.ok());
  EXPECT_TRUE(*rotated);
  EXPECT_EQ(RotatedBytes(dir_.path()), 25);
  EXPECT_EQ(ReadAll(TaskLogPath(dir_.path()) + ".1"), "aaaaaaaaaabbbbbbbbbbbbbbb");
  EXPECT_EQ(ReadAll(TaskLogPath(dir_.path())), "");
  Append("cccc");
  // A reader that had read 10 bytes goes on from 25 (the rest was rotated away).
  StatusOr<rpc::LogChunk> c = ReadTaskLog(dir_.path(), 10, 100, false);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->first_offset, 25);
  EXPECT_EQ(c->data, "cccc");
  EXPECT_EQ(c->next_offset, 29);
  c = ReadTaskLog(dir_.path(), 27, 100, true);
  EXPECT_EQ(c->data, "cc");
  EXPECT_TRUE(c->complete);
  c = ReadTaskLog(dir_.path(), -1, 2, false);
  EXPECT_EQ(c->data, "cc");
  EXPECT_EQ(c->next_offset, 29);
}

TEST_F(TaskLogTest, KeepsThreeRotatedFiles) {
  for (char ch : std::string("abcde")) {
    Append(std::string(30, ch));
    ASSERT_TRUE(RotateIfNeeded(dir_.path(), 20).ok());
  }
  std::string log = TaskLogPath(dir_.path());
  EXPECT_EQ(ReadAll(log + ".1"), std::string(30, 'e'));
  EXPECT_EQ(ReadAll(log + ".2"), std::string(30, 'd'));
  EXPECT_EQ(ReadAll(log + ".3"), std::string(30, 'c'));
  EXPECT_FALSE(std::filesystem::exists(log + ".4"));
  EXPECT_EQ(RotatedBytes(dir_.path()), 150);
}

TEST_F(TaskLogTest, TailIsTheLastLinesWithinTheByteLimit) {
  EXPECT_EQ(TaskLogTail(dir_.path()), "");
  for (int i = 1; i <= 30; ++i) Append("line " + std::to_string(i) + "\n");
  std::string tail = TaskLogTail(dir_.path(), 3);
  EXPECT_EQ(tail, "line 28\nline 29\nline 30");
  // Cut by bytes: no partial first line.
  tail = TaskLogTail(dir_.path(), 20, 20);
  EXPECT_EQ(tail, "line 29\nline 30");
  Append(std::string(5000, 'x'));  // one huge unterminated line
  EXPECT_EQ(TaskLogTail(dir_.path()).size(), 2048u);
}

}  // namespace
}  // namespace parallax::agent
