#include "core/config/job_config.h"

#include <fcntl.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <system_error>
#include <tuple>
#include <utility>

#include "core/config/suggest.h"

namespace parallax {
namespace {

namespace fs = std::filesystem;

// A list of accepted names; every list below is a constant array.
using Names = std::span<const std::string_view>;

constexpr char kSubmitted[] = "<submitted>";

// The keys each known table accepts. [model] and [user] accept anything.
constexpr std::string_view kTopLevel[] = {"job",       "trainer", "model",   "user",
                                          "optimizer", "ps",      "variable", "plan"};
constexpr std::string_view kJobKeys[] = {"name",        "workers",   "arch",
                                         "consistency", "staleness", "max_restarts"};
constexpr std::string_view kTrainerKeys[] = {
    "model",          "command",          "steps",         "batch_size", "checkpoint_every",
    "checkpoint_dir", "keep_checkpoints", "metrics_every", "env",        "timeline"};
constexpr std::string_view kOptimizerTables[] = {"dense", "sparse"};
constexpr std::string_view kOptimizerKeys[] = {"type",  "lr",      "momentum",           "beta1",
                                               "beta2", "epsilon", "initial_accumulator"};
constexpr std::string_view kPsKeys[] = {"shards",         "partitions", "local_aggregation",
                                        "value_encoding", "curve",      "staleness_lr",
                                        "shared_memory",  "shared_memory_mb"};
constexpr std::string_view kPlanKeys[] = {
    "link_bytes_per_s",    "collective_latency_us", "ps_rtt_us",         "search_steps",
    "search_warmup_steps", "search_min_partitions", "search_max_partitions", "search_max_trials"};
constexpr std::string_view kVariableKeys[] = {"name", "path", "partitions", "optimizer"};

constexpr std::string_view kArchs[] = {"hybrid", "allreduce", "allgather", "ps"};
constexpr std::string_view kConsistencies[] = {"sync", "async", "ssp"};
constexpr std::string_view kOptimizerTypes[] = {"sgd", "momentum", "adagrad", "adam"};
constexpr std::string_view kValueEncodings[] = {"fp32", "fp16"};
constexpr std::string_view kVariablePaths[] = {"allreduce", "allgather", "ps"};

// Where each well-known key lives, to point a key written in the wrong table
// at the right one.
struct KeyHome {
  std::string_view tables;
  Names keys;
};
constexpr KeyHome kKeyHomes[] = {
    {"[job]", kJobKeys},
    {"[trainer]", kTrainerKeys},
    {"[ps]", kPsKeys},
    {"[plan]", kPlanKeys},
    {"[optimizer.dense] or [optimizer.sparse]", kOptimizerKeys},
};

// Optimizer hyperparameters other than lr, and the types each applies to.
constexpr std::string_view kMomentumOnly[] = {"momentum"};
constexpr std::string_view kAdamOnly[] = {"adam"};
constexpr std::string_view kAdagradOnly[] = {"adagrad"};
constexpr std::string_view kAdagradAndAdam[] = {"adagrad", "adam"};

bool Contains(Names names, std::string_view s) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

std::string Join(Names names, std::string_view separator) {
  std::string out;
  for (const std::string_view n : names) {
    if (!out.empty()) out += separator;
    out += n;
  }
  return out;
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string KeyPath(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  return std::string(prefix) + "." + std::string(key);
}

std::string TypeName(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::string FormatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

bool IsValidJobName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsValidEnvName(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct ConfigError {
  uint32_t line;
  uint32_t column;
  std::string message;
};

// Walks a parsed document, fills a JobConfig and collects every problem. Each
// Read* function returns true when it stored a valid value; it leaves its
// output untouched when the key is absent (no error) or wrong (reported).
class Validator {
 public:
  Validator(std::string source, fs::path base_dir, const JobLoadOptions& options)
      : source_(std::move(source)), base_dir_(std::move(base_dir)), options_(options) {}

  void Run(const toml::table& root, JobConfig* config);

  // Returns the sorted, joined errors as INVALID_ARGUMENT, or OK.
  Status Finish();

 private:
  void Error(const toml::source_region& where, std::string message);
  void KeyError(const toml::node& where, std::string_view path, std::string what) {
    Error(where.source(), "key " + Quote(path) + ": " + what);
  }
  // A required key is absent: reported at its table's header, or at 1:1.
  void Missing(const toml::table* table, std::string_view path, std::string what) {
    Error(table != nullptr ? table->source() : toml::source_region{},
          "key " + Quote(path) + ": missing; " + what);
  }

  // Reports every key of `table` that is not in `allowed`.
  void CheckKeys(const toml::table& table, std::string_view prefix, Names allowed);

  // Returns the table at `key`, nullptr when absent or not a table (reported).
  const toml::table* GetTable(const toml::table& parent, std::string_view prefix,
                              std::string_view key);

  bool ReadInt(const toml::table& t, std::string_view prefix, std::string_view key, int64_t min,
               int64_t max, int64_t* out);
  template <typename T>
  bool ReadInt(const toml::table& t, std::string_view prefix, std::string_view key, int64_t min,
               T* out) {
    int64_t v = 0;
    if (!ReadInt(t, prefix, key, min, std::numeric_limits<T>::max(), &v)) return false;
    *out = static_cast<T>(v);
    return true;
  }
  enum class Range { kPositive, kNonNegative, kUnitInterval };
  bool ReadNumber(const toml::table& t, std::string_view prefix, std::string_view key, Range range,
                  double* out);
  bool ReadString(const toml::table& t, std::string_view prefix, std::string_view key,
                  std::string* out);
  bool ReadEnum(const toml::table& t, std::string_view prefix, std::string_view key, Names allowed,
                std::string* out);
  bool ReadBool(const toml::table& t, std::string_view prefix, std::string_view key, bool* out);
  // "auto" (stored as 0) or an integer >= 1.
  bool ReadAutoOrCount(const toml::table& t, std::string_view prefix, std::string_view key,
                       int* out);
  // A path string made absolute against the job file's directory.
  bool ReadPath(const toml::node& node, std::string_view path, fs::path* out);
  // [trainer] `key`: a directory path (made absolute; when paths are checked,
  // its parent must exist and it must be a directory if it exists).
  void ReadDirectory(const toml::table& t, const char* key, std::string* out);
  // " (PATH is relative to the job file's directory)" when `node` holds a
  // relative path, else "".
  static std::string RelativeHint(const toml::node& node);

  void ReadJob(const toml::table* t, JobConfig::Job* job);
  void ReadTrainer(const toml::table* t, JobConfig::Trainer* trainer);
  void ReadOptimizer(const toml::table& t, std::string_view prefix, OptimizerConfig* out);
  void ReadPs(const toml::table& t, const std::string& consistency, JobConfig::Ps* ps);
  void ReadPlan(const toml::table& t, JobConfig::Plan* plan);
  void ReadVariables(const toml::node& node, std::vector<VariableOverride>* out);
  // Resolves `data` and `*_path` strings of `in` (recursively) into `out`.
  void ResolveModelPaths(const toml::table& in, std::string_view prefix, toml::table* out);

  const std::string source_;
  const fs::path base_dir_;
  const JobLoadOptions options_;
  std::vector<ConfigError> errors_;
};

void Validator::Error(const toml::source_region& where, std::string message) {
  uint32_t line = where.begin.line;
  uint32_t column = where.begin.column;
  if (line == 0) {
    line = 1;
    column = 1;
  }
  errors_.push_back({line, column, std::move(message)});
}

Status Validator::Finish() {
  if (errors_.empty()) return Status::Ok();
  std::stable_sort(errors_.begin(), errors_.end(), [](const ConfigError& a, const ConfigError& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  std::string message;
  for (const ConfigError& e : errors_) {
    if (!message.empty()) message += '\n';
    message +=
        source_ + ":" + std::to_string(e.line) + ":" + std::to_string(e.column) + ": " + e.message;
  }
  return InvalidArgument(std::move(message));
}

void Validator::CheckKeys(const toml::table& table, std::string_view prefix, Names allowed) {
  for (auto&& [key, node] : table) {
    const std::string_view k = key.str();
    if (Contains(allowed, k)) continue;
    std::string message = (prefix.empty() && node.is_table() ? "unknown table " : "unknown key ") +
                          Quote(KeyPath(prefix, k));
    std::string hint = DidYouMean(k, allowed);
    if (hint.empty()) {
      // `allowed` never holds `k` here, so a match is always another table.
      for (const KeyHome& home : kKeyHomes) {
        if (Contains(home.keys, k)) {
          hint = "; " + Quote(k) + " belongs in " + std::string(home.tables);
          break;
        }
      }
    }
    Error(key.source(), message + hint);
  }
}

const toml::table* Validator::GetTable(const toml::table& parent, std::string_view prefix,
                                       std::string_view key) {
  const toml::node* n = parent.get(key);
  if (n == nullptr) return nullptr;
  if (!n->is_table()) {
    KeyError(*n, KeyPath(prefix, key), "expected a table, got " + TypeName(*n));
    return nullptr;
  }
  return n->as_table();
}

bool Validator::ReadInt(const toml::table& t, std::string_view prefix, std::string_view key,
                        int64_t min, int64_t max, int64_t* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string path = KeyPath(prefix, key);
  if (!n->is_integer()) {
    KeyError(*n, path, "expected an integer, got " + TypeName(*n));
    return false;
  }
  const int64_t v = n->as_integer()->get();
  if (v < min) {
    KeyError(*n, path,
             "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(v));
    return false;
  }
  if (v > max) {
    KeyError(*n, path,
             "expected an integer <= " + std::to_string(max) + ", got " + std::to_string(v));
    return false;
  }
  *out = v;
  return true;
}

bool Validator::ReadNumber(const toml::table& t, std::string_view prefix, std::string_view key,
                           Range range, double* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string path = KeyPath(prefix, key);
  double v = 0;
  if (n->is_integer()) {
    v = static_cast<double>(n->as_integer()->get());
  } else if (n->is_floating_point()) {
    v = n->as_floating_point()->get();
  } else {
    KeyError(*n, path, "expected a number, got " + TypeName(*n));
    return false;
  }
  bool ok = std::isfinite(v);
  std::string expected;
  switch (range) {
    case Range::kPositive:
      ok = ok && v > 0;
      expected = "a number > 0";
      break;
    case Range::kNonNegative:
      ok = ok && v >= 0;
      expected = "a number >= 0";
      break;
    case Range::kUnitInterval:
      ok = ok && v >= 0 && v < 1;
      expected = "a number in [0, 1)";
      break;
  }
  if (!ok) {
    KeyError(*n, path, "expected " + expected + ", got " + FormatDouble(v));
    return false;
  }
  *out = v;
  return true;
}

bool Validator::ReadString(const toml::table& t, std::string_view prefix, std::string_view key,
                           std::string* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  if (!n->is_string()) {
    KeyError(*n, KeyPath(prefix, key), "expected a string, got " + TypeName(*n));
    return false;
  }
  *out = n->as_string()->get();
  return true;
}

bool Validator::ReadEnum(const toml::table& t, std::string_view prefix, std::string_view key,
                         Names allowed, std::string* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string path = KeyPath(prefix, key);
  if (!n->is_string()) {
    KeyError(*n, path, "expected one of " + Join(allowed, ", ") + ", got " + TypeName(*n));
    return false;
  }
  const std::string& v = n->as_string()->get();
  if (!Contains(allowed, v)) {
    KeyError(
        *n, path,
        "expected one of " + Join(allowed, ", ") + ", got " + Quote(v) + DidYouMean(v, allowed));
    return false;
  }
  *out = v;
  return true;
}

bool Validator::ReadBool(const toml::table& t, std::string_view prefix, std::string_view key,
                         bool* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  if (!n->is_boolean()) {
    KeyError(*n, KeyPath(prefix, key), "expected a boolean, got " + TypeName(*n));
    return false;
  }
  *out = n->as_boolean()->get();
  return true;
}

bool Validator::ReadAutoOrCount(const toml::table& t, std::string_view prefix, std::string_view key,
                                int* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string path = KeyPath(prefix, key);
  const std::string expected = "expected 'auto' or an integer >= 1, got ";
  if (n->is_string()) {
    const std::string& v = n->as_string()->get();
    if (v == "auto") {
      *out = 0;
      return true;
    }
    KeyError(*n, path, expected + Quote(v));
    return false;
  }
  if (!n->is_integer()) {
    KeyError(*n, path, expected + TypeName(*n));
    return false;
  }
  const int64_t v = n->as_integer()->get();
  if (v < 1 || v > std::numeric_limits<int>::max()) {
    KeyError(*n, path, expected + std::to_string(v));
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool Validator::ReadPath(const toml::node& node, std::string_view path, fs::path* out) {
  const std::string& s = node.as_string()->get();
  if (s.empty()) {
    KeyError(node, path, "expected a non-empty path");
    return false;
  }
  *out = (base_dir_ / fs::path(s)).lexically_normal();
  // "ckpt/" names the directory "ckpt": drop the empty last component.
  if (!out->has_filename() && out->has_relative_path()) *out = out->parent_path();
  return true;
}

std::string Validator::RelativeHint(const toml::node& node) {
  const std::string& s = node.as_string()->get();
  if (fs::path(s).is_absolute()) return "";
  return " (" + Quote(s) + " is relative to the job file's directory)";
}

void Validator::Run(const toml::table& root, JobConfig* config) {
  CheckKeys(root, "", kTopLevel);

  ReadJob(GetTable(root, "", "job"), &config->job);
  ReadTrainer(GetTable(root, "", "trainer"), &config->trainer);

  if (const toml::table* model = GetTable(root, "", "model")) {
    toml::table resolved = *model;
    ResolveModelPaths(*model, "model", &resolved);
    std::ostringstream os;
    os << resolved;
    config->model_toml = os.str();
  }
  if (const toml::table* user = GetTable(root, "", "user")) {
    std::ostringstream os;
    os << *user;
    config->user_toml = os.str();
  }
  if (const toml::table* optimizer = GetTable(root, "", "optimizer")) {
    CheckKeys(*optimizer, "optimizer", kOptimizerTables);
    if (const toml::table* dense = GetTable(*optimizer, "optimizer", "dense")) {
      ReadOptimizer(*dense, "optimizer.dense", &config->dense_optimizer);
    }
    if (const toml::table* sparse = GetTable(*optimizer, "optimizer", "sparse")) {
      ReadOptimizer(*sparse, "optimizer.sparse", &config->sparse_optimizer);
    }
  }
  if (const toml::table* ps = GetTable(root, "", "ps")) {
    ReadPs(*ps, config->job.consistency, &config->ps);
  }
  if (const toml::table* plan = GetTable(root, "", "plan")) ReadPlan(*plan, &config->plan);
  if (const toml::node* variables = root.get("variable")) {
    ReadVariables(*variables, &config->variables);
  }
}

void Validator::ReadJob(const toml::table* t, JobConfig::Job* job) {
  static const std::string kNameRule = "a name of 1 to 64 characters from [A-Za-z0-9._-]";
  if (t == nullptr) {
    Missing(nullptr, "job.name", "add a [job] table with name = \"...\"");
    return;
  }
  CheckKeys(*t, "job", kJobKeys);
  if (const toml::node* n = t->get("name")) {
    if (ReadString(*t, "job", "name", &job->name) && !IsValidJobName(job->name)) {
      KeyError(*n, "job.name", "expected " + kNameRule + ", got " + Quote(job->name));
    }
  } else {
    Missing(t, "job.name", "expected " + kNameRule);
  }
  ReadInt(*t, "job", "workers", 1, &job->workers);
  ReadEnum(*t, "job", "arch", kArchs, &job->arch);
  const bool consistency_ok = !t->contains("consistency") ||
                              ReadEnum(*t, "job", "consistency", kConsistencies, &job->consistency);
  if (ReadInt(*t, "job", "staleness", 0, &job->staleness) && job->staleness > 0 && consistency_ok &&
      job->consistency != "ssp") {
    KeyError(*t->get("staleness"), "job.staleness",
             "staleness only applies to consistency = 'ssp', but consistency is " +
                 Quote(job->consistency) + "; remove staleness or set consistency = 'ssp'");
  }
  ReadInt(*t, "job", "max_restarts", 0, &job->max_restarts);
}

void Validator::ReadDirectory(const toml::table& t, const char* key, std::string* out) {
  const std::string path = std::string("trainer.") + key;
  if (const toml::node* dir = t.get(key)) {
    std::string unused;
    fs::path resolved;
    if (ReadString(t, "trainer", key, &unused) && ReadPath(*dir, path, &resolved)) {
      std::error_code ec;
      const fs::path parent = resolved.parent_path();
      if (options_.check_paths && fs::exists(resolved, ec) && !fs::is_directory(resolved, ec)) {
        KeyError(*dir, path, "path " + Quote(resolved.string()) + " exists and is not a directory");
      } else if (options_.check_paths && !fs::is_directory(parent, ec)) {
        KeyError(*dir, path,
                 "parent directory " + Quote(parent.string()) + " does not exist" +
                     RelativeHint(*dir) + "; create it or fix the path");
      } else {
        *out = resolved.string();
      }
    }
  }
}

void Validator::ReadTrainer(const toml::table* t, JobConfig::Trainer* trainer) {
  const std::string either =
      "set model (a built-in model) or command (a custom trainer's argv), exactly one";
  if (t == nullptr) {
    Missing(nullptr, "trainer.model", "add a [trainer] table and " + either);
    return;
  }
  CheckKeys(*t, "trainer", kTrainerKeys);

  const toml::node* model = t->get("model");
  const toml::node* command = t->get("command");
  if (model == nullptr && command == nullptr) Missing(t, "trainer.model", either);
  if (model != nullptr && command != nullptr) {
    KeyError(*command, "trainer.command",
             "trainer.model and trainer.command are mutually exclusive; " + either);
  }
  if (model != nullptr && ReadString(*t, "trainer", "model", &trainer->model) &&
      trainer->model.empty()) {
    KeyError(*model, "trainer.model", "expected a non-empty string");
  }
  if (command != nullptr) {
    if (!command->is_array()) {
      KeyError(*command, "trainer.command",
               "expected an array of strings, got " + TypeName(*command));
    } else if (command->as_array()->empty()) {
      KeyError(*command, "trainer.command", "expected a non-empty array of strings");
    } else {
      const toml::array& argv = *command->as_array();
      std::vector<std::string> args;
      for (size_t i = 0; i < argv.size(); ++i) {
        const std::string path = "trainer.command[" + std::to_string(i) + "]";
        if (!argv[i].is_string()) {
          KeyError(argv[i], path, "expected a string, got " + TypeName(argv[i]));
        } else {
          args.push_back(argv[i].as_string()->get());
        }
      }
      if (args.size() == argv.size()) {
        if (args[0].empty()) {
          KeyError(argv[0], "trainer.command[0]", "expected a non-empty program name");
        }
        trainer->command = std::move(args);
      }
    }
  }

  ReadInt(*t, "trainer", "steps", 1, &trainer->steps);
  ReadInt(*t, "trainer", "batch_size", 1, &trainer->batch_size);
  ReadInt(*t, "trainer", "checkpoint_every", 0, &trainer->checkpoint_every);
  ReadInt(*t, "trainer", "keep_checkpoints", 1, &trainer->keep_checkpoints);
  ReadInt(*t, "trainer", "metrics_every", 1, &trainer->metrics_every);

  ReadDirectory(*t, "checkpoint_dir", &trainer->checkpoint_dir);
  ReadDirectory(*t, "timeline", &trainer->timeline);

  if (const toml::table* env = GetTable(*t, "trainer", "env")) {
    for (auto&& [key, value] : *env) {
      const std::string path = "trainer.env." + std::string(key.str());
      if (!IsValidEnvName(key.str())) {
        Error(key.source(), "key " + Quote(path) +
                                ": expected an environment variable name matching "
                                "[A-Za-z_][A-Za-z0-9_]*");
      } else if (!value.is_string()) {
        KeyError(value, path, "expected a string, got " + TypeName(value));
      } else {
        trainer->env[std::string(key.str())] = value.as_string()->get();
      }
    }
  }
}

void Validator::ReadOptimizer(const toml::table& t, std::string_view prefix, OptimizerConfig* out) {
  CheckKeys(t, prefix, kOptimizerKeys);
  const bool type_given = t.contains("type");
  const bool type_ok = !type_given || ReadEnum(t, prefix, "type", kOptimizerTypes, &out->type);
  ReadNumber(t, prefix, "lr", Range::kPositive, &out->lr);

  // Hyperparameters and the optimizer types they belong to.
  struct Hyper {
    const char* key;
    Range range;
    double* value;
    Names types;
  };
  const Hyper hypers[] = {
      {"momentum", Range::kUnitInterval, &out->momentum, kMomentumOnly},
      {"beta1", Range::kUnitInterval, &out->beta1, kAdamOnly},
      {"beta2", Range::kUnitInterval, &out->beta2, kAdamOnly},
      {"epsilon", Range::kPositive, &out->epsilon, kAdagradAndAdam},
      {"initial_accumulator", Range::kNonNegative, &out->initial_accumulator, kAdagradOnly},
  };
  for (const Hyper& h : hypers) {
    const toml::node* n = t.get(h.key);
    if (n == nullptr) continue;
    if (type_ok && !Contains(h.types, out->type)) {
      KeyError(*n, KeyPath(prefix, h.key),
               "applies only to " + Join(h.types, " and ") + ", not to type " + Quote(out->type) +
                   (type_given ? "" : " (the default; set type)"));
      continue;
    }
    ReadNumber(t, prefix, h.key, h.range, h.value);
  }
}

void Validator::ReadPs(const toml::table& t, const std::string& consistency, JobConfig::Ps* ps) {
  CheckKeys(t, "ps", kPsKeys);
  if (ReadBool(t, "ps", "staleness_lr", &ps->staleness_lr) && ps->staleness_lr &&
      consistency == "sync") {
    KeyError(*t.get("staleness_lr"), "ps.staleness_lr",
             "staleness_lr only applies to consistency = 'async' or 'ssp' (in sync mode no "
             "push is stale); remove it or set consistency");
  }
  ReadAutoOrCount(t, "ps", "shards", &ps->shards);
  if (ReadAutoOrCount(t, "ps", "partitions", &ps->partitions)) {
    ps->search_partitions = ps->partitions == 0;
  }
  ReadBool(t, "ps", "local_aggregation", &ps->local_aggregation);
  ReadEnum(t, "ps", "value_encoding", kValueEncodings, &ps->value_encoding);
  ReadBool(t, "ps", "curve", &ps->curve);
  ReadBool(t, "ps", "shared_memory", &ps->shared_memory);
  if (const auto* mb = t.get("shared_memory_mb"); mb != nullptr) {
    const auto v = mb->value<int64_t>();
    if (!v || *v < 1 || *v > 4096) {
      KeyError(*mb, "ps.shared_memory_mb",
               "shared_memory_mb must be an integer from 1 to 4096 (MiB of shared memory per "
               "worker and same-machine shard)");
    } else {
      ps->shared_memory_mb = static_cast<int>(*v);
    }
  }
}

void Validator::ReadPlan(const toml::table& t, JobConfig::Plan* plan) {
  CheckKeys(t, "plan", kPlanKeys);
  const struct {
    const char* key;
    Range range;
    std::optional<double>* out;
  } keys[] = {{"link_bytes_per_s", Range::kPositive, &plan->link_bytes_per_s},
              {"collective_latency_us", Range::kNonNegative, &plan->collective_latency_us},
              {"ps_rtt_us", Range::kNonNegative, &plan->ps_rtt_us}};
  for (const auto& k : keys) {
    double v = 0;
    if (ReadNumber(t, "plan", k.key, k.range, &v)) *k.out = v;
  }
  ReadInt(t, "plan", "search_steps", 1, &plan->search_steps);
  ReadInt(t, "plan", "search_warmup_steps", 0, &plan->search_warmup_steps);
  ReadAutoOrCount(t, "plan", "search_min_partitions", &plan->search_min_partitions);
  ReadInt(t, "plan", "search_max_trials", 3, &plan->search_max_trials);
  if (ReadInt(t, "plan", "search_max_partitions", 1, &plan->search_max_partitions) &&
      plan->search_max_partitions < plan->search_min_partitions) {
    KeyError(*t.get("search_max_partitions"), "plan.search_max_partitions",
             "expected an integer >= search_min_partitions (" +
                 std::to_string(plan->search_min_partitions) + "), got " +
                 std::to_string(plan->search_max_partitions));
  }
}

void Validator::ReadVariables(const toml::node& node, std::vector<VariableOverride>* out) {
  if (!node.is_array()) {
    KeyError(node, "variable",
             "expected an array of tables (write [[variable]]), got " + TypeName(node));
    return;
  }
  const toml::array& array = *node.as_array();
  std::map<std::string, uint32_t> first_line;  // variable name -> line of its first override
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string prefix = "variable[" + std::to_string(i) + "]";
    const toml::table* t = array[i].as_table();
    if (t == nullptr) {
      KeyError(array[i], prefix, "expected a table, got " + TypeName(array[i]));
      continue;
    }
    CheckKeys(*t, prefix, kVariableKeys);
    VariableOverride v;
    if (const toml::node* name = t->get("name")) {
      if (ReadString(*t, prefix, "name", &v.name)) {
        if (v.name.empty()) {
          KeyError(*name, prefix + ".name", "expected a non-empty variable name");
        } else if (auto [it, inserted] = first_line.emplace(v.name, name->source().begin.line);
                   !inserted) {
          KeyError(*name, prefix + ".name",
                   "duplicate override for variable " + Quote(v.name) + " (first at line " +
                       std::to_string(it->second) + ")");
        }
      }
    } else {
      Missing(t, prefix + ".name", "expected the name of the variable to override");
    }
    std::string path;
    if (ReadEnum(*t, prefix, "path", kVariablePaths, &path)) v.path = path;
    int partitions = 0;
    if (ReadInt(*t, prefix, "partitions", 1, &partitions)) v.partitions = partitions;
    if (const toml::table* opt = GetTable(*t, prefix, "optimizer")) {
      OptimizerConfig optimizer;
      ReadOptimizer(*opt, prefix + ".optimizer", &optimizer);
      v.optimizer = optimizer;
    }
    out->push_back(std::move(v));
  }
}

void Validator::ResolveModelPaths(const toml::table& in, std::string_view prefix,
                                  toml::table* out) {
  for (auto&& [key, node] : in) {
    const std::string k(key.str());
    const std::string path = KeyPath(prefix, k);
    if (node.is_table()) {
      if (toml::table* sub = out->get_as<toml::table>(k)) {
        ResolveModelPaths(*node.as_table(), path, sub);
      }
      continue;
    }
    if (!node.is_string() || (k != "data" && !EndsWith(k, "_path"))) continue;
    fs::path resolved;
    if (!ReadPath(node, path, &resolved)) continue;
    std::error_code ec;
    if (options_.check_paths && !fs::exists(resolved, ec)) {
      std::string message = "path " + Quote(resolved.string()) + " does not exist";
      message += RelativeHint(node);
      if (k == "data") message += "; run scripts/fetch-data to download the data sets";
      KeyError(node, path, message);
      continue;
    }
    out->insert_or_assign(k, resolved.string());
  }
}

}  // namespace

namespace {

// Checks toml++ 3.3 must not see, each refused with a location (found by
// tests/fuzz/job_config_fuzz):
// - A raw control character other than tab, LF and CR: TOML allows none
//   anywhere, not even in strings or comments; a NUL trips an assertion in
//   toml++, and a binary file given by mistake deserves a plain message.
// - A non-ASCII character outside strings and comments (invalid TOML, as
//   bare keys are ASCII), or right after a backslash (an invalid escape) or a
//   line-ending backslash in a multi-line basic string: there toml++ asks
//   is_non_ascii_horizontal_whitespace(),
//   which reaches __builtin_unreachable() (undefined behaviour) for most
//   code points.
// The scan knows just enough TOML to tell strings and comments apart;
// everything else is left to toml++.
Status PrecheckTomlText(std::string_view text, const std::string& source) {
  enum class Mode { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral };
  Mode mode = Mode::kCode;
  unsigned line = 1, column = 1;
  bool after_line_ending_backslash = false;
  // A string can only start where TOML allows one (a key, a value, an array
  // or inline-table element); a quote anywhere else (`+"`) stays code, as it
  // does for toml++.
  char last_code = '\n';
  auto starts = [&](size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    auto where = [&] { return source + ":" + std::to_string(line) + ":" + std::to_string(column); };
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", c);
      return InvalidArgument(where() + ": control character " + hex +
                             " is not allowed in a TOML file; is this a text file?");
    }
    if (c >= 0x80 && (mode == Mode::kCode || after_line_ending_backslash)) {
      return InvalidArgument(
          where() + (mode == Mode::kCode
                         ? ": a non-ASCII character outside a string or comment; TOML keys are "
                           "ASCII (quote the key: \"n\u00e4me\" = ...)"
                         : ": a non-ASCII character right after a line-ending backslash is not "
                           "supported; start the line with an ASCII character"));
    }
    if (after_line_ending_backslash && c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      after_line_ending_backslash = false;
    }
    switch (mode) {
      case Mode::kCode: {
        const bool string_may_start = std::string_view("\n=[,{.").find(last_code) !=
                                      std::string_view::npos;
        if (c != ' ' && c != '\t' && c != '\r') last_code = static_cast<char>(c);
        if (c == '#') {
          mode = Mode::kComment;
        } else if (!string_may_start) {
          // not a string, whatever it is
        } else if (starts(i, "\"\"\"")) {
          mode = Mode::kMultiBasic;
          i += 2;
          column += 2;
        } else if (c == '"') {
          mode = Mode::kBasic;
        } else if (starts(i, "\'\'\'")) {
          mode = Mode::kMultiLiteral;
          i += 2;
          column += 2;
        } else if (c == '\'') {
          mode = Mode::kLiteral;
        }
        break;
      }
      case Mode::kComment:
        if (c == '\n') {
          mode = Mode::kCode;
          last_code = '\n';
        }
        break;
      case Mode::kBasic:
      case Mode::kMultiBasic:
        if (c == '\\' && mode == Mode::kMultiBasic && i + 1 < text.size() &&
            static_cast<unsigned char>(text[i + 1]) >= 0x80) {
          return InvalidArgument(where() + ": a backslash followed by a non-ASCII character is "
                                           "not a valid escape");
        }
        if (c == '\\' && i + 1 < text.size()) {
          size_t j = i + 1;
          while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) ++j;
          if (mode == Mode::kMultiBasic && j < text.size() && text[j] == '\n') {
            after_line_ending_backslash = true;
          } else if (static_cast<unsigned char>(text[i + 1]) < 0x80) {
            ++i;  // an escape: the next character cannot end the string
            ++column;
          }
        } else if (mode == Mode::kBasic && (c == '"' || c == '\n')) {
          mode = Mode::kCode;
          last_code = static_cast<char>(c);
        } else if (mode == Mode::kMultiBasic && starts(i, "\"\"\"")) {
          mode = Mode::kCode;
          last_code = '"';
          i += 2;
          column += 2;
        }
        break;
      case Mode::kLiteral:
        if (c == '\'' || c == '\n') {
          mode = Mode::kCode;
          last_code = static_cast<char>(c);
        }
        break;
      case Mode::kMultiLiteral:
        if (starts(i, "\'\'\'")) {
          mode = Mode::kCode;
          last_code = '\'';
          i += 2;
          column += 2;
        }
        break;
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else if ((c & 0xC0) != 0x80) {  // count characters, not UTF-8 continuation bytes
      ++column;
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<JobConfig> ParseJobConfig(std::string_view text, std::string_view source,
                                   const JobLoadOptions& options) {
  JobConfig config;
  config.source = source.empty() ? kSubmitted : std::string(source);
  std::error_code ec;
  fs::path base_dir;
  if (source.empty() || source == kSubmitted) {
    base_dir = fs::current_path(ec);
  } else {
    base_dir = fs::absolute(fs::path(source), ec).parent_path();
  }
  if (ec) {
    return IoError("cannot resolve the directory of job file " + Quote(config.source) + ": " +
                   ec.message());
  }
  config.base_dir = base_dir.lexically_normal().string();

  PX_RETURN_IF_ERROR(PrecheckTomlText(text, config.source));

  toml::table root;
  try {
    // First the text with every non-ASCII character replaced by '~', which
    // TOML accepts in strings and comments and nowhere else: if that parses,
    // every non-ASCII character of the real text is inside a string or a
    // comment, where toml++ handles them (see PrecheckTomlText); if not, its
    // error is the one to report. Then the real text, for the values.
    std::string ascii;
    ascii.reserve(text.size());
    for (char ch : text) {
      const unsigned char u = static_cast<unsigned char>(ch);
      if (u < 0x80) {
        ascii += ch;
      } else if (u >= 0xC0) {
        ascii += '~';  // one character per code point keeps columns right
      }
    }
    if (ascii.size() != text.size()) (void)toml::parse(ascii, config.source);
    root = toml::parse(text, config.source);
  } catch (const toml::parse_error& e) {
    const toml::source_position& at = e.source().begin;
    return InvalidArgument(config.source + ":" + std::to_string(std::max(at.line, 1u)) + ":" +
                           std::to_string(std::max(at.column, 1u)) + ": " +
                           std::string(e.description()));
  } catch (const std::exception& e) {
    return InvalidArgument(config.source + ":1:1: cannot parse the job file: " + e.what());
  }

  Validator validator(config.source, fs::path(config.base_dir), options);
  try {
    validator.Run(root, &config);
  } catch (const std::exception& e) {
    // Nothing above throws on bad input; this guards the library boundary.
    return Internal("validating job file " + Quote(config.source) + ": " + e.what());
  }
  PX_RETURN_IF_ERROR(validator.Finish());
  return config;
}

StatusOr<JobConfig> LoadJobConfig(const std::string& path, const JobLoadOptions& options) {
  auto fail = [&path](int err) {
    return IoError("cannot read job file " + Quote(path) + ": " + std::strerror(err));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno);
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return fail(err);
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return ParseJobConfig(text, path, options);
}

}  // namespace parallax
