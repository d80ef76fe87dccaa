// The job file Validator, shared by core/config/job_config.cc (the generic
// readers, ParseJobConfig) and core/config/job_config_tables.cc (one reader
// per table). Private to px_config: it includes toml++, which users of
// job_config.h never see.
#ifndef PARALLAX_CORE_CONFIG_JOB_CONFIG_VALIDATOR_H_
#define PARALLAX_CORE_CONFIG_JOB_CONFIG_VALIDATOR_H_

#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/setting_names.h"
#include "parallax/status.h"
#include "core/config/job_config.h"

namespace parallax::config_internal {

namespace fs = std::filesystem;

// A list of accepted names; every list below is a constant array.
using Names = std::span<const std::string_view>;

// The keys each known table accepts. [model] and [user] accept anything.
inline constexpr std::string_view kTopLevel[] = {"job",       "trainer", "model",    "user",
                                                 "optimizer", "ps",      "variable", "plan"};
inline constexpr std::string_view kJobKeys[] = {
    "name",         "workers",     "arch",           "consistency",      "staleness",
    "max_restarts", "min_workers", "replace_timeout_s", "sync_warmup_steps"};
inline constexpr std::string_view kTrainerKeys[] = {
    "model",          "command",          "steps",         "batch_size", "checkpoint_every",
    "checkpoint_dir", "keep_checkpoints", "metrics_every", "env",        "timeline"};
inline constexpr std::string_view kOptimizerTables[] = {"dense", "sparse"};
inline constexpr std::string_view kOptimizerKeys[] = {
    "type", "lr", "momentum", "beta1", "beta2", "epsilon", "initial_accumulator"};
inline constexpr std::string_view kJobOptimizerKeys[] = {
    "type",    "lr",          "momentum", "beta1", "beta2", "epsilon", "initial_accumulator",
    "scale_lr_with_workers"};
inline constexpr std::string_view kPsKeys[] = {
    "shards",       "partitions",    "local_aggregation", "value_encoding", "curve",
    "staleness_lr", "shared_memory", "shared_memory_mb",  "hosts",          "batch",
    "cache_staleness", "cache_rows", "cache_accumulate", "cache_rule", "hot_rows"};
inline constexpr std::string_view kPlanKeys[] = {
    "link_bytes_per_s",      "collective_latency_us", "ps_rtt_us",
    "loopback_bytes_per_s",  "shm_bytes_per_s",
    "search_steps",          "search_warmup_steps",   "search_min_partitions",
    "search_max_partitions", "search_max_trials", "replan", "replan_factor",
    "replan_after_steps", "replan_window_steps"};
inline constexpr std::string_view kVariableKeys[] = {"name",        "path",      "partitions",
                                                     "optimizer",   "admit_after", "ttl_steps",
                                                     "max_rows",    "eviction"};

bool Contains(Names names, std::string_view s);
std::string Join(Names names, std::string_view separator);
std::string Quote(std::string_view s);
std::string KeyPath(std::string_view prefix, std::string_view key);
// "a table", "an integer", ...: what `n` is, for "expected X, got Y".
std::string TypeName(const toml::node& n);

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
  // A path named at `where` is missing on this host: an error, or a line
  // of options_.missing_paths. Returns whether loading goes on with it.
  bool PathMissing(const toml::node& where, std::string_view path, std::string what);
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
  // One of the names of an enum of include/parallax/settings.h.
  template <typename E>
  bool ReadSetting(const toml::table& t, std::string_view prefix, std::string_view key, E* out) {
    const std::vector<std::string_view> names = SettingNames<E>();
    std::string name;
    if (!ReadEnum(t, prefix, key, names, &name)) return false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) *out = static_cast<E>(i);
    }
    return true;
  }
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
  // `scale_lr_with_workers`: the job's [optimizer.*] tables, which also
  // accept that key (a [[variable]]'s optimizer does not).
  void ReadOptimizer(const toml::table& t, std::string_view prefix, OptimizerSettings* out,
                     bool* scale_lr_with_workers = nullptr);
  void ReadPs(const toml::table& t, Consistency consistency, JobConfig::Ps* ps);
  // [ps] hot_rows: "auto", or a count (0 off); sync jobs only.
  void ReadHotRows(const toml::table& t, Consistency consistency, JobConfig::Ps* ps);
  void ReadPlan(const toml::table& t, JobConfig::Plan* plan);
  void ReadVariables(const toml::node& node, std::vector<VariableOverride>* out);
  // Resolves `data` and `*_path` strings of `in` (recursively) into `out`;
  // a missing `data` file names `fetch`, the command that creates it.
  void ResolveModelPaths(const toml::table& in, std::string_view prefix, std::string_view fetch,
                         toml::table* out);

  const std::string source_;
  const fs::path base_dir_;
  const JobLoadOptions options_;
  std::vector<ConfigError> errors_;
};

}  // namespace parallax::config_internal

#endif  // PARALLAX_CORE_CONFIG_JOB_CONFIG_VALIDATOR_H_
