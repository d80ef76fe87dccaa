// Measuring how sparse a variable's access is, from the ids the model's own
// batch generator touches (SampleIds over a few batches, negatives
// included): what the cost model's α comes from.
#ifndef PARALLAX_CORE_PLAN_SPARSITY_H_
#define PARALLAX_CORE_PLAN_SPARSITY_H_

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace parallax::plan {

struct Sparsity {
  int batches = 0;
  double alpha = 0;       // mean distinct rows per batch / rows (one worker)
  double alpha_host = 0;  // mean distinct rows of `workers_per_host` batches together / rows
  // Share of accesses that go to the most frequent 1% of rows (≥ 0.01; 0.01
  // for a uniform profile): the skew placement has to balance.
  double top1pct_share = 0;
  // Accesses per batch of every row the batches touched (absent: never).
  std::unordered_map<int64_t, double> row_frequency;
  // How many of the batches hold each touched row (at least once): what the
  // chance a worker's step pulls and pushes it is estimated from, what a hot
  // row saves (core/plan/hot_rows.h).
  std::unordered_map<int64_t, int> row_batches;
};

// `batches[i]` is the ids batch i touched (repeats allowed). Consecutive
// groups of `workers_per_host` batches stand for one host's workers in one
// step: the trainer's rank 0 and `parallax plan` both pass rank 0's own
// consecutive batches, which stand for its host's ranks (the same data
// distribution). Ids outside [0, rows) are ignored. Memory is proportional
// to the ids sampled, not to `rows`.
Sparsity MeasureSparsity(std::span<const std::vector<int64_t>> batches, int64_t rows,
                         int workers_per_host);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_SPARSITY_H_
