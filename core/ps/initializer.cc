#include "core/ps/initializer.h"

#include <cmath>

namespace parallax::ps {
namespace {

// A uniform value in [0, 1) from the top 24 bits of a mixed counter.
inline float Unit(uint64_t bits) { return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f); }

}  // namespace

void InitializeRow(const Initializer& init, uint32_t variable_id, int64_t row, uint32_t dim,
                   float* out) {
  if (init.type == Initializer::Type::kZeros) {
    for (uint32_t i = 0; i < dim; ++i) out[i] = 0.0f;
    return;
  }
  const uint64_t base = Mix64(init.seed ^ Mix64((uint64_t{variable_id} << 40) ^
                                                static_cast<uint64_t>(row)));
  for (uint32_t i = 0; i < dim; ++i) {
    const uint64_t r = Mix64(base + 0x9e3779b97f4a7c15ULL * (i + 1));
    if (init.type == Initializer::Type::kUniform) {
      out[i] = (2.0f * Unit(r) - 1.0f) * init.scale;
    } else {
      // Box-Muller from two 24-bit uniforms; float math only, so identical
      // on every host with IEEE floats.
      const float u1 = (static_cast<float>(r >> 40) + 1.0f) * (1.0f / 16777217.0f);
      const float u2 = Unit(r << 24);
      out[i] = init.scale * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    }
  }
}

}  // namespace parallax::ps
