// ModelConfig: the [model] table of a job (JobConfig::model_toml) read by a
// built-in model's own schema. Each getter records its key; Finish() turns
// every key no getter asked for into INVALID_ARGUMENT naming the key and
// listing the model's keys. Type and range errors name the key, what was
// expected and what was found. toml++ stays in model_config.cc.
#ifndef PARALLAX_TRAINER_MODELS_MODEL_CONFIG_H_
#define PARALLAX_TRAINER_MODELS_MODEL_CONFIG_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "parallax/status.h"

namespace parallax::models {

class ModelConfig {
 public:
  // Parses `toml_text` (the [model] table's body). `model` names the model
  // in messages. INVALID_ARGUMENT for a TOML error or a nested table.
  static StatusOr<ModelConfig> Parse(std::string_view toml_text, std::string model);

  // Each reads `key` into *out when present (keeps *out, the default, when
  // absent) and checks its range.
  Status Int(const std::string& key, int64_t min, int64_t max, int64_t* out);
  Status Int(const std::string& key, int64_t min, int64_t max, int* out);
  Status Double(const std::string& key, double min, double max, double* out);
  Status Bool(const std::string& key, bool* out);
  Status String(const std::string& key, std::string* out);
  // One of `allowed`.
  Status Choice(const std::string& key, const std::vector<std::string>& allowed, std::string* out);
  // An array of integers, each in [min, max].
  Status IntList(const std::string& key, int64_t min, int64_t max, std::vector<int64_t>* out);

  // Whether the table sets `key` (a key that depends on another one's value).
  bool Has(const std::string& key) const { return values_.count(key) > 0 || bad_.count(key) > 0; }

  // INVALID_ARGUMENT naming the first unknown key and the keys asked for.
  Status Finish() const;

 private:
  using Value = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;
  const Value* Find(const std::string& key);
  Status TypeError(const std::string& key, const std::string& expected) const;

  std::string model_;
  std::map<std::string, Value> values_;
  std::map<std::string, std::string> bad_;  // key -> why it could not be read
  std::set<std::string> known_;
};

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_MODEL_CONFIG_H_
