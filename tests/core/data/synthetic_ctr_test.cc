#include "core/data/synthetic_ctr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "core/data/auc.h"
#include "tests/testing/temp_dir.h"

namespace parallax::data {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class SyntheticCtrTest : public ::testing::Test {
 protected:
  static SyntheticCtrOptions Small() {
    SyntheticCtrOptions o;
    o.train_examples = 4000;
    o.heldout_examples = 20000;
    o.table_sizes = std::vector<int64_t>(kCriteoCategorical, 50);
    o.table_sizes[0] = 1000;
    o.table_sizes[25] = 2;
    return o;
  }
  parallax::testing::TempDir dir_;
};

TEST_F(SyntheticCtrTest, AucCountsTiesAsHalf) {
  const std::vector<double> scores = {0.1, 0.4, 0.35, 0.8};
  const std::vector<float> labels = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(Auc(std::span<const double>(scores), labels), 0.75);
  const std::vector<float> tied = {0.5f, 0.5f, 0.5f};
  EXPECT_DOUBLE_EQ(Auc(std::span<const float>(tied), std::vector<float>{0, 1, 0}), 0.5);
  EXPECT_DOUBLE_EQ(Auc(std::span<const float>(tied), std::vector<float>{1, 1, 1}), 0.5);
}

TEST_F(SyntheticCtrTest, DeterministicForASeed) {
  auto a = WriteSyntheticCtr(dir_.File("a"), Small());
  auto b = WriteSyntheticCtr(dir_.File("b"), Small());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok());
  for (const char* f : {"/train.tsv", "/heldout.tsv", "/generator.json"}) {
    EXPECT_EQ(Slurp(dir_.File("a") + f), Slurp(dir_.File("b") + f)) << f;
  }
  SyntheticCtrOptions other = Small();
  other.seed += 1;
  ASSERT_TRUE(WriteSyntheticCtr(dir_.File("c"), other).ok());
  EXPECT_NE(Slurp(dir_.File("a") + "/train.tsv"), Slurp(dir_.File("c") + "/train.tsv"));
  // The held-out split does not depend on the training size.
  SyntheticCtrOptions longer = Small();
  longer.train_examples = 5000;
  ASSERT_TRUE(WriteSyntheticCtr(dir_.File("d"), longer).ok());
  EXPECT_EQ(Slurp(dir_.File("a") + "/heldout.tsv"), Slurp(dir_.File("d") + "/heldout.tsv"));
}

