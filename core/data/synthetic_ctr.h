// Synthetic click-through-rate data in the Criteo format, drawn from a hidden
// ground-truth logistic model, so that a CTR model's AUC can be judged
// against the best possible one (the generator's Bayes AUC). docs/DATA.md
// describes the distribution; every default below is part of that contract.
#ifndef PARALLAX_CORE_DATA_SYNTHETIC_CTR_H_
#define PARALLAX_CORE_DATA_SYNTHETIC_CTR_H_

#include <cstdint>
#include <string>
#include <vector>

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
};

// The hidden model: logit = base_logit + sum_f w_f[row_f] + sum_d u_d (z_d - m_d),
// z_d = log(1 + x_d) as CriteoReader computes it (0 when missing), row_f the
// reader's categorical row id (0 when missing); p = sigmoid(logit).
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
  std::string json;  // generator.json's contents
};

// Writes out_dir/{train.tsv, heldout.tsv, generator.json} (creating out_dir;
// each file atomically). INVALID_ARGUMENT for bad options.
StatusOr<SyntheticCtrResult> WriteSyntheticCtr(const std::string& out_dir,
                                               const SyntheticCtrOptions& options);

}  // namespace parallax::data

#endif  // PARALLAX_CORE_DATA_SYNTHETIC_CTR_H_
