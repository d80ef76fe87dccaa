// Whether float arrays hold a NaN or an infinity, fast enough to check every
// gradient of every step (the check is a pass over integer bits that the
// compiler vectorizes; a per-element std::isfinite is several times slower).
#ifndef PARALLAX_CORE_BASE_FINITE_H_
#define PARALLAX_CORE_BASE_FINITE_H_

#include <cstddef>

namespace parallax {

// True if one of the n floats is NaN or ±Inf (all exponent bits set).
bool AnyNonFinite(const float* v, size_t n);

// The index of the first NaN or ±Inf of the n floats, or n when there is none.
size_t FirstNonFinite(const float* v, size_t n);

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_FINITE_H_
