// Measuring how sparse a variable's access is, from the ids the model's own
// batch generator touches (SampleIds over a few batches, negatives
// included): what the cost model's α comes from.
#ifndef PARALLAX_CORE_PLAN_SPARSITY_H_
#define PARALLAX_CORE_PLAN_SPARSITY_H_

#include <cstdint>
#include <span>
#include <vector>

namespace parallax::plan {

struct Sparsity {
  int batches = 0;
  double alpha = 0;       // mean distinct rows per batch / rows (one worker)
  double alpha_host = 0;  // mean distinct rows of `workers_per_host` batches together / rows
  // Share of accesses that go to the most frequent 1% of rows (≥ 0.01; 0.01
  // for a uniform profile): the skew placement has to balance.
  double top1pct_share = 0;
  std::vector<double> row_frequency;  // accesses per batch, per row
};

// `batches[i]` is the ids batch i touched (repeats allowed). Consecutive
// groups of `workers_per_host` batches stand for one host's workers in one
// step. Ids outside [0, rows) are ignored.
Sparsity MeasureSparsity(std::span<const std::vector<int64_t>> batches, int64_t rows,
                         int workers_per_host);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_SPARSITY_H_
