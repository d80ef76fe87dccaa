#include "trainer/models/model.h"

#include <Eigen/Core>

#include "trainer/models/model_internal.h"

namespace parallax::models {

void SetComputeThreads(int threads) { Eigen::setNbThreads(threads); }

Status Model::Register(Session* session, int sample_batches) {
  var_ids_.clear();
  std::map<std::string, int> by_name;
  for (const VariableSpec& v : Variables()) {
    StatusOr<int> id = v.sparse ? session->RegisterSparse(v.name, v.rows, v.dim, v.options)
                                : session->RegisterDense(v.name, v.size, v.options);
    if (!id.ok()) return id.status().WithContext("model '" + name() + "'");
    var_ids_.push_back(*id);
    by_name[v.name] = *id;
  }
  if (sample_batches <= 0) return Status::Ok();
  PX_ASSIGN_OR_RETURN(auto samples, SampleIds(sample_batches));
  for (const auto& [var, batches] : samples) {
    for (const auto& ids : batches) PX_RETURN_IF_ERROR(session->SampleIds(by_name.at(var), ids));
  }
  return Status::Ok();
}

std::vector<std::string> ModelNames() { return {"lm", "ctr", "mlp"}; }

StatusOr<std::unique_ptr<Model>> CreateModel(const std::string& name, const std::string& model_toml,
                                             const ModelOptions& options) {
  if (name == "lm") return CreateLmModel(model_toml, options);
  if (name == "ctr") return CreateCtrModel(model_toml, options);
  if (name == "mlp") return CreateMlpModel(model_toml, options);
  std::string names;
  for (const std::string& n : ModelNames()) names += (names.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown built-in model '" + name + "' in [trainer] model; the built-in " +
                         "models are " + names + " (or set [trainer] command for a custom trainer)");
}

}  // namespace parallax::models
