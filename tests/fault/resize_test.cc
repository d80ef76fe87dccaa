// Resuming with another number of workers and PS shards (docs/RELIABILITY.md,
// "Resuming with another number of workers"): a real coordinator and agent,
// the tiny job on 4 workers and 2 PS shards, rank 0 dying at step 15 (after
// the checkpoint of step 10) with no restart left, so the job FAILS; then
// `parallax resume JOB --workers 2 --shards 3`. Each resumed rank writes the
// model as Start() restored it (TINY_DUMP_RESUMED): the dense values equal
// dense.pxck and every embedding row the 2 shards saved equals what the 3
// shards now serve; the job then trains to the end and its next checkpoint
// is written by 2 workers in 3 partitions. (That the optimizer slots and
// Adam steps travel with the rows is tests/ps/reshard_test.cc, on the code
// the shard's LOAD runs.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/plan/job_plan.h"
#include "core/ps/dynamic_file.h"
#include "core/ps/partition_file.h"
#include "tests/fault/fault_cluster.h"
#include "tests/trainer/tiny_model.h"
#include "tests/trainer/tiny_trainer.h"
#include "trainer/checkpoint_files.h"

namespace parallax::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool HasEvent(const std::vector<std::string>& events, const std::string& part) {
  for (const std::string& e : events) {
    if (e.find(part) != std::string::npos) return true;
  }
  return false;
}

std::string Joined(const std::vector<std::string>& events) {
  std::string out;
  for (const std::string& e : events) out += e + "\n";
  return out;
}

class ResizeResumeTest : public ::testing::Test {
 protected:
  TempDir dir_;
  FaultCluster cluster_{dir_};
};

TEST_F(ResizeResumeTest, FourWorkersTwoShardsResumeOnTwoWorkersThreeShards) {
  ASSERT_EQ(cluster_.StartCoordinator(), "");
  cluster_.StartAgent("a", "", "127.0.0.1", 4);
  TinyJob job;
  job.tag = "resize";
  job.max_restarts = 0;
  job.workers = 4;
  job.shards = 2;
  job.env = {{"TINY_EXIT_AT_STEP", "15"},
             {"TINY_EXIT_RANK", "0"},
             {"TINY_DUMP_RESUMED", dir_.File("resumed-rank{rank}.out")}};
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(cluster_.WaitForEnd(id)["state"], "FAILED") << cluster_.Logs();
  const std::string step10 = cluster_.CheckpointRoot() + "/job-" + id + "/step-10";
  auto manifest = trainer::ParseManifest(ReadAll(step10 + "/MANIFEST.json"), step10);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->world_size, 4);

  RunResult resumed = cluster_.Cli({"resume", id, "--workers", "2", "--shards", "3"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("2 workers"), std::string::npos) << resumed.out;
  ASSERT_EQ(cluster_.WaitForEnd(id)["state"], "SUCCEEDED") << cluster_.Logs();
  const std::vector<std::string> events = cluster_.EventMessages(id);
  EXPECT_TRUE(HasEvent(events, "resumed with workers 4 -> 2, PS shards 2 -> 3")) << Joined(events);

  // What the shards and dense variables held right after the resume.
  auto dense = trainer::DecodeDenseFile(ReadAll(step10 + "/" + trainer::kDenseFile), step10);
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  std::map<int64_t, std::vector<float>> saved_rows;  // emb rows the checkpoint holds
  for (uint32_t p = 0; p < 2; ++p) {
    auto reader = ps::PartitionFileReader::Open(step10 + "/" + ps::PartitionFileName(0, p));
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->header().partitions, 2u);
    std::vector<int64_t> ids;
    std::vector<float> weights;
    do {
      ASSERT_TRUE((*reader)->Next(64, &ids, &weights).ok());
      const size_t dim = (*reader)->header().dim;
      for (size_t i = 0; i < ids.size(); ++i) {
        saved_rows[ids[i]].assign(weights.begin() + i * dim, weights.begin() + (i + 1) * dim);
      }
    } while (!ids.empty());
  }
  ASSERT_FALSE(saved_rows.empty());
  for (int r = 0; r < 2; ++r) {
    Model m = ReadModel(dir_.File("resumed-rank" + std::to_string(r) + ".out"));
    ASSERT_FALSE(m.empty()) << "rank " << r << " wrote no model after resuming\n" << cluster_.Logs();
    EXPECT_EQ(m["resumed"], std::vector<float>{10}) << "rank " << r;
    for (const trainer::DenseEntry& e : *dense) {
      if (e.name == "w") {
        EXPECT_EQ(m["w"], e.values) << "rank " << r;
      }
    }
    const size_t dim = TinyModel::kDim;
    ASSERT_EQ(m["emb"].size(), TinyModel::kRows * dim) << "rank " << r;
    for (const auto& [row, values] : saved_rows) {
      const std::vector<float> served(m["emb"].begin() + row * dim,
                                      m["emb"].begin() + (row + 1) * dim);
      ASSERT_EQ(served, values) << "rank " << r << " row " << row;
    }
    EXPECT_EQ(ReadModel(cluster_.Output("resize", r))["resumed"], std::vector<float>{10});
  }
  // Training went on to the end with 2 workers and 3 partitions.
  const std::string step20 = cluster_.CheckpointRoot() + "/job-" + id + "/step-20";
  auto next = trainer::ParseManifest(ReadAll(step20 + "/MANIFEST.json"), step20);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->world_size, 2);
  EXPECT_TRUE(std::filesystem::exists(step20 + "/" + ps::PartitionFileName(0, 2)));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("resize-rank2.out")));
}

