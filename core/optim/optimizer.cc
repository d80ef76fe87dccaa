#include "core/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace parallax::optim {

Status ValidateOptimizer(const OptimizerSettings& spec) {
  auto bad = [&](const char* field, const char* range) {
    return InvalidArgument(std::string(OptimizerTypeName(spec.type)) + " optimizer: \"" + field +
                           "\" must be " + range);
  };
  if (!(spec.lr > 0) || !std::isfinite(spec.lr)) return bad("lr", "> 0");
  if (!(spec.momentum >= 0 && spec.momentum < 1)) return bad("momentum", "in [0, 1)");
  if (!(spec.beta1 >= 0 && spec.beta1 < 1)) return bad("beta1", "in [0, 1)");
  if (!(spec.beta2 >= 0 && spec.beta2 < 1)) return bad("beta2", "in [0, 1)");
  if (!(spec.epsilon > 0)) return bad("epsilon", "> 0");
  if (!(spec.initial_accumulator >= 0)) return bad("initial_accumulator", ">= 0");
  return Status::Ok();
}

int StateSlots(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd:
      return 0;
    case OptimizerType::kMomentum:
      return 1;
    case OptimizerType::kAdagrad:
      return 1;
    case OptimizerType::kAdam:
      return 2;
  }
  return 0;
}

float InitialStateValue(const OptimizerSettings& spec, int slot) {
  return spec.type == OptimizerType::kAdagrad && slot == 0 ? spec.initial_accumulator : 0.0f;
}

void ApplyUpdate(const OptimizerSettings& spec, float lr, size_t n, const float* __restrict g,
                 float* __restrict w, float* __restrict s1, float* __restrict s2, int64_t* step) {
  switch (spec.type) {
    case OptimizerType::kSgd: {
      // Blocks of a fixed length, which GCC vectorizes at -O2 (a loop of
      // unknown length it does not); the same operations per element.
      constexpr size_t kBlock = 16;
      size_t i = 0;
      for (; i + kBlock <= n; i += kBlock) {
        for (size_t k = 0; k < kBlock; ++k) w[i + k] -= lr * g[i + k];
      }
      for (; i < n; ++i) w[i] -= lr * g[i];
      return;
    }
    case OptimizerType::kMomentum:
      for (size_t i = 0; i < n; ++i) {
        s1[i] = spec.momentum * s1[i] + g[i];
        w[i] -= lr * s1[i];
      }
      return;
    case OptimizerType::kAdagrad:
      for (size_t i = 0; i < n; ++i) {
        s1[i] += g[i] * g[i];
        w[i] -= lr * g[i] / (std::sqrt(s1[i]) + spec.epsilon);
      }
      return;
    case OptimizerType::kAdam: {
      const int64_t t = ++*step;
      const float c1 = 1.0f - std::pow(spec.beta1, static_cast<float>(t));
      const float c2 = 1.0f - std::pow(spec.beta2, static_cast<float>(t));
      for (size_t i = 0; i < n; ++i) {
        s1[i] = spec.beta1 * s1[i] + (1.0f - spec.beta1) * g[i];
        s2[i] = spec.beta2 * s2[i] + (1.0f - spec.beta2) * g[i] * g[i];
        w[i] -= lr * (s1[i] / c1) / (std::sqrt(s2[i] / c2) + spec.epsilon);
      }
      return;
    }
  }
}

DenseOptimizer::DenseOptimizer(const OptimizerSettings& spec, size_t size) : spec_(spec), size_(size) {
  const int slots = StateSlots(spec.type);
  if (slots >= 1) s1_.assign(size, InitialStateValue(spec, 0));
  if (slots >= 2) s2_.assign(size, InitialStateValue(spec, 1));
}

void DenseOptimizer::Apply(std::span<const float> grad, std::span<float> w) {
  ApplyUpdate(spec_, spec_.lr, size_, grad.data(), w.data(), s1_.empty() ? nullptr : s1_.data(),
              s2_.empty() ? nullptr : s2_.data(), &step_);
  if (spec_.type != OptimizerType::kAdam) ++step_;
}

