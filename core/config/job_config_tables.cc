// The Validator's reader for each table of a job file: [job], [trainer],
// [model], [optimizer.*], [ps], [plan] and [[variable]]. The generic readers
// they use (ReadInt, ReadEnum, ...) are in core/config/job_config.cc.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "core/config/job_config.h"
#include "core/config/job_config_validator.h"

namespace parallax::config_internal {
namespace {

// Optimizer hyperparameters other than lr, and the types each applies to.
constexpr std::string_view kMomentumOnly[] = {"momentum"};
constexpr std::string_view kAdamOnly[] = {"adam"};
constexpr std::string_view kAdagradOnly[] = {"adagrad"};
constexpr std::string_view kAdagradAndAdam[] = {"adagrad", "adam"};

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

}  // namespace

void Validator::Run(const toml::table& root, JobConfig* config) {
  CheckKeys(root, "", kTopLevel);

  ReadJob(GetTable(root, "", "job"), &config->job);
  ReadTrainer(GetTable(root, "", "trainer"), &config->trainer);

  if (const toml::table* model = GetTable(root, "", "model")) {
    toml::table resolved = *model;
    // The built-in CTR model reads synthetic data that fetch-data writes
    // only when asked; every other model's data is the downloaded corpus.
    const std::string fetch = config->trainer.model == "ctr"
                                  ? "scripts/fetch-data --synthetic-ctr to write the synthetic CTR data"
                                  : "scripts/fetch-data to download the data sets";
    ResolveModelPaths(*model, "model", fetch, &resolved);
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
      ReadOptimizer(*dense, "optimizer.dense", &config->dense_optimizer,
                    &config->dense_scale_lr_with_workers);
    }
    if (const toml::table* sparse = GetTable(*optimizer, "optimizer", "sparse")) {
      ReadOptimizer(*sparse, "optimizer.sparse", &config->sparse_optimizer,
                    &config->sparse_scale_lr_with_workers);
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
  ReadSetting(*t, "job", "arch", &job->arch);
  const bool consistency_ok =
      !t->contains("consistency") || ReadSetting(*t, "job", "consistency", &job->consistency);
  if (ReadInt(*t, "job", "staleness", 0, &job->staleness) && job->staleness > 0 && consistency_ok &&
      job->consistency != Consistency::kSsp) {
    KeyError(*t->get("staleness"), "job.staleness",
             "staleness only applies to consistency = 'ssp', but consistency is " +
                 Quote(ConsistencyName(job->consistency)) +
                 "; remove staleness or set consistency = 'ssp'");
  }
  ReadInt(*t, "job", "max_restarts", 0, &job->max_restarts);
  // Elastic workers (docs/RELIABILITY.md): min_workers defaults to workers.
  job->min_workers = job->workers;
  if (ReadInt(*t, "job", "min_workers", 1, &job->min_workers) &&
      job->min_workers > job->workers) {
    KeyError(*t->get("min_workers"), "job.min_workers",
             "min_workers " + std::to_string(job->min_workers) + " is more than workers " +
                 std::to_string(job->workers) + "; it must be between 1 and workers");
    job->min_workers = job->workers;
  }
  ReadInt(*t, "job", "replace_timeout_s", 0, &job->replace_timeout_s);
  if (ReadInt(*t, "job", "sync_warmup_steps", 0, &job->sync_warmup_steps) &&
      job->sync_warmup_steps > 0 && consistency_ok && job->consistency == Consistency::kSync) {
    KeyError(*t->get("sync_warmup_steps"), "job.sync_warmup_steps",
             "sync_warmup_steps starts a job in sync mode before its consistency applies, but "
             "consistency is 'sync'; remove sync_warmup_steps or set consistency = 'async' or "
             "'ssp'");
  }
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
        if (PathMissing(*dir, path,
                        "parent directory " + Quote(parent.string()) + " does not exist" +
                            RelativeHint(*dir) + "; create it or fix the path")) {
          *out = resolved.string();
        }
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

void Validator::ReadOptimizer(const toml::table& t, std::string_view prefix,
                              OptimizerSettings* out, bool* scale_lr_with_workers) {
  if (scale_lr_with_workers != nullptr) {
    CheckKeys(t, prefix, kJobOptimizerKeys);
    ReadBool(t, prefix, "scale_lr_with_workers", scale_lr_with_workers);
  } else {
    CheckKeys(t, prefix, kOptimizerKeys);
  }
  const bool type_given = t.contains("type");
  const bool type_ok = !type_given || ReadSetting(t, prefix, "type", &out->type);
  const std::string type = OptimizerTypeName(out->type);
  auto read = [&](const char* key, Range range, float* value) {
    double v = 0;
    if (ReadNumber(t, prefix, key, range, &v)) *value = static_cast<float>(v);
  };
  read("lr", Range::kPositive, &out->lr);

  // Hyperparameters and the optimizer types they belong to.
  struct Hyper {
    const char* key;
    Range range;
    float* value;
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
    if (type_ok && !Contains(h.types, type)) {
      KeyError(*n, KeyPath(prefix, h.key),
               "applies only to " + Join(h.types, " and ") + ", not to type " + Quote(type) +
                   (type_given ? "" : " (the default; set type)"));
      continue;
    }
    read(h.key, h.range, h.value);
  }
}

void Validator::ReadPs(const toml::table& t, Consistency consistency, JobConfig::Ps* ps) {
  CheckKeys(t, "ps", kPsKeys);
  if (ReadBool(t, "ps", "staleness_lr", &ps->staleness_lr) && ps->staleness_lr &&
      consistency == Consistency::kSync) {
    KeyError(*t.get("staleness_lr"), "ps.staleness_lr",
             "staleness_lr only applies to consistency = 'async' or 'ssp' (in sync mode no "
             "push is stale); remove it or set consistency");
  }
  ReadAutoOrCount(t, "ps", "shards", &ps->shards);
  ReadSetting(t, "ps", "hosts", &ps->hosts);
  if (ReadAutoOrCount(t, "ps", "partitions", &ps->partitions)) {
    ps->search_partitions = ps->partitions == 0;
  }
  ReadBool(t, "ps", "local_aggregation", &ps->local_aggregation);
  ReadSetting(t, "ps", "value_encoding", &ps->value_encoding);
  ReadBool(t, "ps", "curve", &ps->curve);
  ReadBool(t, "ps", "shared_memory", &ps->shared_memory);
  ReadBool(t, "ps", "batch", &ps->batch);
  if (ReadInt(t, "ps", "cache_staleness", 0, 1'000'000, &ps->cache_staleness) &&
      ps->cache_staleness > 0 && consistency == Consistency::kSync) {
    KeyError(*t.get("cache_staleness"), "ps.cache_staleness",
             "cache_staleness only applies to consistency = 'async' or 'ssp' (a sync step reads "
             "every row as of the step before); remove it or set consistency");
  }
  // A setting of the cache without a cache would do nothing: refused by name.
  auto without_cache = [&](const std::string& key, const std::string& what) {
    KeyError(*t.get(key), "ps." + key,
             what + ", and there is no cache: set cache_staleness (async or ssp), or remove " +
                 key);
  };
  if (ReadInt(t, "ps", "cache_rows", 1, int64_t{1} << 40, &ps->cache_rows) &&
      ps->cache_staleness == 0) {
    without_cache("cache_rows", "cache_rows bounds the row cache");
  }
  if (ReadBool(t, "ps", "cache_accumulate", &ps->cache_accumulate) && ps->cache_accumulate &&
      ps->cache_staleness == 0) {
    without_cache("cache_accumulate", "cache_accumulate sums the gradients of cached rows");
  }
  static constexpr std::string_view kCacheRules[] = {"clock", "version"};
  if (std::string rule; ReadEnum(t, "ps", "cache_rule", kCacheRules, &rule)) {
    ps->cache_check_versions = rule == "version";
    if (ps->cache_check_versions && ps->cache_staleness == 0) {
      without_cache("cache_rule",
                    "cache_rule = 'version' checks cached rows against cache_staleness");
    }
  }
  ReadHotRows(t, consistency, ps);
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

void Validator::ReadHotRows(const toml::table& t, Consistency consistency, JobConfig::Ps* ps) {
  const toml::node* n = t.get("hot_rows");
  if (n == nullptr) return;
  const std::string expected = "expected 'auto' or an integer from 0 to 1000000, got ";
  if (n->is_string()) {
    const std::string& v = n->as_string()->get();
    if (v != "auto") return KeyError(*n, "ps.hot_rows", expected + Quote(v));
    ps->hot_rows = JobConfig::Ps::kHotRowsAuto;
  } else if (!n->is_integer()) {
    return KeyError(*n, "ps.hot_rows", expected + TypeName(*n));
  } else {
    const int64_t v = n->as_integer()->get();
    if (v < 0 || v > 1'000'000) return KeyError(*n, "ps.hot_rows", expected + std::to_string(v));
    ps->hot_rows = v;
  }
  if (ps->hot_rows != 0 && consistency != Consistency::kSync) {
    KeyError(*n, "ps.hot_rows",
             "hot_rows only applies to consistency = 'sync' (hot rows are all-reduced every step, "
             "which is the sync rule); remove it or set consistency = 'sync'");
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
              {"ps_rtt_us", Range::kNonNegative, &plan->ps_rtt_us},
              {"loopback_bytes_per_s", Range::kPositive, &plan->loopback_bytes_per_s},
              {"shm_bytes_per_s", Range::kPositive, &plan->shm_bytes_per_s}};
  for (const auto& k : keys) {
    double v = 0;
    if (ReadNumber(t, "plan", k.key, k.range, &v)) *k.out = v;
  }
  ReadInt(t, "plan", "search_steps", 1, &plan->search_steps);
  ReadInt(t, "plan", "search_warmup_steps", 0, &plan->search_warmup_steps);
  ReadAutoOrCount(t, "plan", "search_min_partitions", &plan->search_min_partitions);
  ReadInt(t, "plan", "search_max_trials", 3, &plan->search_max_trials);
  ReadBool(t, "plan", "replan", &plan->replan);
  ReadInt(t, "plan", "replan_after_steps", 0, &plan->replan_after_steps);
  ReadInt(t, "plan", "replan_window_steps", 1, &plan->replan_window_steps);
  if (ReadNumber(t, "plan", "replan_factor", Range::kPositive, &plan->replan_factor) &&
      plan->replan_factor <= 1) {
    char got[32];
    std::snprintf(got, sizeof(got), "%g", plan->replan_factor);
    KeyError(*t.get("replan_factor"), "plan.replan_factor",
             std::string("expected a number > 1 (how many times the prediction, either way), "
                         "got ") + got);
  }
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
    VariablePath path = VariablePath::kAllReduce;
    if (ReadSetting(*t, prefix, "path", &path)) v.path = path;
    int partitions = 0;
    if (ReadInt(*t, prefix, "partitions", 1, &partitions)) v.partitions = partitions;
    // A dynamic table's settings.
    int64_t n = 0;
    if (ReadInt(*t, prefix, "admit_after", 1, &n)) v.admit_after = n;
    if (ReadInt(*t, prefix, "ttl_steps", 0, &n)) v.ttl_steps = n;
    if (ReadInt(*t, prefix, "max_rows", 1, &n)) v.max_rows = n;
    std::string eviction;
    constexpr std::string_view kEvictions[] = {"lru", "lfu"};
    if (ReadEnum(*t, prefix, "eviction", kEvictions, &eviction)) {
      v.eviction = ParseEvictionPolicy(eviction);
    }
    if (const toml::table* opt = GetTable(*t, prefix, "optimizer")) {
      OptimizerSettings optimizer;
      ReadOptimizer(*opt, prefix + ".optimizer", &optimizer);
      v.optimizer = optimizer;
    }
    out->push_back(std::move(v));
  }
}

void Validator::ResolveModelPaths(const toml::table& in, std::string_view prefix,
                                  std::string_view fetch, toml::table* out) {
  for (auto&& [key, node] : in) {
    const std::string k(key.str());
    const std::string path = KeyPath(prefix, k);
    if (node.is_table()) {
      if (toml::table* sub = out->get_as<toml::table>(k)) {
        ResolveModelPaths(*node.as_table(), path, fetch, sub);
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
      if (k == "data") message += "; run " + std::string(fetch);
      if (!PathMissing(node, path, message)) continue;
    }
    out->insert_or_assign(k, resolved.string());
  }
}

}  // namespace parallax::config_internal
