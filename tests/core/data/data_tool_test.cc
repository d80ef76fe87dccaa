// parallax-data as a real process: the Brown conversion on a tiny fake corpus
// and a small synthetic CTR set, read back through the library's readers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/data/criteo.h"
#include "core/data/token_reader.h"
#include "core/data/vocabulary.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::data {
namespace {

using parallax::testing::RunProcess;

std::string Tool() { return std::string(PARALLAX_BIN_DIR_DEFAULT) + "/parallax-data"; }

class DataToolTest : public ::testing::Test {
 protected:
  parallax::testing::TempDir dir_;
};

TEST_F(DataToolTest, BrownConvertsAFakeCorpus) {
  const std::string corpus = dir_.File("corpus");
  std::filesystem::create_directories(corpus);
  for (int i = 1; i <= 4; ++i) {
    std::ofstream(corpus + "/cb0" + std::to_string(i))
        << "\n\n\tThe/at jury/nn said/vbd it/pps did/dod find/vb ./.\n"
        << "\tThe/at Grand/jj-tl Jury/nn-tl took/vbd place/nn " << (i == 4 ? "once/rb" : "")
        << " ,/, he/pps said/vbd ./.\n";
  }
  std::ofstream(corpus + "/README") << "the/at readme/nn";
  auto run = RunProcess({Tool(), "brown", corpus, dir_.File("out"), "--vocab", "8",
                         "--heldout-every", "4"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto stats = nlohmann::json::parse(run.out);
  EXPECT_EQ(stats["documents_train"], 3);
  EXPECT_EQ(stats["documents_heldout"], 1);
  EXPECT_EQ(stats["tokens_train"], 3 * 16);
  EXPECT_EQ(stats["tokens_heldout"], 17);
  EXPECT_EQ(stats["vocab_size"], 8);
  EXPECT_GT(stats["unigram_perplexity"].get<double>(), 1.0);
  std::ifstream stats_file(dir_.File("out/stats.json"));
  EXPECT_EQ(nlohmann::json::parse(stats_file), stats);

  auto vocab = Vocabulary::Load(dir_.File("out/vocab.tsv"));
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  EXPECT_EQ(vocab->size(), 8u);
  EXPECT_EQ(vocab->Find("jury"), 2u);  // ". jury said the" (6 each), then ", did find" (3)
  EXPECT_EQ(vocab->Find(","), 5u);
  EXPECT_EQ(vocab->Find("he"), 0u);
  TokenReaderOptions options;
  options.shuffle = false;
  auto reader = TokenReader::Open(dir_.File("out/heldout.tok"), options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->examples_per_epoch(), 17u - 4u);
}

TEST_F(DataToolTest, BrownExplainsAMissingCorpus) {
  auto run = RunProcess({Tool(), "brown", dir_.File("nowhere"), dir_.File("out")});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("scripts/fetch-data"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("out/train.tok")));
}

TEST_F(DataToolTest, SyntheticCtrWritesReadableFiles) {
  std::vector<std::string> argv = {Tool(), "synthetic-ctr", dir_.File("ctr"), "--train", "3000",
                                   "--heldout", "2000", "--seed", "11", "--table-sizes"};
  for (int f = 0; f < kCriteoCategorical; ++f) argv.push_back(std::to_string(f < 3 ? 5000 : 20));
  auto run = RunProcess(argv);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto line = nlohmann::json::parse(run.out);
  std::ifstream generator_file(dir_.File("ctr/generator.json"));
  auto generator = nlohmann::json::parse(generator_file);
  EXPECT_EQ(generator["seed"], 11);
  EXPECT_EQ(generator["train_examples"], 3000);
  EXPECT_EQ(generator["bayes_auc"], line["bayes_auc"]);
  EXPECT_GT(line["bayes_auc"].get<double>(), 0.65);

  CriteoReaderOptions options;
  options.table_sizes = generator["table_sizes"].get<std::vector<int64_t>>();
  options.num_shards = 2;
  options.shard = 1;
  auto reader = CriteoReader::Open(dir_.File("ctr/train.tsv"), options);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->size(), 1500u);
}

TEST_F(DataToolTest, HelpAndBadArguments) {
  auto help = RunProcess({Tool(), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("brown"), std::string::npos);
  EXPECT_NE(help.out.find("synthetic-ctr"), std::string::npos);
  auto sub = RunProcess({Tool(), "brown", "--help"});
  EXPECT_EQ(sub.exit_code, 0);
  EXPECT_NE(sub.out.find("--heldout-every"), std::string::npos);
  EXPECT_NE(RunProcess({Tool()}).exit_code, 0);
  EXPECT_NE(RunProcess({Tool(), "synthetic-ctr", dir_.File("x"), "--table-sizes", "1", "2"}).exit_code,
            0);
  auto bad = RunProcess({Tool(), "brown", "a", "b", "--heldout-every", "1"});
  EXPECT_NE(bad.exit_code, 0);
}

}  // namespace
}  // namespace parallax::data
