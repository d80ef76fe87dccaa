// Checkpoint files (trainer/checkpoint.h): the encodings round-trip, damage
// is detected and named, pruning keeps the newest committed checkpoints and
// anything in progress.
#include "trainer/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/base/durable_file.h"
#include "ps/checkpoint.h"
#include "ps/variable_table.h"
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

TEST_F(CheckpointFilesTest, DenseFileDecodesOnlyTheEntriesAskedForAndStillChecksTheOthers) {
  std::vector<DenseEntry> entries(3);
  for (uint32_t i = 0; i < 3; ++i) {
    entries[i].id = i;
    entries[i].name = "v" + std::to_string(i);
    entries[i].values.assign(10 + i, static_cast<float>(i));
    entries[i].optimizer.s1.assign(10 + i, 0.5f);
  }
  const std::string bytes = EncodeDenseFile(entries);
  ASSERT_TRUE(MakeDirectories(dir_.path() + "/ck").ok());
  const std::string path = dir_.path() + "/ck/dense.pxck";
  ASSERT_TRUE(WriteFileDurably(path, bytes).ok());
  std::vector<std::string> seen;
  auto only1 = checkpoint::ReadDenseFile(path, [&](uint32_t id, std::string_view name) {
    seen.emplace_back(name);
    return id == 1 && name == "v1";
  });
  ASSERT_TRUE(only1.ok()) << only1.status().ToString();
  EXPECT_EQ(seen, (std::vector<std::string>{"v0", "v1", "v2"}));
  ASSERT_EQ(only1->size(), 1u);
  EXPECT_EQ((*only1)[0].name, "v1");
  EXPECT_EQ((*only1)[0].values, entries[1].values);
  EXPECT_EQ((*only1)[0].optimizer.s1, entries[1].optimizer.s1);
  // A cut inside an entry that is skipped is an error all the same.
  auto none = [](uint32_t, std::string_view) { return false; };
  EXPECT_TRUE(checkpoint::ReadDenseFile(path, none).ok());
  ASSERT_TRUE(WriteFileDurably(path, bytes.substr(0, bytes.size() - 5)).ok());
  auto cut = checkpoint::ReadDenseFile(path, none);
  ASSERT_FALSE(cut.ok());
  EXPECT_THAT(cut.status().message(), HasSubstr("/ck/dense.pxck"));
}

