// parallax-trainer as a process, one rank without a coordinator (only
// PARALLAX_JOB_FILE set): it trains a built-in model to the job's step count,
// prints progress and the evaluation, exits 0; a bad [model] key or missing
// data is exit 1 with a message saying what to do.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "core/data/token_file.h"
#include "core/rpc/coordinator_client.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/coordinator_connect.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/trainer/models/synthetic_data.h"

namespace parallax {
namespace {

std::string Trainer() {
  return testing::BinDirOr(::parallax::testing::BuildBinDir()) + "/parallax-trainer";
}

class TrainerMainTest : public ::testing::Test {
 protected:
  testing::RunResult Run(const std::string& job_text) {
    const std::string job = dir_.File("job.toml");
    std::ofstream(job) << job_text;
    return testing::RunProcess({Trainer()}, {"PARALLAX_JOB_FILE=" + job}, 120'000);
  }
  // dir/tiny/{train.tok, heldout.tok, vocab.tsv}: a Markov chain over 50 ids.
  void WriteTinyLmData() {
    std::vector<uint32_t> tokens = testing::MarkovTokens(50, 6'000, 3);
    ASSERT_EQ(mkdir(dir_.File("tiny").c_str(), 0755), 0);
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("tiny/train.tok"),
                                     std::span<const uint32_t>(tokens.data(), 5'000)).ok());
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("tiny/heldout.tok"),
                                     std::span<const uint32_t>(tokens.data() + 5'000, 1'000)).ok());
    std::vector<uint64_t> counts = testing::Counts(tokens, 50);
    std::ofstream vocab(dir_.File("tiny/vocab.tsv"));
    for (uint32_t i = 0; i < 50; ++i)
      vocab << (i == 0 ? "<unk>" : "w" + std::to_string(i)) << "\t" << counts[i] << "\n";
  }
  testing::TempDir dir_;
};

TEST_F(TrainerMainTest, MlpTrainsAndEvaluates) {
  auto r = Run("[job]\nname = \"m\"\n[trainer]\nmodel = \"mlp\"\nsteps = 200\nbatch_size = 64\n"
               "[model]\nfeatures = 4\nclasses = 3\nhidden = [16]\neval_examples = 2000\n"
               "[optimizer.dense]\ntype = \"sgd\"\nlr = 0.1\n");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 0 step 200/200 loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval step 200 accuracy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bayes_accuracy 0.9333"), std::string::npos) << r.out;
}

// Token files written by core/data, paths relative to the job file.
TEST_F(TrainerMainTest, LmReadsItsDataRelativeToTheJobFile) {
  WriteTinyLmData();
  auto r = Run("[job]\nname = \"l\"\n[trainer]\nmodel = \"lm\"\nsteps = 100\nbatch_size = 32\n"
               "[model]\ndata = \"tiny/train.tok\"\nvocab = 50\ndim = 8\ncontext = 2\nhidden = 16\n"
               "eval_every = 50\neval_tokens = 500\n");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("eval step 50 perplexity"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval step 100 perplexity"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unigram_perplexity"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
}

// A checkpointed lm run that stops at step 10 and is resumed by a second
// attempt ends with exactly the model of an uninterrupted 20-step run: the
// data position saved with the checkpoint (RegisterState) makes the resumed
// attempt read on instead of starting the data over.
TEST_F(TrainerMainTest, LmResumesItsDataPositionFromACheckpoint) {
  WriteTinyLmData();
  testing::CoordinatorProcess coordinator(::parallax::testing::BuildBinDir(), dir_.path());
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  const std::string port = coordinator.port_text();
  auto coord = testing::ConnectToCoordinator(coordinator);
  ASSERT_TRUE(coord.ok()) << coord.status().ToString();
  auto job_text = [&](const std::string& name, int steps) {
    return "[job]\nname = \"" + name + "\"\narch = \"allgather\"\n[trainer]\nmodel = \"lm\"\n"
           "steps = " + std::to_string(steps) + "\nbatch_size = 32\ncheckpoint_every = 10\n"
           "checkpoint_dir = \"" + dir_.File("ckpt") + "\"\n"
           "[model]\ndata = \"" + dir_.File("tiny/train.tok") + "\"\nvocab = 50\ndim = 8\n"
           "context = 2\nhidden = 16\neval_tokens = 500\n"
           "[optimizer.dense]\ntype = \"sgd\"\nlr = 0.5\n[optimizer.sparse]\ntype = \"sgd\"\nlr = 0.5\n";
  };
  // Runs one attempt of `job` whose rank reads `text`; returns its stdout.
  auto attempt = [&](int64_t job, int n, const std::string& text) {
    const std::string file = dir_.File("job-" + std::to_string(job) + "-" + std::to_string(n) + ".toml");
    std::ofstream(file) << text;
    auto r = testing::RunProcess({Trainer()},
                                 {"PARALLAX_JOB_FILE=" + file, "PARALLAX_JOB_ID=" + std::to_string(job),
                                  "PARALLAX_ATTEMPT=" + std::to_string(n),
                                  "PARALLAX_COORDINATOR=127.0.0.1:" + port},
                                 120'000);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return r.out;
  };
  auto submit = [&](const std::string& text) {
    auto job = (*coord)->SubmitJob(text, dir_.File("submitted.toml"));
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->id : int64_t{0};
  };
  auto final_eval = [](const std::string& out) {
    const size_t at = out.rfind("eval step");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };

  const int64_t whole = submit(job_text("whole", 20));
  const std::string uninterrupted = final_eval(attempt(whole, 1, job_text("whole", 20)));
  ASSERT_NE(uninterrupted.find("eval step 20 perplexity"), std::string::npos) << uninterrupted;

  const int64_t split = submit(job_text("split", 20));
  const std::string first = attempt(split, 1, job_text("split", 10));  // stops at the checkpoint
  EXPECT_NE(final_eval(first).find("eval step 10"), std::string::npos) << first;
  const std::string second = attempt(split, 2, job_text("split", 20));
  EXPECT_NE(second.find("resumed from the checkpoint of step 10"), std::string::npos) << second;
  EXPECT_EQ(final_eval(second), uninterrupted) << second;
}

TEST_F(TrainerMainTest, MissingDataSaysToRunFetchData) {
  auto r = Run("[job]\nname = \"l\"\n[trainer]\nmodel = \"lm\"\nsteps = 10\n"
               "[model]\ndata = \"nowhere/train.tok\"\n");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("run scripts/fetch-data"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nowhere/train.tok"), std::string::npos) << r.err;
}

TEST_F(TrainerMainTest, UnknownModelKeyIsNamed) {
  auto r = Run("[job]\nname = \"l\"\n[trainer]\nmodel = \"mlp\"\nsteps = 10\n[model]\nlayers = 3\n");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("'model.layers'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hidden"), std::string::npos) << r.err;  // lists the model's keys
}

}  // namespace
}  // namespace parallax
