// parallax-data as a real process: the Brown conversion on a tiny fake corpus
// and a small synthetic CTR set, read back through the library's readers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/data/criteo.h"
#include "core/data/token_file.h"
#include "core/data/token_reader.h"
#include "core/data/vocabulary.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::data {
namespace {

using parallax::testing::RunProcess;

std::string Tool() { return std::string(::parallax::testing::BuildBinDir()) + "/parallax-data"; }

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
  auto run = RunProcess(
      {Tool(), "brown", corpus, dir_.File("out"), "--vocab", "8", "--heldout-every", "4"});
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
  std::vector<std::string> argv = {Tool(), "synthetic-ctr", dir_.File("ctr"), "--train",
                                   "3000", "--heldout",     "2000",           "--seed",
                                   "11",   "--table-sizes"};
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

uint32_t Le32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

TEST_F(DataToolTest, BatchesEqualEveryRanksTokenReader) {
  std::vector<uint32_t> tokens(500);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7919) % 97);
  ASSERT_TRUE(WriteTokenFile(dir_.File("t.tok"), tokens).ok());
  // 3 ranks x 40 steps x 8 examples = 960 > 496 examples: the file wraps into a second epoch.
  const uint32_t workers = 3, steps = 40, batch = 8, context = 3;
  auto run =
      RunProcess({Tool(), "batches", dir_.File("t.tok"), "--context", "3", "--batch", "8",
                  "--workers", "3", "--steps", "40", "--seed", "77", "--out", dir_.File("b.bin")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::ifstream in(dir_.File("b.bin"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 32u + 4u * steps * workers * batch * (context + 1));
  EXPECT_EQ(bytes.substr(0, 8), "PXBAT001");
  EXPECT_EQ(Le32(bytes, 8), workers);
  EXPECT_EQ(Le32(bytes, 12), steps);
  EXPECT_EQ(Le32(bytes, 16), batch);
  EXPECT_EQ(Le32(bytes, 20), context);
  EXPECT_EQ(Le32(bytes, 24), 77u);
  EXPECT_EQ(Le32(bytes, 28), 0u);

  std::vector<std::unique_ptr<TokenReader>> readers;
  for (uint32_t r = 0; r < workers; ++r) {
    TokenReaderOptions options;
    options.shard = static_cast<int>(r);
    options.num_shards = static_cast<int>(workers);
    options.seed = 77;
    options.context = context;
    auto reader = TokenReader::Open(dir_.File("t.tok"), options);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    readers.push_back(std::move(*reader));
  }
  size_t at = 32;
  TokenBatch expected;
  for (uint32_t step = 0; step < steps; ++step) {
    for (uint32_t r = 0; r < workers; ++r) {
      readers[r]->Next(batch, &expected);
      std::vector<uint32_t> got_context(batch * context), got_targets(batch);
      for (auto& id : got_context) id = Le32(bytes, (at += 4) - 4);
      for (auto& id : got_targets) id = Le32(bytes, (at += 4) - 4);
      ASSERT_EQ(got_context, expected.context) << "step " << step << " rank " << r;
      ASSERT_EQ(got_targets, expected.targets) << "step " << step << " rank " << r;
    }
  }
  EXPECT_EQ(readers[0]->epoch(), 1);  // the wrap was exercised

  // Another seed gives another order; a missing token file is explained.
  auto other =
      RunProcess({Tool(), "batches", dir_.File("t.tok"), "--seed", "78", "--context", "3",
                  "--batch", "8", "--workers", "3", "--steps", "40", "--out", dir_.File("c.bin")});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  std::ifstream other_in(dir_.File("c.bin"), std::ios::binary);
  std::string other_bytes((std::istreambuf_iterator<char>(other_in)),
                          std::istreambuf_iterator<char>());
  EXPECT_EQ(other_bytes.size(), bytes.size());
  EXPECT_NE(other_bytes.substr(32), bytes.substr(32));
  auto missing =
      RunProcess({Tool(), "batches", dir_.File("nowhere.tok"), "--out", dir_.File("d.bin")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("scripts/fetch-data"), std::string::npos) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("d.bin")));
}

TEST_F(DataToolTest, HelpAndBadArguments) {
  auto help = RunProcess({Tool(), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("brown"), std::string::npos);
  EXPECT_NE(help.out.find("synthetic-ctr"), std::string::npos);
  EXPECT_NE(help.out.find("batches"), std::string::npos);
  EXPECT_NE(RunProcess({Tool(), "batches", "t.tok", "--out", "x", "--workers", "0"}).exit_code, 0);
  auto sub = RunProcess({Tool(), "brown", "--help"});
  EXPECT_EQ(sub.exit_code, 0);
  EXPECT_NE(sub.out.find("--heldout-every"), std::string::npos);
  EXPECT_NE(RunProcess({Tool()}).exit_code, 0);
  EXPECT_NE(
      RunProcess({Tool(), "synthetic-ctr", dir_.File("x"), "--table-sizes", "1", "2"}).exit_code,
      0);
  auto bad = RunProcess({Tool(), "brown", "a", "b", "--heldout-every", "1"});
  EXPECT_NE(bad.exit_code, 0);
}

}  // namespace
}  // namespace parallax::data
