#include "trainer/variable_registry.h"

#include "core/optim/optimizer.h"
#include "core/ps/plan.h"

namespace parallax::trainer {

StatusOr<int> VariableRegistry::RegisterDense(const std::string& name, size_t size,
                                              const VariableOptions& options) {
  if (size == 0) return InvalidArgument("dense variable \"" + name + "\" has size 0");
  if (!options.initial_values.empty() && options.initial_values.size() != size) {
    return InvalidArgument("dense variable \"" + name +
                           "\": " + std::to_string(options.initial_values.size()) +
                           " initial values for size " + std::to_string(size));
  }
  plan::VariableInput in;
  in.var.sparse = false;
  in.var.size = size;
  in.var.dim = DenseRowDim(size);
  in.var.rows = static_cast<int64_t>((size + in.var.dim - 1) / in.var.dim);
  PX_ASSIGN_OR_RETURN(int id, Add(name, std::move(in), options, dense_optimizer_));
  initial_values_[static_cast<size_t>(id)] = options.initial_values;
  return id;
}

StatusOr<int> VariableRegistry::RegisterSparse(const std::string& name, int64_t rows,
                                               uint32_t dim, const VariableOptions& options) {
  if (rows <= 0 || dim == 0) {
    return InvalidArgument("sparse variable \"" + name + "\" needs rows > 0 and dim > 0, got " +
                           std::to_string(rows) + "x" + std::to_string(dim));
  }
  const size_t size = static_cast<size_t>(rows) * dim;
  if (!options.initial_values.empty() && options.initial_values.size() != size) {
    return InvalidArgument("sparse variable \"" + name +
                           "\": " + std::to_string(options.initial_values.size()) +
                           " initial values for " + std::to_string(rows) + " rows of dim " +
                           std::to_string(dim) + " (" + std::to_string(size) + ")");
  }
  plan::VariableInput in;
  in.var.sparse = true;
  in.var.rows = rows;
  in.var.dim = dim;
  PX_ASSIGN_OR_RETURN(int id, Add(name, std::move(in), options, sparse_optimizer_));
  initial_values_[static_cast<size_t>(id)] = options.initial_values;
  return id;
}

StatusOr<int> VariableRegistry::RegisterDynamic(const std::string& name, uint32_t dim,
                                                const DynamicTableSettings& settings,
                                                const VariableOptions& options) {
  const std::string what = "dynamic table \"" + name + "\"";
  if (dim == 0) return InvalidArgument(what + " needs dim > 0");
  PX_RETURN_IF_ERROR(ps::CheckDynamicTableSettings(settings).WithContext(what));
  if (!options.initial_values.empty()) {
    return InvalidArgument(what + " takes no initial_values: its rows start from the "
                           "initializer when their id is admitted");
  }
  plan::VariableInput in;
  in.var.sparse = true;
  in.var.rows = 0;
  in.var.dim = dim;
  in.var.dynamic = settings;
  return Add(name, std::move(in), options, sparse_optimizer_);
}

StatusOr<int> VariableRegistry::Add(const std::string& name, plan::VariableInput input,
                                    const VariableOptions& options,
                                    const OptimizerSettings& default_optimizer) {
  if (closed_) return FailedPrecondition("variable \"" + name + "\" registered after Start()");
  if (name.empty()) return InvalidArgument("a variable needs a name");
  for (const plan::VariableInput& in : inputs_) {
    if (in.var.name == name) return AlreadyExists("variable \"" + name + "\" is registered twice");
  }
  const OptimizerSettings optimizer = options.optimizer.value_or(default_optimizer);
  if (Status st = optim::ValidateOptimizer(optimizer); !st.ok()) {
    return st.WithContext("variable \"" + name + "\"");
  }
  input.var.name = name;
  input.var.id = static_cast<uint32_t>(inputs_.size());
  input.var.optimizer = optimizer;
  input.var.init = options.init;
  inputs_.push_back(std::move(input));
  initial_values_.emplace_back();
  sampled_ids_.push_back(0);
  return static_cast<int>(inputs_.size() - 1);
}

Status VariableRegistry::SampleIds(int var, std::span<const int64_t> ids) {
  PX_RETURN_IF_ERROR(Check(var, /*sparse=*/true, "SampleIds"));
  plan::VariableInput& in = inputs_[static_cast<size_t>(var)];
  size_t& sampled = sampled_ids_[static_cast<size_t>(var)];
  if (in.sampled_batches.size() >= kMaxSampledBatches || sampled + ids.size() > kMaxSampledIds) {
    return Status::Ok();
  }
  in.sampled_batches.emplace_back(ids.begin(), ids.end());
  sampled += ids.size();
  return Status::Ok();
}

Status VariableRegistry::Check(int var, bool sparse, const char* what) const {
  if (var < 0 || static_cast<size_t>(var) >= inputs_.size()) {
    return NotFound(std::string(what) + ": no variable " + std::to_string(var));
  }
  const plan::PlannedVariable& v = inputs_[static_cast<size_t>(var)].var;
  if (v.sparse != sparse) {
    return InvalidArgument(std::string(what) + ": variable \"" + v.name + "\" is " +
                           (v.sparse ? "sparse" : "dense"));
  }
  return Status::Ok();
}

std::vector<plan::PlannedVariable> VariableRegistry::Registered() const {
  std::vector<plan::PlannedVariable> out;
  out.reserve(inputs_.size());
  for (const plan::VariableInput& in : inputs_) out.push_back(in.var);
  return out;
}

}  // namespace parallax::trainer
