#include "core/ps/row_state.h"

#include <cmath>
#include <cstring>

#include "core/optim/optimizer.h"
#include "schemas/ps_wire.h"

namespace parallax::ps {

uint32_t RowStateWidth(const VariableSpec& var) {
  return ps_wire::RowStateWidth(var.dim, optim::StateSlots(var.optimizer.type));
}

void PackRowState(const float* weights, const float* s1, const float* s2, int64_t step,
                  uint32_t dim, int slots, float* out) {
  std::memcpy(out, weights, dim * sizeof(float));
  if (slots >= 1) std::memcpy(out + dim, s1, dim * sizeof(float));
  if (slots >= 2) std::memcpy(out + 2 * size_t{dim}, s2, dim * sizeof(float));
  float* tail = out + (1 + size_t(slots)) * dim;
  const int64_t half = int64_t{1} << 24;
  tail[0] = static_cast<float>(step % half);
  tail[1] = static_cast<float>(step / half);
}

void UnpackRowState(const float* row, uint32_t dim, int slots, float* weights, float* s1,
                    float* s2, int64_t* step) {
  std::memcpy(weights, row, dim * sizeof(float));
  if (slots >= 1 && s1 != nullptr) std::memcpy(s1, row + dim, dim * sizeof(float));
  if (slots >= 2 && s2 != nullptr) std::memcpy(s2, row + 2 * size_t{dim}, dim * sizeof(float));
  if (step != nullptr) *step = RowStateStep(row, dim, slots);
}

std::vector<float> PackRowStates(std::span<const float> values, const optim::OptimizerState& state,
                                 uint32_t dim, OptimizerType type) {
  const int slots = optim::StateSlots(type);
  const size_t width = ps_wire::RowStateWidth(dim, slots);
  const size_t rows = values.size() / dim;
  std::vector<float> out(rows * width);
  for (size_t r = 0; r < rows; ++r) {
    const size_t at = r * dim;
    PackRowState(values.data() + at, slots >= 1 ? state.s1.data() + at : nullptr,
                 slots >= 2 ? state.s2.data() + at : nullptr, r < state.steps.size() ? state.steps[r] : 0,
                 dim, slots, out.data() + r * width);
  }
  return out;
}

void UnpackRowStates(std::span<const float> states, uint32_t dim, OptimizerType type, float* values,
                     optim::OptimizerState* state) {
  const int slots = optim::StateSlots(type);
  const size_t width = ps_wire::RowStateWidth(dim, slots);
  const size_t rows = states.size() / width;
  for (size_t r = 0; r < rows; ++r) {
    const size_t at = r * dim;
    UnpackRowState(states.data() + r * width, dim, slots, values + at,
                   slots >= 1 ? state->s1.data() + at : nullptr,
                   slots >= 2 ? state->s2.data() + at : nullptr,
                   r < state->steps.size() ? &state->steps[r] : nullptr);
  }
}

int64_t RowStateStep(const float* row, uint32_t dim, int slots) {
  const float* tail = row + (1 + size_t(slots)) * dim;
  return static_cast<int64_t>(tail[0]) + (static_cast<int64_t>(tail[1]) << 24);
}

std::string CheckRowState(const VariableSpec& var, const float* row) {
  const int slots = optim::StateSlots(var.optimizer.type);
  const float* tail = row + (1 + size_t(slots)) * var.dim;
  for (int k = 0; k < 2; ++k) {
    const float v = tail[k];
    if (!(v >= 0 && v < ps_wire::kRowStepHalf) || v != std::floor(v))
      return std::string("its step's ") + (k == 0 ? "low" : "high") + " half " + std::to_string(v) +
             " is not an integer in [0, 2^24)";
  }
  // The slot of squared gradients: Adagrad's accumulator (slot 0), Adam's
  // second moment (slot 1). A negative one makes the next update NaN.
  const int squares = var.optimizer.type == OptimizerType::kAdagrad ? 0
                      : var.optimizer.type == OptimizerType::kAdam  ? 1
                                                                    : -1;
  if (squares >= 0) {
    const float* s = row + (1 + size_t(squares)) * var.dim;
    for (uint32_t j = 0; j < var.dim; ++j) {
      if (s[j] < 0)
        return "its optimizer slot " + std::to_string(squares) + " (a sum of squares) is " +
               std::to_string(s[j]) + " at column " + std::to_string(j);
    }
  }
  return "";
}

}  // namespace parallax::ps
