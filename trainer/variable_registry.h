// VariableRegistry: the variables a rank registers before Session::Start()
// (names, kinds, shapes, optimizers, initial values) and the ids its
// batches touch (SampleIds): the inputs of the plan (core/plan/plan_builder.h).
// The Session registers into one; `parallax plan` registers a built-in
// model's variables into another with the same calls
// (models::RegisterVariables), so the plan it predicts is built from the
// same inputs as the job's.
//
// Thread-compatible.
#ifndef PARALLAX_TRAINER_VARIABLE_REGISTRY_H_
#define PARALLAX_TRAINER_VARIABLE_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/plan/plan_builder.h"
#include "parallax/job_config.h"
#include "parallax/session.h"
#include "parallax/status.h"

namespace parallax::trainer {

class VariableRegistry {
 public:
  // Rank 0 keeps at most this many sampled batches, and ids, per variable;
  // later SampleIds calls are ignored (a few batches measure the density).
  static constexpr size_t kMaxSampledBatches = 64;
  static constexpr size_t kMaxSampledIds = 4u << 20;

  // Variables without an optimizer of their own get the job's
  // [optimizer.dense] or [optimizer.sparse], its lr times `workers` where
  // the table sets scale_lr_with_workers.
  explicit VariableRegistry(const JobConfig& config, int workers = 1)
      : dense_optimizer_(Scaled(config.dense_optimizer, config.dense_scale_lr_with_workers, workers)),
        sparse_optimizer_(
            Scaled(config.sparse_optimizer, config.sparse_scale_lr_with_workers, workers)) {}

  // Ids 0, 1, ... in registration order. ALREADY_EXISTS for a name used
  // twice; INVALID_ARGUMENT for a bad shape, optimizer or initial values;
  // FAILED_PRECONDITION once Close()d.
  StatusOr<int> RegisterDense(const std::string& name, size_t size,
                              const VariableOptions& options);
  StatusOr<int> RegisterSparse(const std::string& name, int64_t rows, uint32_t dim,
                               const VariableOptions& options);
  // A table with no row count (Session::RegisterDynamic).
  StatusOr<int> RegisterDynamic(const std::string& name, uint32_t dim,
                                const DynamicTableSettings& settings,
                                const VariableOptions& options);
  // Records the ids one batch touches in sparse variable `var`.
  Status SampleIds(int var, std::span<const int64_t> ids);
  // No registration after this (Session::Start()).
  void Close() { closed_ = true; }

  // NOT_FOUND for an unknown id, INVALID_ARGUMENT when `var` is not of the
  // kind `sparse` says; both name `what` (the caller's method).
  Status Check(int var, bool sparse, const char* what) const;

  size_t size() const { return inputs_.size(); }
  const plan::VariableInput& input(int var) const { return inputs_[static_cast<size_t>(var)]; }
  // A variable's explicit initial values (empty: the initializer's).
  const std::vector<float>& initial_values(int var) const {
    return initial_values_[static_cast<size_t>(var)];
  }
  const std::vector<plan::VariableInput>& inputs() const { return inputs_; }
  // What was registered, without the samples (CheckRegistrationsMatch).
  std::vector<plan::PlannedVariable> Registered() const;

 private:
  static OptimizerSettings Scaled(OptimizerSettings o, bool scale, int workers) {
    if (scale) o.lr *= static_cast<float>(workers);
    return o;
  }
  StatusOr<int> Add(const std::string& name, plan::VariableInput input,
                    const VariableOptions& options, const OptimizerSettings& default_optimizer);

  const OptimizerSettings dense_optimizer_;
  const OptimizerSettings sparse_optimizer_;
  bool closed_ = false;
  std::vector<plan::VariableInput> inputs_;  // index == id
  std::vector<std::vector<float>> initial_values_;
  std::vector<size_t> sampled_ids_;
};

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_VARIABLE_REGISTRY_H_
