#include "trainer/models/model.h"

#include <Eigen/Core>

#include "trainer/models/matmul.h"
#include "trainer/models/model_internal.h"

namespace parallax::models {

void SetComputeThreads(int threads) {
  Eigen::setNbThreads(threads);
  SetBlasThreads(threads);
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
