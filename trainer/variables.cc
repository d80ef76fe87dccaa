// The public helpers of session.h about variables: path names and the
// deterministic initial values a worker and a PS shard agree on.
#include <algorithm>

#include "core/ps/initializer.h"
#include "parallax/session.h"

namespace parallax {

uint32_t DenseRowDim(size_t size) {
  return static_cast<uint32_t>(std::max<size_t>(1, std::min<size_t>(size, 1024)));
}

std::vector<float> InitialDenseValues(const Initializer& init, uint32_t var_id, size_t size) {
  const uint32_t dim = DenseRowDim(size);
  std::vector<float> values(size), row(dim);
  for (size_t r = 0; r * dim < size; ++r) {
    ps::InitializeRow(init, var_id, static_cast<int64_t>(r), dim, row.data());
    const size_t n = std::min<size_t>(dim, size - r * dim);
    std::copy(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(n),
              values.begin() + static_cast<std::ptrdiff_t>(r * dim));
  }
  return values;
}

void InitialSparseRow(const Initializer& init, uint32_t var_id, int64_t row, uint32_t dim,
                      float* out) {
  ps::InitializeRow(init, var_id, row, dim, out);
}

}  // namespace parallax