TEST_F(CheckpointFilesTest, DenseFileReadFromDiskPieceByPieceEqualsTheDecodedBytes) {
  std::vector<DenseEntry> entries(3);
  for (uint32_t i = 0; i < 3; ++i) {
    entries[i].id = i;
    entries[i].name = "v" + std::to_string(i);
    entries[i].values.assign(1000 + i, 0.25f * static_cast<float>(i));
    entries[i].optimizer.s1.assign(1000 + i, 0.5f);
    entries[i].optimizer.steps.assign(3, 7 + i);
  }
  const std::string bytes = EncodeDenseFile(entries);
  const std::string path = dir_.path() + "/dense.pxck";
  ASSERT_TRUE(WriteFileDurably(path, bytes).ok());
  auto keep2 = [](uint32_t id, std::string_view name) { return id == 2 && name == "v2"; };
  auto all = checkpoint::ReadDenseFile(path);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*all)[i].name, entries[i].name);
    EXPECT_EQ((*all)[i].values, entries[i].values);
    EXPECT_EQ((*all)[i].optimizer.s1, entries[i].optimizer.s1);
    EXPECT_EQ((*all)[i].optimizer.steps, entries[i].optimizer.steps);
  }
  auto only2 = checkpoint::ReadDenseFile(path, keep2);
  ASSERT_TRUE(only2.ok()) << only2.status().ToString();
  ASSERT_EQ(only2->size(), 1u);
  EXPECT_EQ((*only2)[0].values, entries[2].values);
  // Cut inside a skipped entry, one byte too many, another file, none: refused, the file named.
  for (const std::string& bad : {bytes.substr(0, 40), bytes + "x", std::string("PXRS....")}) {
    ASSERT_TRUE(WriteFileDurably(path, bad).ok());
    auto r = checkpoint::ReadDenseFile(path, keep2);
    ASSERT_FALSE(r.ok()) << bad.size();
    EXPECT_THAT(r.status().message(), HasSubstr(path));
  }
  auto missing = checkpoint::ReadDenseFile(dir_.path() + "/none.pxck");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_THAT(missing.status().message(), HasSubstr("none.pxck"));
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
// A table the plan moved between the two worker paths: all-reduce keeps a
// DenseOptimizer (one step count), all-gather a SparseOptimizer (a step per
// row under Adam, none otherwise); RestoreHeld takes either form.
TEST_F(CheckpointFilesTest, ATableMovedBetweenAllReduceAndAllGatherRestores) {
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kAdagrad, OptimizerType::kAdam}) {
    OptimizerSettings spec;
    spec.type = type;
    spec.lr = 0.1f;
    std::vector<float> table(3 * 2, 0.5f), grad(2, 0.25f);
    optim::DenseOptimizer dense(spec, table.size());
    std::vector<float> g(table.size(), 0.25f);
    dense.Apply(g, table);
    dense.Apply(g, table);
    const DenseEntry from_allreduce{.id = 0, .name = "emb", .values = table, .optimizer = dense.State()};

    std::vector<float> replica(table.size());
    optim::SparseOptimizer sparse(spec, 3, 2);
    HeldVariable gathered{.id = 0, .name = "emb", .values = &replica, .sparse_opt = &sparse};
    ASSERT_TRUE(RestoreHeld({from_allreduce}, {gathered}).ok()) << OptimizerTypeName(type);
    EXPECT_EQ(replica, table);
    const optim::OptimizerState got = sparse.State();
    EXPECT_EQ(got.s1, dense.State().s1) << OptimizerTypeName(type);
    const std::vector<int64_t> want_steps =
        type == OptimizerType::kAdam ? std::vector<int64_t>{2, 2, 2} : std::vector<int64_t>{};
    EXPECT_EQ(got.steps, want_steps) << OptimizerTypeName(type);

    // And back: the per-row form into a DenseOptimizer.
    const DenseEntry from_allgather{.id = 0, .name = "emb", .values = replica, .optimizer = got};
    std::vector<float> whole(table.size());
    optim::DenseOptimizer again(spec, whole.size());
    HeldVariable reduced{.id = 0, .name = "emb", .values = &whole, .dense_opt = &again};
    ASSERT_TRUE(RestoreHeld({from_allgather}, {reduced}).ok()) << OptimizerTypeName(type);
    EXPECT_EQ(again.steps(), type == OptimizerType::kAdam ? 2 : 0) << OptimizerTypeName(type);
  }
}

