// Synthetic click-through-rate data in the Criteo format, drawn from a hidden
// ground-truth logistic model, so that a CTR model's AUC can be judged
// against the best possible one (the generator's Bayes AUC). docs/DATA.md
// describes the distribution; every default below is part of that contract.
#ifndef PARALLAX_CORE_DATA_SYNTHETIC_CTR_H_
#define PARALLAX_CORE_DATA_SYNTHETIC_CTR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/bytes.h"
#include "core/data/criteo.h"
#include "parallax/status.h"

namespace parallax::data {

// 26 table sizes: two of 1,000,000 rows, most far smaller (2,569,997 rows in all).
std::vector<int64_t> DefaultCtrTableSizes();

struct SyntheticCtrOptions {
  uint64_t seed = 2024;  // parameters, training and held-out draws all follow from it
  uint64_t train_examples = 500'000;
  uint64_t heldout_examples = 100'000;
  std::vector<int64_t> table_sizes = DefaultCtrTableSizes();  // 26 entries, each >= 2
  double zipf_exponent = 1.2;         // P(rank r) ∝ r^-s over ranks 1..size-1
  double categorical_scale = 0.25;    // std dev of each row's true weight
  double dense_scale = 0.3;           // std dev of each dense feature's true weight
  double base_logit = -2.2;           // bias of the true model
  double dense_missing = 0.05;        // chance that a dense field is empty
  double categorical_missing = 0.02;  // chance that a categorical field is empty (row 0)
  // Drift (0: none). Time is an example's place in the training split; the
  // held-out split is drawn as of its end. Over the training split each
  // table's Zipf ranking rotates by drift_shift × (size − 1) ranks: the hot
  // set moves onto rows that were cold or never drawn, and the rows it leaves
  // go cold. drift_new: the chance that a present categorical value is a
  // fresh one, written once and never again (weight 0 in the hidden model:
  // noise that a table should not spend a row on).
  double drift_shift = 0;
  double drift_new = 0;
};

// The raw 64-bit value the generator writes for `row` of feature `feature`
// (a table of `size` rows) under `seed`: the same every time the row is
// drawn, ≡ row (mod size) so that CriteoReader with the generator's table
// sizes recovers the row, and otherwise spread over the whole 64-bit range
// like a hash of a raw feature value.
uint64_t CtrRawValue(uint64_t seed, int feature, int64_t row, int64_t size);

// How the generator draws a categorical field's row (without drift): a Zipf
// rank of ZipfSampler, placed on a row by RankScatter.
//
// A row of table `size` for Zipf rank r in [1, size): an affine bijection of
// [1, size) so the hot rows are spread over the table (and over range
// partitions), not packed at its start.
class RankScatter {
 public:
  explicit RankScatter(int64_t size);
  int64_t Row(uint64_t rank) const;

 private:
  uint64_t n_, a_ = 1;
};

// Ranks of a table of `size` rows, P(rank r) ∝ r^-exponent over 1..size−1.
class ZipfSampler {
 public:
  ZipfSampler(int64_t size, double exponent);
  // A rank in [1, size).
  uint64_t Sample(internal::SplitMix64& rng) const;

 private:
  std::vector<double> cdf_;
};

// The hidden model: logit = base_logit + sum_f w_f[row_f] + sum_d u_d (z_d - m_d),
// z_d = log(1 + x_d) as CriteoReader computes it (0 when missing), row_f the
// reader's categorical row id (0 when missing; a negative row, a fresh value
// of drift_new, adds nothing); p = sigmoid(logit).
class CtrGroundTruth {
 public:
  // Draws the parameters from options.seed. REQUIRES: options valid (26 sizes >= 2).
  explicit CtrGroundTruth(const SyntheticCtrOptions& options);

  // `dense` holds 13 values z_d, `categorical` 26 row ids (a CtrBatch row).
  double Logit(const float* dense, const int64_t* categorical) const;
  double Probability(const float* dense, const int64_t* categorical) const;

  const std::vector<double>& dense_weights() const { return dense_weights_; }
  const std::vector<double>& dense_means() const { return dense_means_; }
  // w_f[row], f < 26.
  double row_weight(int feature, int64_t row) const { return row_weights_[feature][row]; }

 private:
  double base_logit_;
  std::vector<double> dense_weights_, dense_means_;
  std::vector<std::vector<float>> row_weights_;
};

struct SyntheticCtrResult {
  double bayes_auc = 0;  // AUC of the true p against the held-out labels
  // AUC on the held-out split of the true model with the weight of every row
  // seen fewer than 5 times in the training split replaced by 0: roughly what
  // a model that learns each row from the training data alone can reach.
  double seen_rows_auc = 0;
  double train_positive_rate = 0, heldout_positive_rate = 0;
  // Distinct raw values of the training split, all tables together, and of
  // the held-out split those the training split never had.
  uint64_t train_distinct_values = 0, heldout_unseen_values = 0;
  std::string json;  // generator.json's contents
};

// Writes out_dir/{train.tsv, heldout.tsv, generator.json} (creating out_dir;
// each file atomically). INVALID_ARGUMENT for bad options.
StatusOr<SyntheticCtrResult> WriteSyntheticCtr(const std::string& out_dir,
                                               const SyntheticCtrOptions& options);

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_SYNTHETIC_CTR_H_
