#include "core/data/brown.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/data/token_file.h"
#include "tests/testing/temp_dir.h"

namespace parallax::data {
namespace {

class BrownTest : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_.File(name)) << text;
  }
  parallax::testing::TempDir dir_;
};

TEST_F(BrownTest, TokenizerStripsTagsLowercasesAndKeepsPunctuation) {
  std::vector<std::string> words;
  TokenizeBrown(
      "\n\n\tThe/at Fulton/np-tl County/nn-tl said/vbd ``/`` no/at evidence/nn ''/'' ./.\n"
      "\tAtlanta's/np$ 1-1/2/cd 4-1/2%/nn term-end/nn ,/, Mr./np bare /x\n",
      &words);
  const std::vector<std::string> expected = {"the",       "fulton", "county", "said", "``",
                                             "no",        "evidence", "''",   ".",    "atlanta's",
                                             "1-1/2",     "4-1/2%", "term-end", ",",  "mr.",
                                             "bare"};
  EXPECT_EQ(words, expected);
}

TEST_F(BrownTest, VocabularyTakesTopWordsTiesByWord) {
  std::map<std::string, uint64_t> counts = {
      {"the", 10}, {"b", 3}, {"a", 3}, {"c", 3}, {"rare", 1}, {"<unk>", 2}};
  Vocabulary v = BuildVocabulary(counts, 4);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v.word(0), "<unk>");
  EXPECT_EQ(v.word(1), "the");
  EXPECT_EQ(v.word(2), "a");
  EXPECT_EQ(v.word(3), "b");
  // <unk> counts what was left out: c (3), rare (1) and the literal "<unk>" (2).
  EXPECT_EQ(v.count(0), 6u);
  EXPECT_EQ(v.count(1), 10u);
  // A vocabulary larger than the corpus keeps every word.
  EXPECT_EQ(BuildVocabulary(counts, 100).size(), 6u);
  EXPECT_EQ(BuildVocabulary(counts, 100).count(0), 2u);
}

TEST_F(BrownTest, ConvertSplitsDocumentsAndComputesStats) {
  // Ten documents; the 5th and 10th are held out with --heldout-every 5.
  for (int i = 1; i <= 10; ++i) {
    char name[8];
    std::snprintf(name, sizeof name, "ca%02d", i);
    Write(name, i % 5 == 0 ? "\tThe/at cat/nn sat/vbd ./.\n\tzebra/nn ./.\n"
                           : "\tThe/at dog/nn sat/vbd ./.\n\tThe/at cat/nn ran/vbd ./.\n");
  }
  Write("README", "not/a document/x");
  Write("cats.txt", "ca01 news");
  BrownOptions options;
  options.vocab_size = 5;  // <unk> . the cat dog (ran, sat left out: ties by word)
  options.heldout_every = 5;
  auto stats = ConvertBrown(dir_.path(), dir_.File("out"), options);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->documents_train, 8u);
  EXPECT_EQ(stats->documents_heldout, 2u);
  EXPECT_EQ(stats->tokens_train, 64u);
  EXPECT_EQ(stats->tokens_heldout, 12u);
  EXPECT_EQ(stats->vocab_size, 5u);

  auto vocab = Vocabulary::Load(dir_.File("out/vocab.tsv"));
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  // the: 16, .: 16, cat 8, dog 8, ran 8, sat 8 -> "." < "the" bytewise; then cat, dog.
  EXPECT_EQ(vocab->word(1), ".");
  EXPECT_EQ(vocab->word(2), "the");
  EXPECT_EQ(vocab->word(3), "cat");
  EXPECT_EQ(vocab->word(4), "dog");
  EXPECT_EQ(vocab->count(0), 16u);  // ran + sat

  auto heldout = ReadTokenFile(dir_.File("out/heldout.tok"));
  ASSERT_TRUE(heldout.ok());
  const std::vector<uint32_t> expected = {2, 3, 0, 1, 0, 1, 2, 3, 0, 1, 0, 1};
  EXPECT_EQ(*heldout, expected);
  EXPECT_EQ(stats->heldout_unknown, 4u);
  EXPECT_DOUBLE_EQ(stats->heldout_coverage, 8.0 / 12.0);
  // Add-one unigram: p(id) = (count + 1) / (64 + 5).
  const double nll = -(4 * std::log(17.0 / 69) + 4 * std::log(17.0 / 69) +
                       2 * std::log(17.0 / 69) + 2 * std::log(9.0 / 69));
  EXPECT_NEAR(stats->unigram_perplexity, std::exp(nll / 12), 1e-9);

  std::ifstream json(dir_.File("out/stats.json"));
  std::string line;
  std::getline(json, line);
  EXPECT_EQ(line, stats->ToJson());
}

TEST_F(BrownTest, EmptyDirectorySaysWhatToRun) {
  Write("README", "x");
  auto stats = ConvertBrown(dir_.path(), dir_.File("out"), BrownOptions{});
  ASSERT_EQ(stats.status().code(), StatusCode::kNotFound);
  EXPECT_NE(stats.status().message().find("scripts/fetch-data"), std::string::npos);
  EXPECT_EQ(ConvertBrown(dir_.File("missing"), dir_.File("out"), BrownOptions{}).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace parallax::data
