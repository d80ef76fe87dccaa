// A row's whole state as the PS wire carries it with the ROW_STATE flag
// (schemas/ps_wire.md, "Row state"): the weights, each optimizer slot, then
// the row's step count as two floats (its low and high 24 bits), in
// ps_wire::RowStateWidth(dim, slots) float32 values. The trainer's hot rows
// (trainer/sparse_sync.h) take rows over from their shards with it and hand
// them back with it, so that a shard's checkpoint holds every row as if the
// row had never been hot.
#ifndef PARALLAX_CORE_PS_ROW_STATE_H_
#define PARALLAX_CORE_PS_ROW_STATE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/ps/plan.h"

namespace parallax::ps {

// The row-state width of `var` (its dim and its optimizer's slots).
uint32_t RowStateWidth(const VariableSpec& var);

// Writes one row's state to `out` (RowStateWidth values). `s1`/`s2` may be
// null when the optimizer has fewer slots. REQUIRES: 0 <= step <= kMaxRowStep.
void PackRowState(const float* weights, const float* s1, const float* s2, int64_t step,
                  uint32_t dim, int slots, float* out);

// The other way: one row's state `row` into its weights, slots and step;
// `s1`, `s2` and `step` may be null where there is nothing to keep.
void UnpackRowState(const float* row, uint32_t dim, int slots, float* weights, float* s1,
                    float* s2, int64_t* step);

// A worker's copy of rows (weights and its SparseOptimizer's state, rows ×
// dim row-major each: values.size() / dim rows) as row states, rows ×
// RowStateWidth values; a row's step is state.steps[r] (Adam's, one a row),
// 0 without steps.
std::vector<float> PackRowStates(std::span<const float> values, const optim::OptimizerState& state,
                                 uint32_t dim, OptimizerType type);
// The other way: `states` (rows × RowStateWidth) into values[r × dim] and the
// slots and steps of *state, which must be sized for the rows (steps: one a
// row, or none).
void UnpackRowStates(std::span<const float> states, uint32_t dim, OptimizerType type, float* values,
                     optim::OptimizerState* state);

// The step count a row state holds.
int64_t RowStateStep(const float* row, uint32_t dim, int slots);

// Empty when `row` is a state a row of `var` can hold: its step halves are
// integers in [0, 2^24), and the slots that accumulate squares (Adagrad's,
// Adam's second moment) are not negative. Otherwise what is wrong, for an
// error text.
std::string CheckRowState(const VariableSpec& var, const float* row);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_ROW_STATE_H_
