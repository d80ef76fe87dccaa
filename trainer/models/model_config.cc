#include "trainer/models/model_config.h"

#include <toml++/toml.h>

#include <sstream>

namespace parallax::models {

StatusOr<ModelConfig> ModelConfig::Parse(std::string_view toml_text, std::string model) {
  ModelConfig c;
  c.model_ = std::move(model);
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string("[model]"));
  } catch (const toml::parse_error& e) {
    std::ostringstream s;
    s << "[model] of model '" << c.model_ << "': " << e.description();
    return InvalidArgument(s.str());
  }
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    if (auto v = node.value_exact<int64_t>()) {
      c.values_[key] = *v;
    } else if (auto d = node.value_exact<double>()) {
      c.values_[key] = *d;
    } else if (auto b = node.value_exact<bool>()) {
      c.values_[key] = *b;
    } else if (auto s = node.value_exact<std::string>()) {
      c.values_[key] = *s;
    } else if (const toml::array* a = node.as_array()) {
      std::vector<int64_t> ints;
      bool all_ints = true;
      for (const auto& e : *a) {
        if (auto i = e.value_exact<int64_t>()) {
          ints.push_back(*i);
        } else {
          all_ints = false;
        }
      }
      if (all_ints) {
        c.values_[key] = std::move(ints);
      } else {
        c.bad_[key] = "expected an array of integers";
      }
    } else {
      c.bad_[key] = "expected a number, string, boolean or array of integers, got a table";
    }
  }
  return c;
}

const ModelConfig::Value* ModelConfig::Find(const std::string& key) {
  known_.insert(key);
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

Status ModelConfig::TypeError(const std::string& key, const std::string& expected) const {
  return InvalidArgument("key 'model." + key + "' of model '" + model_ + "': " + expected);
}

Status ModelConfig::Int(const std::string& key, int64_t min, int64_t max, int64_t* out) {
  if (bad_.count(key)) return TypeError(key, bad_.at(key));
  const Value* v = Find(key);
  if (v == nullptr) return Status::Ok();
  const int64_t* i = std::get_if<int64_t>(v);
  if (i == nullptr) return TypeError(key, "expected an integer");
  if (*i < min || *i > max) {
    return TypeError(key, "expected an integer in [" + std::to_string(min) + ", " +
                              std::to_string(max) + "], got " + std::to_string(*i));
  }
  *out = *i;
  return Status::Ok();
}

Status ModelConfig::Int(const std::string& key, int64_t min, int64_t max, int* out) {
  int64_t x = *out;
  PX_RETURN_IF_ERROR(Int(key, min, max, &x));
  *out = static_cast<int>(x);
  return Status::Ok();
}

Status ModelConfig::Double(const std::string& key, double min, double max, double* out) {
  if (bad_.count(key)) return TypeError(key, bad_.at(key));
  const Value* v = Find(key);
  if (v == nullptr) return Status::Ok();
  double x;
  if (const double* d = std::get_if<double>(v)) {
    x = *d;
  } else if (const int64_t* i = std::get_if<int64_t>(v)) {
    x = static_cast<double>(*i);
  } else {
    return TypeError(key, "expected a number");
  }
  if (!(x >= min && x <= max)) {
    std::ostringstream s;
    s << "expected a number in [" << min << ", " << max << "], got " << x;
    return TypeError(key, s.str());
  }
  *out = x;
  return Status::Ok();
}

Status ModelConfig::Bool(const std::string& key, bool* out) {
  if (bad_.count(key)) return TypeError(key, bad_.at(key));
  const Value* v = Find(key);
  if (v == nullptr) return Status::Ok();
  const bool* b = std::get_if<bool>(v);
  if (b == nullptr) return TypeError(key, "expected true or false");
  *out = *b;
  return Status::Ok();
}

Status ModelConfig::String(const std::string& key, std::string* out) {
  if (bad_.count(key)) return TypeError(key, bad_.at(key));
  const Value* v = Find(key);
  if (v == nullptr) return Status::Ok();
  const std::string* s = std::get_if<std::string>(v);
  if (s == nullptr) return TypeError(key, "expected a string");
  *out = *s;
  return Status::Ok();
}

Status ModelConfig::Choice(const std::string& key, const std::vector<std::string>& allowed,
                           std::string* out) {
  std::string s = *out;
  PX_RETURN_IF_ERROR(String(key, &s));
  for (const std::string& a : allowed) {
    if (a == s) {
      *out = s;
      return Status::Ok();
    }
  }
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return TypeError(key, "expected one of " + list + ", got '" + s + "'");
}

Status ModelConfig::IntList(const std::string& key, int64_t min, int64_t max,
                            std::vector<int64_t>* out) {
  if (bad_.count(key)) return TypeError(key, bad_.at(key));
  const Value* v = Find(key);
  if (v == nullptr) return Status::Ok();
  const auto* list = std::get_if<std::vector<int64_t>>(v);
  if (list == nullptr) return TypeError(key, "expected an array of integers");
  for (int64_t x : *list) {
    if (x < min || x > max) {
      return TypeError(key, "expected integers in [" + std::to_string(min) + ", " +
                                std::to_string(max) + "], got " + std::to_string(x));
    }
  }
  *out = *list;
  return Status::Ok();
}

Status ModelConfig::Finish() const {
  std::vector<std::string> all;
  for (const auto& [k, v] : values_) all.push_back(k);
  for (const auto& [k, v] : bad_) all.push_back(k);
  for (const std::string& k : all) {
    if (known_.count(k) == 0) {
      std::string keys;
      for (const std::string& n : known_) keys += (keys.empty() ? "" : ", ") + n;
      return InvalidArgument("unknown key 'model." + k + "' for model '" + model_ +
                             "'; its keys are: " + keys + " (see schemas/job.md)");
    }
  }
  return Status::Ok();
}

}  // namespace parallax::models