Status DenseOptimizer::Restore(OptimizerState state) {
  if (state.s1.size() != s1_.size() || state.s2.size() != s2_.size() || state.steps.size() != 1) {
    return InvalidArgument("optimizer state of " + std::to_string(state.s1.size()) + "+" +
                           std::to_string(state.s2.size()) + " values does not fit a " +
                           std::string(OptimizerTypeName(spec_.type)) + " optimizer of " +
                           std::to_string(size_) + " elements");
  }
  s1_ = std::move(state.s1);
  s2_ = std::move(state.s2);
  step_ = state.steps[0];
  return Status::Ok();
}

Status SparseOptimizer::Restore(OptimizerState state) {
  if (state.s1.size() != s1_.size() || state.s2.size() != s2_.size() ||
      state.steps.size() != steps_.size()) {
    return InvalidArgument("optimizer state of " + std::to_string(state.s1.size()) + "+" +
                           std::to_string(state.s2.size()) + " values does not fit a " +
                           std::string(OptimizerTypeName(spec_.type)) + " optimizer of " +
                           std::to_string(rows_) + "x" + std::to_string(dim_));
  }
  s1_ = std::move(state.s1);
  s2_ = std::move(state.s2);
  steps_ = std::move(state.steps);
  return Status::Ok();
}

SparseOptimizer::SparseOptimizer(const OptimizerSettings& spec, int64_t rows, uint32_t dim)
    : spec_(spec), rows_(rows), dim_(dim) {
  const size_t n = static_cast<size_t>(rows) * dim;
  const int slots = StateSlots(spec.type);
  if (slots >= 1) s1_.assign(n, InitialStateValue(spec, 0));
  if (slots >= 2) s2_.assign(n, InitialStateValue(spec, 1));
  if (spec.type == OptimizerType::kAdam) steps_.assign(static_cast<size_t>(rows), 0);
}

Status SparseOptimizer::Apply(std::span<const int64_t> ids, std::span<const float> grads,
                              std::span<float> table) {
  if (grads.size() != ids.size() * dim_) {
    return InvalidArgument("sparse update: " + std::to_string(grads.size()) +
                           " gradient values for " + std::to_string(ids.size()) + " ids of dim " +
                           std::to_string(dim_));
  }
  if (table.size() != static_cast<size_t>(rows_) * dim_) {
    return InvalidArgument(
        "sparse update: the table has " + std::to_string(table.size()) +
        " values, expected rows × dim = " + std::to_string(static_cast<size_t>(rows_) * dim_));
  }
  if (seen_.empty() && !ids.empty()) seen_.assign(static_cast<size_t>(rows_), 0);
  if (++epoch_ == 0) {  // wrapped: marks of 2^32 calls ago would read as this call's
    std::fill(seen_.begin(), seen_.end(), 0);
    epoch_ = 1;
  }
  for (int64_t id : ids) {
    if (id < 0 || id >= rows_) {
      return InvalidArgument("sparse update: id " + std::to_string(id) + " is outside [0, " +
                             std::to_string(rows_) + ")");
    }
    uint32_t& mark = seen_[static_cast<size_t>(id)];
    if (mark == epoch_) {
      return InvalidArgument("sparse update: id " + std::to_string(id) +
                             " is repeated; sum its gradients first");
    }
    mark = epoch_;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t off = static_cast<size_t>(ids[i]) * dim_;
    ApplyUpdate(spec_, spec_.lr, dim_, grads.data() + i * dim_, table.data() + off,
                s1_.empty() ? nullptr : s1_.data() + off, s2_.empty() ? nullptr : s2_.data() + off,
                steps_.empty() ? nullptr : &steps_[static_cast<size_t>(ids[i])]);
  }
  return Status::Ok();
}

}  // namespace parallax::optim
