#include "core/data/token_file.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/data/vocabulary.h"
#include "tests/testing/temp_dir.h"

namespace parallax::data {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  void WriteRaw(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  std::string ReadRaw(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  parallax::testing::TempDir dir_;
};

TEST_F(TokenFileTest, RoundTrip) {
  const std::vector<uint32_t> tokens = {0, 1, 2, 0xffffffffu, 49999, 7};
  ASSERT_TRUE(WriteTokenFile(dir_.File("a.tok"), tokens).ok());
  auto read = ReadTokenFile(dir_.File("a.tok"));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, tokens);
  // The documented layout: magic, uint64 LE count, uint32 LE ids.
  const std::string raw = ReadRaw(dir_.File("a.tok"));
  ASSERT_EQ(raw.size(), 16u + 4 * tokens.size());
  EXPECT_EQ(raw.substr(0, 8), "PXTOK001");
  EXPECT_EQ(raw[8], 6);
  EXPECT_EQ(raw.substr(9, 7), std::string(7, '\0'));
  EXPECT_EQ(static_cast<unsigned char>(raw[16 + 4]), 1);  // id 1, little-endian
}

TEST_F(TokenFileTest, EmptyRoundTrip) {
  ASSERT_TRUE(WriteTokenFile(dir_.File("e.tok"), {}).ok());
  auto read = ReadTokenFile(dir_.File("e.tok"));
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->empty());
}

TEST_F(TokenFileTest, MissingFileSaysHowToCreateIt) {
  auto read = ReadTokenFile(dir_.File("nope.tok"));
  ASSERT_EQ(read.status().code(), StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find("scripts/fetch-data"), std::string::npos);
  EXPECT_NE(read.status().message().find("nope.tok"), std::string::npos);
}

TEST_F(TokenFileTest, TruncatedFileIsRejected) {
  ASSERT_TRUE(WriteTokenFile(dir_.File("t.tok"), std::vector<uint32_t>{1, 2, 3}).ok());
  std::string raw = ReadRaw(dir_.File("t.tok"));
  WriteRaw(dir_.File("t.tok"), raw.substr(0, raw.size() - 1));
  auto read = ReadTokenFile(dir_.File("t.tok"));
  ASSERT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("truncated"), std::string::npos);
  // Extra bytes are as wrong as missing ones.
  WriteRaw(dir_.File("t.tok"), raw + "xxxx");
  EXPECT_EQ(ReadTokenFile(dir_.File("t.tok")).status().code(), StatusCode::kInvalidArgument);
  // A header cut short.
  WriteRaw(dir_.File("t.tok"), raw.substr(0, 10));
  EXPECT_EQ(ReadTokenFile(dir_.File("t.tok")).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TokenFileTest, HugeCountIsRejectedNotAllocated) {
  std::string raw = "PXTOK001";
  raw += std::string(8, '\xff');
  raw += "abcd";
  WriteRaw(dir_.File("h.tok"), raw);
  EXPECT_EQ(ReadTokenFile(dir_.File("h.tok")).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TokenFileTest, ForeignFileIsRejected) {
  WriteRaw(dir_.File("f.tok"), "the quick brown fox jumps");
  auto read = ReadTokenFile(dir_.File("f.tok"));
  ASSERT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("PXTOK001"), std::string::npos);
}

class VocabularyTest : public TokenFileTest {};

TEST_F(VocabularyTest, LoadsWordsCountsAndFinds) {
  WriteRaw(dir_.File("v.tsv"), "<unk>\t5\nthe\t100\n,\t90\nof\t90\n");
  auto vocab = Vocabulary::Load(dir_.File("v.tsv"));
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  ASSERT_EQ(vocab->size(), 4u);
  EXPECT_EQ(vocab->word(0), "<unk>");
  EXPECT_EQ(vocab->count(0), 5u);
  EXPECT_EQ(vocab->word(2), ",");
  EXPECT_EQ(vocab->count(3), 90u);
  EXPECT_EQ(vocab->Find("of"), 3u);
  EXPECT_EQ(vocab->Find("the"), 1u);
  EXPECT_EQ(vocab->Find("zebra"), 0u);
  EXPECT_EQ(vocab->Find("<unk>"), 0u);
}

TEST_F(VocabularyTest, SaveLoadRoundTrip) {
  Vocabulary v = Vocabulary::FromWords({"<unk>", "a", "b"}, {0, 3, 2});
  ASSERT_TRUE(v.Save(dir_.File("v.tsv")).ok());
  EXPECT_EQ(ReadRaw(dir_.File("v.tsv")), "<unk>\t0\na\t3\nb\t2\n");
  auto loaded = Vocabulary::Load(dir_.File("v.tsv"));
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->Find("b"), 2u);
}

TEST_F(VocabularyTest, ErrorsNameFileAndLine) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"<unk>\t1\nthe 4\n", "v.tsv:2: expected"},
      {"<unk>\t1\nthe\tmany\n", "v.tsv:2: count"},
      {"<unk>\t1\nthe\t-3\n", "v.tsv:2: count"},
      {"the\t1\n", "v.tsv:1: the first word must be \"<unk>\""},
      {"<unk>\t1\nthe\t4\nthe\t3\n", "v.tsv:3: word \"the\" appears twice"},
      {"", "is empty"},
  };
  for (const Case& c : cases) {
    WriteRaw(dir_.File("v.tsv"), c.text);
    auto vocab = Vocabulary::Load(dir_.File("v.tsv"));
    ASSERT_EQ(vocab.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(vocab.status().message().find(c.expect), std::string::npos)
        << vocab.status().message();
  }
  auto missing = Vocabulary::Load(dir_.File("none.tsv"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("scripts/fetch-data"), std::string::npos);
}

}  // namespace
}  // namespace parallax::data
