// Checkpoint files (trainer/checkpoint.h): the encodings round-trip, damage
// is detected and named, pruning keeps the newest committed checkpoints and
// anything in progress.
#include "trainer/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/base/durable_file.h"
#include "tests/testing/temp_dir.h"

namespace parallax::trainer {
namespace {

using ::testing::HasSubstr;

class CheckpointFilesTest : public ::testing::Test {
 protected:
  // A complete checkpoint of `step` in its directory; returns the manifest's SHA-256.
  std::string WriteCheckpoint(int64_t step) {
    const std::string dir = StepCheckpointDir(dir_.path(), 7, step);
    EXPECT_TRUE(MakeDirectories(dir).ok());
    DenseEntry e;
    e.id = 1;
    e.name = "w";
    e.values = {1, 2, 3};
    e.optimizer.s1 = {0.1f, 0.2f, 0.3f};
    e.optimizer.steps = {step};
    EXPECT_TRUE(WriteFileDurably(dir + "/" + kDenseFile, EncodeDenseFile({e})).ok());
    EXPECT_TRUE(
        WriteFileDurably(dir + "/" + RankStateFile(0), EncodeRankState({{"reader", "42"}})).ok());
    Manifest m;
    m.job_id = 7;
    m.step = step;
    m.plan_json = "{}";
    for (const std::string& name : {std::string(kDenseFile), RankStateFile(0)}) {
      auto f = DescribeFile(dir, name);
      EXPECT_TRUE(f.ok()) << f.status().ToString();
      m.files.push_back(*f);
    }
    const std::string text = ManifestToJson(m);
    EXPECT_TRUE(WriteFileDurably(dir + "/" + kManifestFile, text).ok());
    return Sha256Hex(text);
  }

  testing::TempDir dir_;
};

TEST_F(CheckpointFilesTest, DenseAndRankStateRoundTrip) {
  DenseEntry e;
  e.id = 3;
  e.name = "emb";
  e.values = {1.5f, -2};
  e.optimizer.s1 = {0.5f, 0.25f};
  e.optimizer.s2 = {1, 2};
  e.optimizer.steps = {4, 5};
  auto back = DecodeDenseFile(EncodeDenseFile({e}), "x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].name, "emb");
  EXPECT_EQ((*back)[0].values, e.values);
  EXPECT_EQ((*back)[0].optimizer.s2, e.optimizer.s2);
  EXPECT_EQ((*back)[0].optimizer.steps, e.optimizer.steps);
  std::map<std::string, std::string> blobs = {{"reader", "12"}, {"rng", std::string("\0\1", 2)}};
  auto state = DecodeRankState(EncodeRankState(blobs), "y");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(*state, blobs);
}

TEST_F(CheckpointFilesTest, TruncatedOrForeignBytesAreRefusedWithTheFileName) {
  DenseEntry e;
  e.name = "w";
  e.values.assign(100, 1.0f);
  const std::string bytes = EncodeDenseFile({e});
  for (size_t cut : {size_t{0}, size_t{7}, bytes.size() / 2, bytes.size() - 1}) {
    auto r = DecodeDenseFile(bytes.substr(0, cut), "/ck/dense.pxck");
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(r.status().message(), HasSubstr("/ck/dense.pxck"));
  }
  EXPECT_FALSE(DecodeRankState(bytes, "r").ok());  // another kind of file
  EXPECT_FALSE(DecodeDenseFile(bytes + "x", "d").ok());
}

TEST_F(CheckpointFilesTest, VerifyChecksTheManifestDigestAndEveryFile) {
  const std::string sha = WriteCheckpoint(10);
  const std::string dir = StepCheckpointDir(dir_.path(), 7, 10);
  auto m = VerifyCheckpoint(dir, sha);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->step, 10);
  EXPECT_EQ(m->files.size(), 2u);
  // The coordinator recorded another manifest.
  EXPECT_THAT(VerifyCheckpoint(dir, std::string(64, '0')).status().message(),
              HasSubstr("does not match the SHA-256"));
  // One flipped byte in a file.
  {
    std::fstream f(dir + "/" + RankStateFile(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('x');
  }
  auto bad = VerifyCheckpoint(dir, sha);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("rank-0.state"));
  // A missing file (a SAVE that never finished).
  std::filesystem::remove(dir + "/" + kDenseFile);
  EXPECT_THAT(VerifyCheckpoint(dir, sha).status().message(), HasSubstr("dense.pxck"));
  // No manifest: a checkpoint killed before it was complete.
  std::filesystem::remove(dir + "/" + kManifestFile);
  EXPECT_THAT(VerifyCheckpoint(dir, "").status().message(), HasSubstr("no readable manifest"));
}

TEST_F(CheckpointFilesTest, PruneKeepsTheNewestCommittedAndAnythingNewer) {
  for (int64_t s : {10, 20, 30, 40}) WriteCheckpoint(s);
  ASSERT_TRUE(MakeDirectories(StepCheckpointDir(dir_.path(), 7, 15)).ok());  // half-written
  ASSERT_TRUE(MakeDirectories(StepCheckpointDir(dir_.path(), 7, 50)).ok());  // in progress
  std::vector<CommittedCheckpoint> committed = {
      {40, 1, "", ""}, {30, 1, "", ""}, {20, 1, "", ""}, {10, 1, "", ""}};
  PruneCheckpoints(dir_.path(), 7, committed, 2);
  for (int64_t s : {10, 15, 20})
    EXPECT_FALSE(std::filesystem::exists(StepCheckpointDir(dir_.path(), 7, s))) << s;
  for (int64_t s : {30, 40, 50})
    EXPECT_TRUE(std::filesystem::exists(StepCheckpointDir(dir_.path(), 7, s))) << s;
}

}  // namespace
}  // namespace parallax::trainer
