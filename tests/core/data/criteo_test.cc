#include "core/data/criteo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace parallax::data {
namespace {

std::vector<int64_t> Sizes(int64_t size) { return std::vector<int64_t>(kCriteoCategorical, size); }

// A Criteo line: label, dense values 0..12 offset by `base`, categorical hex
// values 0x10 * (c + 1) + base.
std::string Line(int label, int base) {
  std::string line = std::to_string(label);
  for (int d = 0; d < kCriteoDense; ++d) line += "\t" + std::to_string(d + base);
  char hex[16];
  for (int c = 0; c < kCriteoCategorical; ++c) {
    std::snprintf(hex, sizeof hex, "%x", 0x10 * (c + 1) + base);
    line += std::string("\t") + hex;
  }
  return line;
}

class CriteoReaderTest : public ::testing::Test {
 protected:
  std::string WriteFile(const std::vector<std::string>& lines) {
    std::ofstream out(dir_.File("c.tsv"));
    for (const auto& l : lines) out << l << "\n";
    return dir_.File("c.tsv");
  }
  parallax::testing::TempDir dir_;
};

TEST_F(CriteoReaderTest, ParsesLabelsDenseLogAndCategoricalModulo) {
  CriteoReaderOptions o;
  o.table_sizes = Sizes(1000);
  o.table_sizes[0] = 7;  // 0x10 mod 7 = 2
  auto r = CriteoReader::Open(WriteFile({Line(1, 0), Line(0, 5)}), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), 2u);
  CtrBatch b;
  (*r)->Next(2, &b);
  EXPECT_EQ(b.labels, (std::vector<float>{1, 0}));
  ASSERT_EQ(b.dense.size(), 2u * kCriteoDense);
  EXPECT_FLOAT_EQ(b.dense[0], 0.0f);
  EXPECT_FLOAT_EQ(b.dense[3], std::log(4.0f));
  EXPECT_FLOAT_EQ(b.dense[kCriteoDense + 1], std::log(7.0f));
  ASSERT_EQ(b.categorical.size(), 2u * kCriteoCategorical);
  EXPECT_EQ(b.categorical[0], 2);
  EXPECT_EQ(b.categorical[1], 0x20);
  EXPECT_EQ(b.categorical[kCriteoCategorical + 1], 0x25);
  EXPECT_EQ(b.categorical[25], (0x10 * 26) % 1000);
}

