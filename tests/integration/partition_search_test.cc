// [ps] partitions = "auto" end to end: a real coordinator and agent run the
// built-in lm model (2 workers, 2 PS shards, its embeddings on the PS path)
// on a tiny token file. The job's first attempts are partition-search
// trials (real shards, real steps, timed); the events carry every trial, the
// fit and the choice, the real attempt runs with the chosen P (its plan,
// which `parallax status` prints, says so) and the job succeeds.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/data/token_file.h"
#include "tests/fault/fault_cluster.h"
#include "tests/testing/temp_dir.h"

namespace parallax {
namespace {

using testing::FaultCluster;

// dir/tiny/{train.tok, heldout.tok, vocab.tsv}: 6,000 ids over a vocabulary of 50.
void WriteTinyLmData(const testing::TempDir& dir) {
  std::vector<uint32_t> tokens(6'000);
  uint32_t x = 7;
  for (uint32_t& t : tokens) {
    x = x * 1103515245u + 12345u;
    t = (x >> 16) % 50;
  }
  ASSERT_EQ(mkdir(dir.File("tiny").c_str(), 0755), 0);
  ASSERT_TRUE(data::WriteTokenFile(dir.File("tiny/train.tok"),
                                   std::span<const uint32_t>(tokens.data(), 5'000))
                  .ok());
  ASSERT_TRUE(data::WriteTokenFile(dir.File("tiny/heldout.tok"),
                                   std::span<const uint32_t>(tokens.data() + 5'000, 1'000))
                  .ok());
  std::ofstream vocab(dir.File("tiny/vocab.tsv"));
  for (uint32_t i = 0; i < 50; ++i) vocab << (i == 0 ? "<unk>" : "w" + std::to_string(i)) << "\t1\n";
}

TEST(PartitionSearchTest, AutoPartitionsRunTimedTrialsThenTheJobWithTheChosenP) {
  testing::TempDir dir;
  WriteTinyLmData(dir);
  FaultCluster cluster(dir);
  ASSERT_EQ(cluster.StartCoordinator(), "");
  cluster.StartAgent("a");
  const std::string job = dir.File("search.toml");
  std::ofstream(job) << "[job]\nname = \"search\"\nworkers = 2\narch = \"hybrid\"\n"
                        "[trainer]\nmodel = \"lm\"\nsteps = 30\nbatch_size = 32\n"
                        "checkpoint_every = 10\ncheckpoint_dir = \""
                     << dir.File("ckpt")
                     << "\"\n"
                        "[model]\ndata = \"tiny/train.tok\"\nvocab = 50\ndim = 8\ncontext = 2\n"
                        "hidden = 16\neval_tokens = 500\n"
                        "[ps]\nshards = 2\npartitions = \"auto\"\n"
                        "[plan]\nsearch_steps = 5\nsearch_warmup_steps = 2\nsearch_max_trials = 3\n"
                        "[[variable]]\nname = \"lm/input_embedding\"\npath = \"ps\"\n"
                        "[[variable]]\nname = \"lm/output_embedding\"\npath = \"ps\"\n"
                        // The dense variables all-reduced: the search is over
                        // the tables (the cost model may put them on the PS).
                        "[[variable]]\nname = \"lm/hidden/weights\"\npath = \"allreduce\"\n"
                        "[[variable]]\nname = \"lm/hidden/bias\"\npath = \"allreduce\"\n"
                        "[[variable]]\nname = \"lm/projection/weights\"\npath = \"allreduce\"\n"
                        "[[variable]]\nname = \"lm/projection/bias\"\npath = \"allreduce\"\n";
  testing::RunResult submit = cluster.Cli({"submit", job});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  std::string id = submit.out;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  id = id.substr(id.find_last_of('\n') + 1);

  const nlohmann::json end = cluster.WaitForEnd(id, 240'000);
  ASSERT_EQ(end.value("state", ""), "SUCCEEDED") << end.dump() << "\n" << cluster.Logs();

  // Every trial, then the fit and the choice.
  const std::vector<std::string> events = cluster.EventMessages(id);
  std::string all;
  for (const std::string& e : events) all += e + "\n";
  const std::regex trial(R"(partition search: trial at P=(\d+) \(attempt (\d+)\): ([0-9.]+) ms/step)");
  std::set<int> tried;
  std::set<int> trial_attempts;
  for (const std::string& e : events) {
    std::smatch m;
    if (std::regex_search(e, m, trial)) {
      tried.insert(std::stoi(m[1]));
      trial_attempts.insert(std::stoi(m[2]));
      EXPECT_GT(std::stod(m[3]), 0.0) << e;
    }
  }
  EXPECT_EQ(tried.size(), 3u) << all;
  EXPECT_EQ(trial_attempts, (std::set<int>{1, 2, 3})) << all;
  const std::regex chosen(R"(partition search: 3 trials: .*fit t\(P\) = .*the job runs with P=(\d+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(all, m, chosen)) << all;
  const int p = std::stoi(m[1]);
  EXPECT_GE(p, *tried.begin()) << all;
  EXPECT_LE(p, *tried.rbegin()) << all;
  EXPECT_EQ(all.find("restart"), std::string::npos) << "trials are not restarts\n" << all;
  EXPECT_EQ(end.value("attempt", 0), 4) << all;

  // The real attempt's plan has the chosen P, and `parallax status` shows it.
  testing::RunResult status = cluster.Cli({"status", id});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const std::regex row("lm/input_embedding +50x8 +[^ ]+ +ps +" + std::to_string(p) + " ");
  EXPECT_TRUE(std::regex_search(status.out, row)) << status.out;

  // Only the real attempt wrote checkpoints: its steps 10, 20 and 30.
  int checkpoints = 0;
  for (const std::string& e : events) {
    if (e.find("checkpointed to") == std::string::npos) continue;
    ++checkpoints;
    EXPECT_NE(e.find("of attempt 4 "), std::string::npos) << e;
  }
  EXPECT_EQ(checkpoints, 3) << all;
}

}  // namespace
}  // namespace parallax
