// Element-wise sums and the division of a mean, over the data types the CPU
// collectives reduce (float32, float16, bfloat16, int32), for the
// shared-memory reduction and the Gloo backend.
//
// Pure functions, thread-safe.
#ifndef PARALLAX_CORE_COMM_REDUCE_H_
#define PARALLAX_CORE_COMM_REDUCE_H_

#include <cstddef>

#include "core/comm/communicator.h"

namespace parallax::comm {

// True for the types SumOf and DivideBy accept.
bool Reducible(DataType type);

// out[i] = in[0][i] + in[1][i] + ... + in[k-1][i], added in that order
// (16-bit floats in float32, rounded once at the end). `out` may be one of
// the inputs (the same range, not an overlapping one). REQUIRES:
// Reducible(type), k >= 1.
void SumOf(DataType type, void* out, const void* const* in, size_t k, size_t count);

// data[i] /= divisor (integer division for int32). REQUIRES: Reducible(type).
void DivideBy(DataType type, void* data, size_t count, int divisor);

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_REDUCE_H_
