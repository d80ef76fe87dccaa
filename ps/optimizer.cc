#include "ps/optimizer.h"

#include <cmath>

namespace parallax::ps {

int OptimizerSlots(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd: return 0;
    case OptimizerType::kMomentum: return 1;
    case OptimizerType::kAdagrad: return 1;
    case OptimizerType::kAdam: return 2;
  }
  return 0;
}

float InitialSlotValue(const OptimizerSpec& spec, int slot) {
  return spec.type == OptimizerType::kAdagrad && slot == 0 ? spec.initial_accumulator : 0.0f;
}

void ApplyRow(const OptimizerSpec& spec, float lr, uint32_t dim, const float* __restrict g,
              float* __restrict w, float* __restrict s1, float* __restrict s2, int64_t* step) {
  switch (spec.type) {
    case OptimizerType::kSgd:
      for (uint32_t i = 0; i < dim; ++i) w[i] -= lr * g[i];
      return;
    case OptimizerType::kMomentum:
      for (uint32_t i = 0; i < dim; ++i) {
        s1[i] = spec.momentum * s1[i] + g[i];
        w[i] -= lr * s1[i];
      }
      return;
    case OptimizerType::kAdagrad:
      for (uint32_t i = 0; i < dim; ++i) {
        s1[i] += g[i] * g[i];
        w[i] -= lr * g[i] / (std::sqrt(s1[i]) + spec.epsilon);
      }
      return;
    case OptimizerType::kAdam: {
      const int64_t t = ++*step;
      const float c1 = 1.0f - std::pow(spec.beta1, static_cast<float>(t));
      const float c2 = 1.0f - std::pow(spec.beta2, static_cast<float>(t));
      for (uint32_t i = 0; i < dim; ++i) {
        s1[i] = spec.beta1 * s1[i] + (1.0f - spec.beta1) * g[i];
        s2[i] = spec.beta2 * s2[i] + (1.0f - spec.beta2) * g[i] * g[i];
        w[i] -= lr * (s1[i] / c1) / (std::sqrt(s2[i] / c2) + spec.epsilon);
      }
      return;
    }
  }
}

}  // namespace parallax::ps