// The same with emb a dynamic table over the whole 64-bit range
// (TINY_DYNAMIC=spread): the checkpoint has one file per shard, and the 3
// shards of the resumed job re-split the 2 files' rows by the hash of their
// ids (tests/ps/shard_dynamic_test.cc has the budget and the counts).
TEST_F(ResizeResumeTest, ADynamicTableOnTwoShardsResumesOnThree) {
  ASSERT_EQ(cluster_.StartCoordinator(), "");
  cluster_.StartAgent("a", "", "127.0.0.1", 4);
  TinyJob job;
  job.tag = "dynresize";
  job.max_restarts = 0;
  job.workers = 2;
  job.shards = 2;
  job.env = {{"TINY_EXIT_AT_STEP", "15"},
             {"TINY_EXIT_RANK", "0"},
             {"TINY_DYNAMIC", "spread"},
             {"TINY_DUMP_RESUMED", dir_.File("dynresumed-rank{rank}.out")}};
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(cluster_.WaitForEnd(id)["state"], "FAILED") << cluster_.Logs();
  const std::string step10 = cluster_.CheckpointRoot() + "/job-" + id + "/step-10";
  auto manifest = trainer::ParseManifest(ReadAll(step10 + "/MANIFEST.json"), step10);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  auto plan = plan::ParseJobPlan(manifest->plan_json);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const ps::VariableSpec* emb = plan->ps.FindVariable(0);
  ASSERT_TRUE(emb && emb->dynamic);
  std::map<int64_t, std::vector<float>> saved_rows;  // by id
  auto files = ps::ReadDynamicFiles(step10, *emb);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->size(), 2u);
  for (const ps::DynamicFile& f : *files) {
    auto table = ps::TableOfFile(f, *emb);
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    for (uint64_t i : (*table)->Ids()) {
      const float* w = (*table)->weights((*table)->Find(i));
      saved_rows[static_cast<int64_t>(i)].assign(w, w + TinyModel::kDim);
    }
  }
  ASSERT_GT(saved_rows.size(), 50u);

  RunResult resumed = cluster_.Cli({"resume", id, "--shards", "3"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  ASSERT_EQ(cluster_.WaitForEnd(id)["state"], "SUCCEEDED") << cluster_.Logs();
  for (int r = 0; r < 2; ++r) {
    Model m = ReadModel(dir_.File("dynresumed-rank" + std::to_string(r) + ".out"));
    ASSERT_EQ(m["emb"].size(), TinyModel::kRows * TinyModel::kDim) << "rank " << r << "\n"
                                                                   << cluster_.Logs();
    size_t matched = 0;
    for (int64_t row = 0; row < TinyModel::kRows; ++row) {
      auto it = saved_rows.find(TinyId(row, true));
      if (it == saved_rows.end()) continue;
      const std::vector<float> served(m["emb"].begin() + row * TinyModel::kDim,
                                      m["emb"].begin() + (row + 1) * TinyModel::kDim);
      EXPECT_EQ(served, it->second) << "rank " << r << " row " << row;
      ++matched;
    }
    EXPECT_EQ(matched, saved_rows.size()) << "rank " << r;
  }
  // The next checkpoint is written by the 3 shards.
  const std::string step20 = cluster_.CheckpointRoot() + "/job-" + id + "/step-20";
  for (uint32_t s = 0; s < 3; ++s) {
    EXPECT_TRUE(std::filesystem::exists(step20 + "/" + ps::DynamicFileName(0, s))) << s;
  }
}

// A resume that names a count the job cannot take is refused and the job
// stays FAILED with its own file.
TEST_F(ResizeResumeTest, BadCountsAreRefusedAndChangeNothing) {
  ASSERT_EQ(cluster_.StartCoordinator(), "");
  cluster_.StartAgent("a", "", "127.0.0.1", 2);
  TinyJob job;
  job.tag = "refused";
  job.max_restarts = 0;
  job.env = {{"TINY_EXIT_AT_STEP", "5"}, {"TINY_EXIT_RANK", "0"}};
  const std::string id = cluster_.Submit(job);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(cluster_.WaitForEnd(id)["state"], "FAILED") << cluster_.Logs();
  RunResult zero = cluster_.Cli({"resume", id, "--workers", "0"});
  EXPECT_NE(zero.exit_code, 0);
  const std::string bad_file = dir_.File("bad.toml");
  std::ofstream(bad_file) << "[job]\nname = \"refused\"\nworkers = 2\nmin_workers = 3\n";
  RunResult bad = cluster_.Cli({"resume", id, "--job", bad_file});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("min_workers"), std::string::npos) << bad.err;
  RunResult status = cluster_.Cli({"status", id, "--json"});
  EXPECT_NE(status.out.find("FAILED"), std::string::npos) << status.out;
}

}  // namespace
}  // namespace parallax::testing
