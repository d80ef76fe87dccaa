// Helpers shared by the built-in models' .cc files; not part of the API.
#ifndef PARALLAX_TRAINER_MODELS_MODEL_INTERNAL_H_
#define PARALLAX_TRAINER_MODELS_MODEL_INTERNAL_H_

#include <cmath>
#include <memory>
#include <string>

#include "trainer/models/model.h"

namespace parallax::models {

// Eigen's compute threads (process-wide; effective when built with OpenMP).
void SetComputeThreads(int threads);

inline VariableSpec Sparse(std::string name, int64_t rows, uint32_t dim, VariableOptions o) {
  VariableSpec v;
  v.name = std::move(name);
  v.sparse = true;
  v.rows = rows;
  v.dim = dim;
  v.options = std::move(o);
  return v;
}

inline VariableSpec Dense(std::string name, size_t size, VariableOptions o) {
  VariableSpec v;
  v.name = std::move(name);
  v.size = size;
  v.options = std::move(o);
  return v;
}

// Uniform Glorot bound sqrt(6 / (fan_in + fan_out)).
inline float GlorotScale(int64_t fan_in, int64_t fan_out) {
  return static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
}

StatusOr<std::unique_ptr<Model>> CreateLmModel(const std::string& toml, const ModelOptions& o);
StatusOr<std::unique_ptr<Model>> CreateCtrModel(const std::string& toml, const ModelOptions& o);
StatusOr<std::unique_ptr<Model>> CreateMlpModel(const std::string& toml, const ModelOptions& o);

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_MODEL_INTERNAL_H_