TEST_F(CriteoReaderTest, MissingFieldsAndNegativeValuesReadAsZero) {
  std::string line = "0";
  for (int d = 0; d < kCriteoDense; ++d) line += d == 2 ? "\t-1" : "\t";
  for (int c = 0; c < kCriteoCategorical; ++c) line += c == 4 ? "\tffffffff" : "\t";
  CriteoReaderOptions o;
  o.table_sizes = Sizes(10);
  auto r = CriteoReader::Open(WriteFile({line}), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  CtrBatch b;
  (*r)->Next(1, &b);
  EXPECT_EQ(b.dense, std::vector<float>(kCriteoDense, 0.0f));
  for (int c = 0; c < kCriteoCategorical; ++c) {
    EXPECT_EQ(b.categorical[c], c == 4 ? 0xffffffffLL % 10 : 0) << c;
  }
}

TEST_F(CriteoReaderTest, MalformedLinesNameFileAndLine) {
  CriteoReaderOptions o;
  o.table_sizes = Sizes(100);
  std::string bad_hex = Line(0, 1);
  bad_hex.replace(bad_hex.rfind('\t') + 1, std::string::npos, "xyz");
  std::string bad_int = Line(1, 1);
  bad_int.replace(bad_int.find('\t') + 1, 1, "1.5");
  const std::string no_label = Line(1, 1).substr(2);
  struct Case {
    std::string line, expect;
  } cases[] = {
      {bad_hex, "c.tsv:2: field 40 (C26) \"xyz\" is not a hex value"},
      {bad_int, "c.tsv:2: field 2 (I1) \"1.5"},
      {no_label, "c.tsv:2: expected 40 tab-separated fields"},
      {"2" + Line(1, 1).substr(1), "c.tsv:2: label \"2\""},
      {"", "c.tsv:2: expected 40"},
  };
  for (const Case& c : cases) {
    auto r = CriteoReader::Open(WriteFile({Line(0, 0), c.line, Line(1, 2)}), o);
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.line;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

TEST_F(CriteoReaderTest, BadOptionsAndMissingFile) {
  CriteoReaderOptions o;
  o.table_sizes = Sizes(100);
  auto missing = CriteoReader::Open(dir_.File("none.tsv"), o);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--synthetic-ctr"), std::string::npos);
  const std::string path = WriteFile({Line(0, 0)});
  o.table_sizes.pop_back();
  EXPECT_EQ(CriteoReader::Open(path, o).status().code(), StatusCode::kInvalidArgument);
  o.table_sizes = Sizes(0);
  EXPECT_EQ(CriteoReader::Open(path, o).status().code(), StatusCode::kInvalidArgument);
  o.table_sizes = Sizes(10);
  o.shard = 1;
  o.num_shards = 2;  // one line: nothing for shard 1
  EXPECT_EQ(CriteoReader::Open(path, o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CriteoReaderTest, ShardsInterleaveLinesAndWrapInFileOrder) {
  std::vector<std::string> lines;
  for (int i = 0; i < 7; ++i) lines.push_back(Line(i % 2, i));
  const std::string path = WriteFile(lines);
  CriteoReaderOptions o;
  o.table_sizes = Sizes(1 << 20);
  o.num_shards = 3;
  o.shard = 1;  // lines 1, 4
  auto r = CriteoReader::Open(path, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), 2u);
  CtrBatch b;
  (*r)->Next(5, &b);
  std::vector<int64_t> first_ids;
  for (int j = 0; j < 5; ++j) first_ids.push_back(b.categorical[j * kCriteoCategorical] - 0x10);
  EXPECT_EQ(first_ids, (std::vector<int64_t>{1, 4, 1, 4, 1}));
}

TEST_F(CriteoReaderTest, RestorePositionResumesAndRejectsForeignBytes) {
  std::vector<std::string> lines;
  for (int i = 0; i < 9; ++i) lines.push_back(Line(i % 2, i));
  const std::string path = WriteFile(lines);
  CriteoReaderOptions o;
  o.table_sizes = Sizes(1000);
  auto a = std::move(CriteoReader::Open(path, o)).value();
  CtrBatch b, expected;
  a->Next(11, &b);
  const std::string position = a->SavePosition();
  a->Next(4, &expected);
  auto resumed = std::move(CriteoReader::Open(path, o)).value();
  ASSERT_TRUE(resumed->RestorePosition(position).ok());
  resumed->Next(4, &b);
  EXPECT_EQ(b.categorical, expected.categorical);
  EXPECT_EQ(b.labels, expected.labels);

  std::string flipped = position;
  flipped[40] ^= 4;
  EXPECT_EQ(resumed->RestorePosition(flipped).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(resumed->RestorePosition("nonsense").code(), StatusCode::kInvalidArgument);
  o.table_sizes = Sizes(100);  // other ids: another dataset as far as a checkpoint goes
  auto other = std::move(CriteoReader::Open(path, o)).value();
  EXPECT_EQ(other->RestorePosition(position).code(), StatusCode::kInvalidArgument);
  // Another shard of the same count is refused.
  o.table_sizes = Sizes(1000);
  o.num_shards = 2;
  o.shard = 1;
  const std::string of_shard1 = std::move(CriteoReader::Open(path, o)).value()->SavePosition();
  o.shard = 0;
  auto shard0 = std::move(CriteoReader::Open(path, o)).value();
  EXPECT_EQ(shard0->RestorePosition(of_shard1).code(), StatusCode::kInvalidArgument);
}

// A position of 3 shards that each read 2 lines (lines 0..5 used) resumes
// 2 shards at line 6 and 7: nothing skipped, nothing read twice.
TEST_F(CriteoReaderTest, PositionOfAnotherShardCountResumesTheStream) {
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i) lines.push_back(Line(i % 2, i));
  const std::string path = WriteFile(lines);
  CriteoReaderOptions o;
  o.table_sizes = Sizes(1 << 20);
  o.num_shards = 3;
  o.shard = 2;
  auto old = std::move(CriteoReader::Open(path, o)).value();
  CtrBatch b;
  old->Next(2, &b);
  const std::string position = old->SavePosition();
  std::vector<int64_t> next;
  for (int s = 0; s < 2; ++s) {
    o.num_shards = 2;
    o.shard = s;
    auto r = std::move(CriteoReader::Open(path, o)).value();
    ASSERT_TRUE(r->RestorePosition(position).ok());
    r->Next(1, &b);
    next.push_back(b.categorical[0] - 0x10);
  }
  EXPECT_EQ(next, (std::vector<int64_t>{6, 7}));
}

}  // namespace
}  // namespace parallax::data
