// Optimizer math shared by every process that updates variables: trainer
// ranks (dense variables, and sparse variables kept as local replicas) and
// the PS shards (per-row state), after a variable's OptimizerSettings.
//
// Plain float arrays, no threads, no allocation per update. Formulas (g is
// the gradient, w the weights; state slots start at 0 except Adagrad's
// accumulator, which starts at initial_accumulator):
//   sgd:      w -= lr·g
//   momentum: m = μ·m + g;  w -= lr·m
//   adagrad:  a += g²;      w -= lr·g / (√a + ε)
//   adam:     t += 1; m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
//             w -= lr · (m / (1−β1^t)) / (√(v / (1−β2^t)) + ε)
// Dense forms update every element each step (Adam has one step count).
// Lazy sparse forms update only the rows given, and Adam keeps a step count
// per row, so sparse momentum and Adam differ from their dense forms while
// SGD and Adagrad are identical either way (a zero gradient changes nothing).
//
// Thread-compatible: one object per variable, used by one thread at a time.
#ifndef PARALLAX_CORE_OPTIM_OPTIMIZER_H_
#define PARALLAX_CORE_OPTIM_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "parallax/settings.h"
#include "parallax/status.h"

namespace parallax::optim {


// INVALID_ARGUMENT naming the first field out of its range.
Status ValidateOptimizer(const OptimizerSettings& spec);

// State arrays (each as large as the weights) the optimizer needs: sgd 0,
// momentum 1, adagrad 1, adam 2.
int StateSlots(OptimizerType type);
// Initial value of state slot `slot`.
float InitialStateValue(const OptimizerSettings& spec, int slot);

// One update of `n` contiguous weights. s1/s2/step may be null when the
// optimizer has no such state. The building block of both forms below.
void ApplyUpdate(const OptimizerSettings& spec, float lr, size_t n, const float* g, float* w, float* s1,
                 float* s2, int64_t* step);

// An optimizer's state, for checkpoints: the slots (each as large as the
// weights, or empty when the optimizer has no such slot) and the step
// counters (dense: one; sparse: one per row under adam, else none).
struct OptimizerState {
  std::vector<float> s1, s2;
  std::vector<int64_t> steps;
};

// The dense form over a variable of `size` elements.
class DenseOptimizer {
 public:
  // REQUIRES: ValidateOptimizer(spec).ok().
  DenseOptimizer(const OptimizerSettings& spec, size_t size);

  // w -= update(grad). REQUIRES: grad.size() == w.size() == size().
  void Apply(std::span<const float> grad, std::span<float> w);

  size_t size() const { return size_; }
  int64_t steps() const { return step_; }
  const OptimizerSettings& spec() const { return spec_; }
  // The learning rate of later updates. REQUIRES: lr > 0 and finite.
  void set_lr(float lr) { spec_.lr = lr; }

  OptimizerState State() const { return {s1_, s2_, {step_}}; }
  // INVALID_ARGUMENT (nothing changed) when the sizes do not fit.
  Status Restore(OptimizerState state);

 private:
  OptimizerSettings spec_;
  size_t size_;
  std::vector<float> s1_, s2_;
  int64_t step_ = 0;
};

// The lazy sparse form over a table of rows × dim (row-major). State is
// allocated for the whole table (a worker keeps a whole replica anyway).
class SparseOptimizer {
 public:
  // REQUIRES: ValidateOptimizer(spec).ok(), rows >= 0, dim > 0.
  SparseOptimizer(const OptimizerSettings& spec, int64_t rows, uint32_t dim);

  // Updates the rows `ids` of `table` with `grads` (ids.size() × dim, row i
  // for ids[i]). Ids must be distinct (sum repeated ids first) and in
  // [0, rows): otherwise INVALID_ARGUMENT and nothing is changed.
  Status Apply(std::span<const int64_t> ids, std::span<const float> grads, std::span<float> table);

  int64_t rows() const { return rows_; }
  uint32_t dim() const { return dim_; }
  // The learning rate of later updates. REQUIRES: lr > 0 and finite.
  void set_lr(float lr) { spec_.lr = lr; }

  OptimizerState State() const { return {s1_, s2_, steps_}; }
  // INVALID_ARGUMENT (nothing changed) when the sizes do not fit.
  Status Restore(OptimizerState state);

 private:
  OptimizerSettings spec_;
  int64_t rows_;
  uint32_t dim_;
  std::vector<float> s1_, s2_;
  std::vector<int64_t> steps_;  // adam: per row
};

}  // namespace parallax::optim

#endif  // PARALLAX_CORE_OPTIM_OPTIMIZER_H_