TEST_F(SyntheticCtrTest, BayesAucIsHighAndTheTrueModelReachesItThroughTheReader) {
  const SyntheticCtrOptions o = Small();
  auto result = WriteSyntheticCtr(dir_.path(), o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_GT(result->bayes_auc, 0.7);
  EXPECT_LT(result->bayes_auc, 0.95);
  EXPECT_GT(result->heldout_positive_rate, 0.1);
  EXPECT_LT(result->heldout_positive_rate, 0.5);

  auto json = nlohmann::json::parse(Slurp(dir_.File("generator.json")));
  EXPECT_EQ(json["seed"], o.seed);
  EXPECT_EQ(json["table_sizes"].get<std::vector<int64_t>>(), o.table_sizes);
  EXPECT_DOUBLE_EQ(json["bayes_auc"].get<double>(), result->bayes_auc);

  // A model that knows the truth, fed by CriteoReader, scores the Bayes AUC.
  CriteoReaderOptions ro;
  ro.table_sizes = o.table_sizes;
  auto reader = CriteoReader::Open(dir_.File("heldout.tsv"), ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_EQ((*reader)->size(), o.heldout_examples);
  CtrBatch batch;
  (*reader)->Next(o.heldout_examples, &batch);
  const CtrGroundTruth truth(o);
  std::vector<double> p(o.heldout_examples);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = truth.Probability(&batch.dense[i * kCriteoDense],
                             &batch.categorical[i * kCriteoCategorical]);
  }
  EXPECT_DOUBLE_EQ(Auc(std::span<const double>(p), batch.labels), result->bayes_auc);
  // A model that knows nothing does not.
  std::vector<double> none(p.size(), 0.3);
  EXPECT_DOUBLE_EQ(Auc(std::span<const double>(none), batch.labels), 0.5);
}

TEST_F(SyntheticCtrTest, IdsAreZipfDistributedWithinTheirTables) {
  const SyntheticCtrOptions o = Small();
  ASSERT_TRUE(WriteSyntheticCtr(dir_.path(), o).ok());
  CriteoReaderOptions ro;
  ro.table_sizes = o.table_sizes;
  auto reader = std::move(CriteoReader::Open(dir_.File("train.tsv"), ro)).value();
  CtrBatch batch;
  reader->Next(o.train_examples, &batch);
  std::map<int64_t, int> c1;  // the 1000-row feature
  int missing = 0;
  for (size_t i = 0; i < o.train_examples; ++i) {
    for (int f = 0; f < kCriteoCategorical; ++f) {
      const int64_t id = batch.categorical[i * kCriteoCategorical + f];
      ASSERT_GE(id, 0);
      ASSERT_LT(id, o.table_sizes[f]);
      if (f == 25) {
        ASSERT_LE(id, 1);  // a 2-row table: row 1, or 0 when missing
      }
    }
    const int64_t id = batch.categorical[i * kCriteoCategorical];
    if (id == 0) {
      ++missing;
    } else {
      ++c1[id];
    }
  }
  // 2% missing.
  EXPECT_NEAR(missing / static_cast<double>(o.train_examples), o.categorical_missing, 0.01);
  // Zipf(1.2) over 999 ranks: the 10 hottest rows hold about 57% of the draws
  // (uniform ids would give 1%), and they are not the first 10 rows.
  std::vector<int> counts;
  for (auto [id, n] : c1) counts.push_back(n);
  std::sort(counts.rbegin(), counts.rend());
  const int top10 = std::accumulate(counts.begin(), counts.begin() + 10, 0);
  EXPECT_NEAR(top10 / static_cast<double>(o.train_examples - missing), 0.57, 0.05);
  int hot_in_first_rows = 0;
  for (int id = 1; id <= 10; ++id) hot_in_first_rows += c1[id] >= counts[9];
  EXPECT_LT(hot_in_first_rows, 5);
}

// The data are learnable: a logistic regression with one weight per table row
// (the true model's family), one Adagrad pass over the training split, comes
// within 0.03 of the Bayes AUC (the target the ctr model is held to).
TEST_F(SyntheticCtrTest, APerRowLogisticRegressionComesCloseToTheBayesAuc) {
  SyntheticCtrOptions o = Small();
  o.train_examples = 100000;
  o.heldout_examples = 10000;
  auto result = WriteSyntheticCtr(dir_.path(), o);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  CriteoReaderOptions ro;
  ro.table_sizes = o.table_sizes;
  auto train = std::move(CriteoReader::Open(dir_.File("train.tsv"), ro)).value();
  auto heldout = std::move(CriteoReader::Open(dir_.File("heldout.tsv"), ro)).value();
  std::vector<std::vector<double>> w(kCriteoCategorical), g(kCriteoCategorical);
  for (int f = 0; f < kCriteoCategorical; ++f) {
    w[f].assign(o.table_sizes[f], 0.0);
    g[f].assign(o.table_sizes[f], 1e-6);
  }
  std::vector<double> dw(kCriteoDense + 1, 0.0), dg(kCriteoDense + 1, 1e-6);  // + bias
  auto logit = [&](const CtrBatch& b, size_t i) {
    double z = dw[kCriteoDense];
    for (int d = 0; d < kCriteoDense; ++d) z += dw[d] * b.dense[i * kCriteoDense + d];
    for (int f = 0; f < kCriteoCategorical; ++f)
      z += w[f][b.categorical[i * kCriteoCategorical + f]];
    return z;
  };
  constexpr double kLr = 0.1;
  CtrBatch b;
  train->Next(train->size(), &b);
  for (size_t i = 0; i < train->size(); ++i) {
    const double err = 1.0 / (1.0 + std::exp(-logit(b, i))) - b.labels[i];
    for (int d = 0; d <= kCriteoDense; ++d) {
      const double grad = err * (d < kCriteoDense ? b.dense[i * kCriteoDense + d] : 1.0);
      dg[d] += grad * grad;
      dw[d] -= kLr * grad / std::sqrt(dg[d]);
    }
    for (int f = 0; f < kCriteoCategorical; ++f) {
      const int64_t row = b.categorical[i * kCriteoCategorical + f];
      g[f][row] += err * err;
      w[f][row] -= kLr * err / std::sqrt(g[f][row]);
    }
  }
  heldout->Next(heldout->size(), &b);
  std::vector<double> scores(heldout->size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = logit(b, i);
  const double auc = Auc(std::span<const double>(scores), b.labels);
  EXPECT_GT(auc, result->bayes_auc - 0.03) << "Bayes AUC " << result->bayes_auc;
  EXPECT_LE(auc, result->bayes_auc + 0.01);
}

// The categorical values of a split as the raw 64-bit ids a dynamic table
// gets (CriteoReader with raw_ids), example-major.
std::vector<int64_t> RawIds(const std::string& path, size_t* examples) {
  CriteoReaderOptions ro;
  ro.raw_ids = true;
  auto reader = std::move(CriteoReader::Open(path, ro)).value();
  CtrBatch b;
  *examples = reader->size();
  reader->Next(reader->size(), &b);
  return b.categorical;
}

// Each table row is one raw 64-bit value wherever it is drawn, and that
// value is what a fixed table of the generator's size reads as the row.
TEST_F(SyntheticCtrTest, EachRowHasOneStableSixtyFourBitValue) {
  const SyntheticCtrOptions o = Small();
  ASSERT_TRUE(WriteSyntheticCtr(dir_.path(), o).ok());
  CriteoReaderOptions fixed;
  fixed.table_sizes = o.table_sizes;
  auto reader = std::move(CriteoReader::Open(dir_.File("train.tsv"), fixed)).value();
  CtrBatch rows;
  reader->Next(reader->size(), &rows);
  size_t n = 0;
  const std::vector<int64_t> raw = RawIds(dir_.File("train.tsv"), &n);
  ASSERT_EQ(raw.size(), rows.categorical.size());
  std::map<std::pair<int, int64_t>, int64_t> value_of_row, row_of_value;
  int above_32_bits = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    const int f = static_cast<int>(i % kCriteoCategorical);
    const int64_t row = rows.categorical[i];
    if (row == 0) continue;  // missing
    const auto value = static_cast<uint64_t>(raw[i]);
    EXPECT_EQ(value, CtrRawValue(o.seed, f, row, o.table_sizes[f]));
    EXPECT_EQ(static_cast<int64_t>(value % static_cast<uint64_t>(o.table_sizes[f])), row);
    auto [it, fresh] = value_of_row.emplace(std::pair{f, row}, raw[i]);
    EXPECT_EQ(it->second, raw[i]) << "row " << row << " of C" << f + 1 << " has two values";
    auto [jt, new_value] = row_of_value.emplace(std::pair{f, raw[i]}, row);
    EXPECT_EQ(jt->second, row);
    above_32_bits += value >> 32 != 0;
  }
  EXPECT_GT(above_32_bits, static_cast<int>(value_of_row.size()) / 2);
  // Another seed, other values for the same rows.
  EXPECT_NE(CtrRawValue(o.seed, 0, 7, 1000), CtrRawValue(o.seed + 1, 0, 7, 1000));
}

// Drift: new values keep arriving, the hot set moves, and fresh values are
// written once each. The Bayes AUC is written with the data and is a real
// AUC whatever the drift.
TEST_F(SyntheticCtrTest, DriftBringsNewValuesAndMovesTheHotSet) {
  struct Seen {
    double new_in_second_half;  // of its present C1 values, the share the first half lacked
    double last_in_first_tenth;  // of the last tenth's, the share the first tenth had
    uint64_t distinct;           // generator.json's train_distinct_values
  };
  auto look = [&](const SyntheticCtrOptions& o, const std::string& dir) {
    auto r = WriteSyntheticCtr(dir, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    auto json = nlohmann::json::parse(Slurp(dir + "/generator.json"));
    EXPECT_GT(json["bayes_auc"].get<double>(), 0.5);
    EXPECT_LT(json["bayes_auc"].get<double>(), 1.0);
    EXPECT_EQ(json["drift_shift"].get<double>(), o.drift_shift);
    EXPECT_EQ(json["drift_new"].get<double>(), o.drift_new);
    size_t n = 0;
    const std::vector<int64_t> raw = RawIds(dir + "/train.tsv", &n);
    std::set<int64_t> first_half, first_tenth;
    int second = 0, second_new = 0, last = 0, last_seen = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = raw[i * kCriteoCategorical];
      if (v == 0) continue;  // missing
      if (i < n / 10) first_tenth.insert(v);
      if (i < n / 2) {
        first_half.insert(v);
      } else {
        ++second;
        second_new += first_half.count(v) == 0;
      }
      if (i >= n - n / 10) {
        ++last;
        last_seen += first_tenth.count(v) > 0;
      }
    }
    return Seen{static_cast<double>(second_new) / second, static_cast<double>(last_seen) / last,
                json["train_distinct_values"].get<uint64_t>()};
  };
  SyntheticCtrOptions still = Small();
  still.train_examples = 20000;
  still.table_sizes[0] = 100000;
  const Seen without = look(still, dir_.File("still"));
  EXPECT_GT(without.last_in_first_tenth, 0.6) << "without drift the hot values stay";
  SyntheticCtrOptions moving = still;
  moving.drift_shift = 0.2;  // 20,000 ranks over 20,000 examples
  const Seen shifted = look(moving, dir_.File("shift"));
  EXPECT_LT(shifted.last_in_first_tenth, 0.2) << "the hot set moves";
  EXPECT_GT(shifted.new_in_second_half, 2 * without.new_in_second_half);
  SyntheticCtrOptions noisy = still;
  noisy.drift_new = 0.1;
  const Seen fresh = look(noisy, dir_.File("fresh"));
  EXPECT_GT(fresh.last_in_first_tenth, 0.5);
  EXPECT_NEAR(fresh.new_in_second_half - without.new_in_second_half, 0.1, 0.04);
  // 10% of 26 × 20,000 × 0.98 present values, each a value of its own.
  EXPECT_NEAR(static_cast<double>(fresh.distinct - without.distinct), 50960, 3000);
}

TEST_F(SyntheticCtrTest, RejectsBadOptions) {
  SyntheticCtrOptions o = Small();
  o.table_sizes[3] = 1;
  auto r = WriteSyntheticCtr(dir_.path(), o);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("C4"), std::string::npos);
  o = Small();
  o.table_sizes.resize(3);
  EXPECT_EQ(WriteSyntheticCtr(dir_.path(), o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace parallax::data
