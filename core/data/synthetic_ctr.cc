#include "core/data/synthetic_ctr.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <numeric>

#include "core/base/daemon.h"
#include "core/base/logging.h"
#include "core/data/auc.h"
#include "core/data/bytes.h"

namespace parallax::data {
namespace {

using internal::SplitMix64;

constexpr int kSeenThreshold = 5;
constexpr double kDenseSpread = 0.75;  // std dev of log(1 + x_d) around its mean

// Independent streams: the parameters, the training split and the held-out
// split, so the held-out set does not change with --train.
// The raw values have a stream of their own (kValues), keyed by feature and
// row rather than drawn in sequence, so a row's value is the same wherever
// it is drawn; fresh values (drift_new) are keyed by split, example and
// feature.
enum Stream : uint64_t { kParameters = 0, kTrain = 1, kHeldout = 2, kValues = 3, kFresh = 4 };
SplitMix64 StreamRng(uint64_t seed, Stream stream) {
  SplitMix64 mix(seed);
  return SplitMix64(mix.Next() ^ (0xd1b54a32d192ed03ULL * (static_cast<uint64_t>(stream) + 1)));
}

double Normal(SplitMix64& rng) {
  // Box-Muller; 1 - Uniform() is in (0, 1], so the log is finite.
  const double u1 = 1.0 - rng.Uniform(), u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The reader's dense transform, bit for bit.
float DenseValue(int64_t x) {
  return static_cast<float>(std::log1p(static_cast<double>(x > 0 ? x : 0)));
}

Status ValidateOptions(const SyntheticCtrOptions& o) {
  if (o.table_sizes.size() != kCriteoCategorical) {
    return InvalidArgument("synthetic CTR needs 26 table sizes, got " +
                           std::to_string(o.table_sizes.size()));
  }
  for (size_t f = 0; f < o.table_sizes.size(); ++f) {
    if (o.table_sizes[f] < 2 || o.table_sizes[f] > (int64_t{1} << 31)) {
      return InvalidArgument("table size of C" + std::to_string(f + 1) + " is " +
                             std::to_string(o.table_sizes[f]) +
                             "; it must be in [2, 2^31] (row 0 is kept for missing values)");
    }
  }
  if (o.train_examples < 1 || o.heldout_examples < 1) {
    return InvalidArgument("synthetic CTR needs at least one training and one held-out example");
  }
  if (!(o.zipf_exponent > 0) || !(o.dense_missing >= 0 && o.dense_missing < 1) ||
      !(o.categorical_missing >= 0 && o.categorical_missing < 1)) {
    return InvalidArgument("synthetic CTR needs zipf_exponent > 0 and missing rates in [0, 1)");
  }
  if (!(o.drift_shift >= 0 && o.drift_shift <= 1000) || !(o.drift_new >= 0 && o.drift_new < 1)) {
    return InvalidArgument("synthetic CTR needs drift_shift in [0, 1000] and drift_new in [0, 1)");
  }
  return Status::Ok();
}

// Where a split sits in the drift's time: example i of the training split
// at i / total of it, every held-out example at its end (at_end).
struct SplitTime {
  Stream stream;
  uint64_t total = 1;
  bool at_end = false;
};

// Zipf rank r of a table of `size` rows, rotated by the drift as of example
// `i` of `t`: rank r then stands for the row of rank r + offset.
uint64_t DriftedRank(uint64_t rank, int64_t size, double shift, uint64_t i, const SplitTime& t) {
  if (shift <= 0) return rank;
  const uint64_t n = static_cast<uint64_t>(size - 1);
  const double when = t.at_end ? 1.0 : static_cast<double>(i) / static_cast<double>(t.total);
  const auto offset = static_cast<uint64_t>(shift * static_cast<double>(n) * when);
  return (rank - 1 + offset % n) % n + 1;
}

// One split's lines into `path` (atomically); calls `row(dense, categorical,
// label, p)` for every example drawn (a fresh value's row is -1).
template <typename RowFn>
Status WriteSplit(const std::string& path, uint64_t examples, SplitMix64 rng,
                  const SyntheticCtrOptions& o, const CtrGroundTruth& truth,
                  const std::vector<ZipfSampler>& zipf, const std::vector<RankScatter>& scatter,
                  const SplitTime& time, RowFn&& row) {
  const uint64_t fresh_key = StreamRng(o.seed, kFresh).Next() ^ (static_cast<uint64_t>(time.stream) << 62);
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return IoError("cannot create '" + tmp + "': " + std::strerror(errno));
  std::string buffer;
  buffer.reserve(1 << 21);
  float dense[kCriteoDense];
  int64_t categorical[kCriteoCategorical];
  char field[kCriteoDense + kCriteoCategorical][24];
  size_t field_len[kCriteoDense + kCriteoCategorical];
  for (uint64_t i = 0; i < examples; ++i) {
    for (int d = 0; d < kCriteoDense; ++d) {
      field_len[d] = 0;
      dense[d] = 0.0f;
      if (rng.Uniform() < o.dense_missing) continue;
      const double g = truth.dense_means()[d] + kDenseSpread * Normal(rng);
      const auto x = static_cast<int64_t>(std::max(0.0, std::floor(std::expm1(g))));
      dense[d] = DenseValue(x);
      field_len[d] = std::to_chars(field[d], field[d] + 24, x).ptr - field[d];
    }
    for (int c = 0; c < kCriteoCategorical; ++c) {
      char* f = field[kCriteoDense + c];
      size_t& len = field_len[kCriteoDense + c];
      len = 0;
      categorical[c] = 0;
      if (rng.Uniform() < o.categorical_missing) continue;
      const auto size = static_cast<uint64_t>(o.table_sizes[c]);
      const int64_t r = scatter[c].Row(
          DriftedRank(zipf[c].Sample(rng), o.table_sizes[c], o.drift_shift, i, time));
      // Draws what earlier versions drew here (a fresh 32-bit value per
      // occurrence), so that without drift every example (rows, dense values,
      // labels) is the same as before and so are the figures of docs/DATA.md.
      rng.Below((0xffffffffULL - r) / size + 1);
      uint64_t value;
      if (o.drift_new > 0 && rng.Uniform() < o.drift_new) {
        SplitMix64 h(fresh_key ^ (i * kCriteoCategorical + static_cast<uint64_t>(c)));
        value = h.Next();
        categorical[c] = -1;
      } else {
        value = CtrRawValue(o.seed, c, r, o.table_sizes[c]);
        categorical[c] = r;
      }
      std::snprintf(f, 24, "%016llx", static_cast<unsigned long long>(value));
      len = 16;
    }
    const double p = truth.Probability(dense, categorical);
    const bool label = rng.Uniform() < p;
    buffer += label ? '1' : '0';
    for (int k = 0; k < kCriteoDense + kCriteoCategorical; ++k) {
      buffer += '\t';
      buffer.append(field[k], field_len[k]);
    }
    buffer += '\n';
    row(dense, categorical, label, p);
    if (buffer.size() > (1 << 20)) {
      out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      buffer.clear();
    }
  }
  out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  if (!out.flush()) return IoError("cannot write '" + tmp + "': " + std::strerror(errno));
  out.close();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return IoError("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

// generator.json's contents: the options, the drawn dense parameters and the
// measured figures.
std::string GeneratorJson(const SyntheticCtrOptions& o, const CtrGroundTruth& truth,
                          const SyntheticCtrResult& result) {
  nlohmann::json j = {
      {"format", "criteo: label, 13 integer features, 26 hex categorical features, tab-separated"},
      {"model",
       "p = sigmoid(base_logit + sum_f w_f[row_f] + sum_d dense_weights[d] * (log(1 + x_d) - "
       "dense_means[d])); row_f = hex value mod table_sizes[f], 0 when missing; a missing x_d "
       "counts as log(1 + x_d) = 0; w_f[row] ~ N(0, categorical_scale^2); each row has one "
       "64-bit hex value; a fresh value (drift_new) adds 0"},
      {"seed", o.seed},
      {"train_examples", o.train_examples},
      {"heldout_examples", o.heldout_examples},
      {"table_sizes", o.table_sizes},
      {"zipf_exponent", o.zipf_exponent},
      {"categorical_scale", o.categorical_scale},
      {"dense_scale", o.dense_scale},
      {"dense_spread", kDenseSpread},
      {"base_logit", o.base_logit},
      {"dense_missing", o.dense_missing},
      {"categorical_missing", o.categorical_missing},
      {"drift_shift", o.drift_shift},
      {"drift_new", o.drift_new},
      {"train_distinct_values", result.train_distinct_values},
      {"heldout_unseen_values", result.heldout_unseen_values},
      {"dense_means", truth.dense_means()},
      {"dense_weights", truth.dense_weights()},
      {"train_positive_rate", result.train_positive_rate},
      {"heldout_positive_rate", result.heldout_positive_rate},
      {"bayes_auc", result.bayes_auc},
      {"seen_rows_auc", result.seen_rows_auc},
      {"seen_rows_threshold", kSeenThreshold},
  };
  return j.dump(2);
}

}  // namespace

uint64_t CtrRawValue(uint64_t seed, int feature, int64_t row, int64_t size) {
  const uint64_t key = StreamRng(seed, kValues).Next();
  SplitMix64 h(key ^ (static_cast<uint64_t>(feature) << 56) ^ static_cast<uint64_t>(row));
  const auto n = static_cast<uint64_t>(size), r = static_cast<uint64_t>(row);
  // The largest multiple k with r + n·k < 2^64.
  return r + n * h.Below((~uint64_t{0} - r) / n + 1);
}

RankScatter::RankScatter(int64_t size) : n_(static_cast<uint64_t>(size - 1)) {
  a_ = std::max<uint64_t>(1, static_cast<uint64_t>(0.6180339887 * static_cast<double>(n_)));
  while (std::gcd(a_, n_) != 1) ++a_;
}

int64_t RankScatter::Row(uint64_t rank) const {
  return static_cast<int64_t>(
      1 + static_cast<uint64_t>((static_cast<unsigned __int128>(rank - 1) * a_) % n_));
}

ZipfSampler::ZipfSampler(int64_t size, double exponent) : cdf_(static_cast<size_t>(size - 1)) {
  double total = 0;
  for (size_t r = 0; r < cdf_.size(); ++r) {
    total += std::pow(static_cast<double>(r + 1), -exponent);
    cdf_[r] = total;
  }
}

uint64_t ZipfSampler::Sample(internal::SplitMix64& rng) const {
  const double u = rng.Uniform() * cdf_.back();
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  return static_cast<uint64_t>(std::min<ptrdiff_t>(it - cdf_.begin(), cdf_.size() - 1)) + 1;
}

std::vector<int64_t> DefaultCtrTableSizes() {
  return {1'000'000, 1'000'000, 300'000, 100'000, 100'000, 30'000, 10'000, 10'000, 10'000,
          3'000,     3'000,     1'000,   1'000,   1'000,   300,    300,    100,    100,
          100,       30,        30,      10,      10,      10,     4,      3};
}

CtrGroundTruth::CtrGroundTruth(const SyntheticCtrOptions& o) : base_logit_(o.base_logit) {
  PX_CHECK(ValidateOptions(o).ok()) << ValidateOptions(o).ToString();
  SplitMix64 rng = StreamRng(o.seed, kParameters);
  for (int d = 0; d < kCriteoDense; ++d) {
    dense_means_.push_back(0.5 + 2.5 * rng.Uniform());
    dense_weights_.push_back(o.dense_scale * Normal(rng));
  }
  for (int f = 0; f < kCriteoCategorical; ++f) {
    std::vector<float> w(static_cast<size_t>(o.table_sizes[f]));
    for (float& x : w) x = static_cast<float>(o.categorical_scale * Normal(rng));
    row_weights_.push_back(std::move(w));
  }
}

double CtrGroundTruth::Logit(const float* dense, const int64_t* categorical) const {
  double logit = base_logit_;
  for (int d = 0; d < kCriteoDense; ++d) {
    // A missing field reads as 0, which the true model sees as such.
    logit += dense_weights_[d] * (static_cast<double>(dense[d]) - dense_means_[d]);
  }
  for (int f = 0; f < kCriteoCategorical; ++f) {
    if (categorical[f] >= 0) logit += row_weights_[f][categorical[f]];
  }
  return logit;
}

double CtrGroundTruth::Probability(const float* dense, const int64_t* categorical) const {
  return Sigmoid(Logit(dense, categorical));
}

StatusOr<SyntheticCtrResult> WriteSyntheticCtr(const std::string& out_dir,
                                               const SyntheticCtrOptions& o) {
  PX_RETURN_IF_ERROR(ValidateOptions(o));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return IoError("cannot create '" + out_dir + "': " + ec.message());

  const CtrGroundTruth truth(o);
  std::vector<ZipfSampler> zipf;
  std::vector<RankScatter> scatter;
  std::vector<std::vector<uint32_t>> seen;
  for (int64_t size : o.table_sizes) {
    zipf.emplace_back(size, o.zipf_exponent);
    scatter.emplace_back(size);
    seen.emplace_back(static_cast<size_t>(size), 0);
  }

  uint64_t train_positives = 0, train_fresh = 0, heldout_fresh = 0;
  const SplitTime train_time{kTrain, o.train_examples, false};
  PX_RETURN_IF_ERROR(WriteSplit(out_dir + "/train.tsv", o.train_examples, StreamRng(o.seed, kTrain),
                                o, truth, zipf, scatter, train_time,
                                [&](const float*, const int64_t* categorical, bool label, double) {
                                  train_positives += label;
                                  for (int f = 0; f < kCriteoCategorical; ++f) {
                                    if (categorical[f] < 0) {
                                      ++train_fresh;
                                      continue;
                                    }
                                    uint32_t& n = seen[f][categorical[f]];
                                    if (n < kSeenThreshold) ++n;
                                  }
                                }));

  std::vector<double> p_true, logit_seen;
  std::vector<float> labels;
  std::vector<std::vector<bool>> unseen_marked(kCriteoCategorical);
  for (int f = 0; f < kCriteoCategorical; ++f) unseen_marked[f].resize(o.table_sizes[f]);
  uint64_t heldout_unseen_rows = 0;
  const SplitTime heldout_time{kHeldout, o.train_examples, true};
  PX_RETURN_IF_ERROR(WriteSplit(
      out_dir + "/heldout.tsv", o.heldout_examples, StreamRng(o.seed, kHeldout), o, truth, zipf,
      scatter, heldout_time,
      [&](const float* dense, const int64_t* categorical, bool label, double p) {
        p_true.push_back(p);
        labels.push_back(label ? 1.0f : 0.0f);
        double logit = truth.Logit(dense, categorical);
        for (int f = 0; f < kCriteoCategorical; ++f) {
          const int64_t r = categorical[f];
          if (r < 0) {
            ++heldout_fresh;
            continue;
          }
          if (seen[f][r] < kSeenThreshold) logit -= truth.row_weight(f, r);
          if (seen[f][r] == 0 && !unseen_marked[f][r]) {
            unseen_marked[f][r] = true;
            ++heldout_unseen_rows;
          }
        }
        logit_seen.push_back(logit);
      }));

  SyntheticCtrResult result;
  result.bayes_auc = Auc(std::span<const double>(p_true), labels);
  result.seen_rows_auc = Auc(std::span<const double>(logit_seen), labels);
  result.train_positive_rate =
      static_cast<double>(train_positives) / static_cast<double>(o.train_examples);
  result.heldout_positive_rate =
      std::accumulate(labels.begin(), labels.end(), 0.0) / static_cast<double>(labels.size());
  result.train_distinct_values = train_fresh;
  for (const auto& rows : seen) {
    result.train_distinct_values += rows.size() - std::count(rows.begin(), rows.end(), 0u);
  }
  result.heldout_unseen_values = heldout_unseen_rows + heldout_fresh;
  result.json = GeneratorJson(o, truth, result);
  PX_RETURN_IF_ERROR(WriteFileAtomically(out_dir + "/generator.json", result.json + "\n"));
  return result;
}

}  // namespace parallax::data