// A variable that changed sides between the checkpoint and the resumed
// plan (trainer/checkpoint.h): a dense variable of 1,030 elements (2 PS rows
// of 1,024, the last one padded) trained by a shard's Adam comes back as the
// DenseEntry a DenseOptimizer restores, and a shard takes the same rows back
// from it (ps::PartitionsFromWorkerCopy, what LOAD does with dense.pxck); a
// file of another shape is refused naming it.
TEST_F(CheckpointFilesTest, AVariableCrossesBetweenThePsFilesAndAWorkersEntry) {
  plan::PlannedVariable v;
  v.id = 3;
  v.name = "w";
  v.sparse = false;
  v.size = 1030;
  v.dim = 1024;
  v.rows = 2;
  v.path = VariablePath::kAllReduce;
  v.optimizer.type = OptimizerType::kAdam;
  v.optimizer.lr = 0.01f;
  v.init.seed = 4;
  ps::VariableSpec spec;
  spec.id = v.id;
  spec.name = v.name;
  spec.rows = v.rows;
  spec.dim = v.dim;
  spec.optimizer = v.optimizer;
  spec.init = v.init;
  spec.partition_shards = {0};
  ps::VariableTable table(spec);
  std::vector<float> g(v.dim);
  for (int step = 0; step < 3; ++step) {
    for (int64_t row : {0, 1}) {
      for (uint32_t d = 0; d < v.dim; ++d) g[d] = 0.001f * static_cast<float>((d + row + step) % 7) - 0.003f;
      table.Apply(table.Touch(row), g.data(), 1.0f);
    }
  }
  const std::string dir = dir_.File("step-3");
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(ps::SavePartition(dir, table, 0, 3, 6).ok());

  StatusOr<DenseEntry> e = ReadPsVariable(dir, v, 3);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->id, 3u);
  EXPECT_EQ(e->name, "w");
  ASSERT_EQ(e->values.size(), 1030u);
  ASSERT_EQ(e->optimizer.s1.size(), 1030u);
  ASSERT_EQ(e->optimizer.s2.size(), 1030u);
  EXPECT_EQ(e->optimizer.steps, std::vector<int64_t>{3}) << "Adam's step: the rows'";
  for (size_t i = 0; i < 1030; ++i) {
    const uint32_t idx = table.Touch(static_cast<int64_t>(i / 1024));
    ASSERT_EQ(e->values[i], table.weights(idx)[i % 1024]) << i;
    ASSERT_EQ(e->optimizer.s2[i], table.slot(1, idx)[i % 1024]) << i;
  }
  optim::DenseOptimizer dense(v.optimizer, v.size);
  EXPECT_TRUE(dense.Restore(e->optimizer).ok());

  const std::vector<uint32_t> owned = {0};
  auto back = ps::PartitionsFromWorkerCopy(e->values, e->optimizer, spec, owned, 3, "dense.pxck");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 1u);
  const ps::PartitionSnapshot& snap = back->front();
  EXPECT_EQ(snap.ids, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(snap.applied, 3);
  EXPECT_EQ(snap.steps, (std::vector<int64_t>{3, 3}));
  ASSERT_EQ(snap.weights.size(), 2048u);
  ASSERT_EQ(snap.slots[1].size(), 2048u);
  for (size_t i = 0; i < 1030; ++i) {
    const uint32_t idx = table.Touch(static_cast<int64_t>(i / 1024));
    ASSERT_EQ(snap.weights[i], table.weights(idx)[i % 1024]) << i;
    ASSERT_EQ(snap.slots[1][i], table.slot(1, idx)[i % 1024]) << i;
  }
  EXPECT_EQ(snap.weights[1030], 0.0f) << "past the variable's 1,030 elements: padding";

  // A table (2 rows of 1,024) read for the all-gather path gets a
  // SparseOptimizer's steps, for all-reduce a DenseOptimizer's; either
  // form goes back to the PS.
  plan::PlannedVariable table_var = v;
  table_var.sparse = true;
  table_var.size = 0;
  table_var.path = VariablePath::kAllGather;
  StatusOr<DenseEntry> gathered = ReadPsVariable(dir, table_var, 3);
  ASSERT_TRUE(gathered.ok()) << gathered.status().ToString();
  EXPECT_EQ(gathered->values.size(), 2048u);
  EXPECT_EQ(gathered->optimizer.steps, (std::vector<int64_t>{3, 3}));
  optim::SparseOptimizer sparse(v.optimizer, 2, v.dim);
  EXPECT_TRUE(sparse.Restore(gathered->optimizer).ok());
  table_var.path = VariablePath::kAllReduce;
  StatusOr<DenseEntry> reduced = ReadPsVariable(dir, table_var, 3);
  ASSERT_TRUE(reduced.ok()) << reduced.status().ToString();
  EXPECT_EQ(reduced->optimizer.steps, std::vector<int64_t>{3});
  optim::DenseOptimizer whole(v.optimizer, 2048);
  EXPECT_TRUE(whole.Restore(reduced->optimizer).ok());
  for (const DenseEntry* form : {&*gathered, &*reduced}) {
    auto parts = ps::PartitionsFromWorkerCopy(form->values, form->optimizer, spec, owned, 3, "dense.pxck");
    ASSERT_TRUE(parts.ok()) << parts.status().ToString();
    EXPECT_EQ(parts->front().steps, (std::vector<int64_t>{3, 3}));
    ASSERT_EQ(parts->front().weights.size(), 2048u);
    for (size_t i = 0; i < 2048; ++i) {  // both rows whole: a table has no padding
      ASSERT_EQ(parts->front().weights[i], table.weights(table.Touch(static_cast<int64_t>(i / 1024)))[i % 1024]);
    }
  }

  plan::PlannedVariable other = v;
  other.dim = 512;
  other.rows = 3;
  StatusOr<DenseEntry> bad = ReadPsVariable(dir, other, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("var3-part0.pxps"));
  EXPECT_THAT(bad.status().message(), HasSubstr("now has 3 of dim 512"));
  other = v;
  other.id = 4;
  EXPECT_THAT(ReadPsVariable(dir, other, 3).status().message(), HasSubstr("var4-part0.pxps"));
  DenseEntry short_entry = *e;
  short_entry.optimizer.s1.pop_back();
  auto refused = ps::PartitionsFromWorkerCopy(short_entry.values, short_entry.optimizer, spec, owned, 3,
                                              "dense.pxck");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("dense.pxck: \"w\" holds 1030 values, 2059 optimizer values"));
}

}  // namespace parallax::trainer
