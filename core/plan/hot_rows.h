// Hot rows: the rows of a sparse PS table that most batches touch, kept on
// every rank and all-reduced, while the PS serves the rest (the per-row
// form of Parallax's hybrid; OpenEmbedding's replicated hot rows). Under
// sync this is the same training: a hot row's gradients are summed over the
// ranks (with the dense gradients, in their fusion buckets), averaged as the
// shard averages, and applied by the same lazy optimizer to the hot rows any
// rank touched that step, as the shard applies a step's rows.
//
// How many: a hot row costs every step (H·(d+1) more floats in the
// all-reduce: its gradient and a touched count), and saves its PS traffic in
// the steps whose batch holds it (presence p: its expected share of the
// batches to come, from how many of the sampled batches hold it: the share of
// the other sampled batches, leave-one-out, and for rare rows Good–Turing's
// estimate from how many rows the samples hold once more; not the in-sample
// share, which would count the long tail seen once as recurring). With the
// rows sorted by presence, H hot rows take
// E_H = Σ p of the first H off a worker's k distinct PS rows a step, so
//   predicted(H) = PS(k − E_H) + all-reduce(H·(d+1))
// with the cost model's PsCost and AllReduceCost (core/plan/cost_model.h;
// the all-reduce's fixed cost per call counted only when the plan has no
// other all-reduce variable whose buckets the block can join). `auto`
// takes the H of least predicted time among powers of two and the rows down
// to each presence level the samples show, 0 when none beats H = 0; a
// fixed N takes the N most present rows.
#ifndef PARALLAX_CORE_PLAN_HOT_ROWS_H_
#define PARALLAX_CORE_PLAN_HOT_ROWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan/cost_model.h"
#include "core/plan/sparsity.h"

namespace parallax::plan {

struct HotRowsChoice {
  std::vector<int64_t> rows;  // ascending; empty: none
  double share = 0;           // E_H / k: the share of a batch's distinct rows they are
  double seconds = 0;         // predicted per step with them
  double seconds_without = 0; // predicted per step with none
  std::string reason;         // one line: how many, and why
};

// `var` as the PS serves it once hot rows take `share` of the distinct rows
// a worker's (and a host's) step touches.
VariableStats WithoutHotRows(VariableStats var, double share);
// The block of `h` hot rows of width `dim` a step all-reduces: their
// gradients and a touched count each, as one dense variable.
VariableStats HotRowsBlock(std::string name, int64_t h, int64_t dim);

// `requested`: JobConfig::Ps::kHotRowsAuto (-1), or N > 0. `var` as the cost
// model sees the table on the PS; `shares_call`: the plan all-reduces other
// variables, so the hot block joins their calls.
HotRowsChoice ChooseHotRows(const VariableStats& var, const Sparsity& sparsity, int64_t requested,
                            const ClusterShape& cluster, const CostOptions& options,
                            bool local_aggregation, bool shares_call);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_HOT_ROWS_H_
