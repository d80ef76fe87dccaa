// Server-side sparse optimizers with per-row state. Lazy: only rows that
// receive a gradient are updated, and Adam keeps a step count per row, so
// its bias correction follows that row's own history.
#ifndef PARALLAX_PS_OPTIMIZER_H_
#define PARALLAX_PS_OPTIMIZER_H_

#include <cstdint>

#include "core/ps/plan.h"

namespace parallax::ps {

// Number of dim-sized state slots a row needs: SGD 0, momentum 1 (velocity),
// Adagrad 1 (accumulator), Adam 2 (m, v) plus a step count.
int OptimizerSlots(OptimizerType type);

// Initial value of the state slots of a new row (Adagrad's accumulator
// starts at initial_accumulator, everything else at 0).
float InitialSlotValue(const OptimizerSpec& spec, int slot);

// Applies gradient `g` to one row with learning rate `lr`:
//   sgd:      w -= lr·g
//   momentum: m = μ·m + g;  w -= lr·m
//   adagrad:  a += g²;      w -= lr·g / (√a + ε)
//   adam:     t += 1; m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
//             w -= lr · (m / (1−β1^t)) / (√(v / (1−β2^t)) + ε)
// s1/s2/step may be null when the optimizer has no such state.
void ApplyRow(const OptimizerSpec& spec, float lr, uint32_t dim, const float* g, float* w,
              float* s1, float* s2, int64_t* step);

}  // namespace parallax::ps

#endif  // PARALLAX_PS_OPTIMIZER_H_
