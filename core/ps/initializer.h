// Row initial values: a pure function of (seed, variable, row id), so a
// worker and a shard (or a restarted shard) produce the same row without
// talking to each other.
#ifndef PARALLAX_CORE_PS_INITIALIZER_H_
#define PARALLAX_CORE_PS_INITIALIZER_H_

#include <cstdint>

#include "core/ps/plan.h"

namespace parallax::ps {

// Writes `dim` initial values of row `row` of variable `variable_id` to
// `out`. Deterministic across processes and hosts (integer hashing only, no
// library RNG); uniform values lie in [-scale, scale).
void InitializeRow(const Initializer& init, uint32_t variable_id, int64_t row, uint32_t dim,
                   float* out);

}  // namespace parallax::ps

#endif  // PARALLAX_CORE_PS_INITIALIZER_H_
