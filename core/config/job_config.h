// JobConfig: a validated job.toml. Every key is documented in schemas/job.md.
//
// Loading never half-succeeds: either every key is valid and a JobConfig is
// returned, or an INVALID_ARGUMENT Status lists every problem found, one per
// line, each as "FILE:LINE:COLUMN: key 'a.b': what was expected".
#ifndef PARALLAX_CORE_CONFIG_JOB_CONFIG_H_
#define PARALLAX_CORE_CONFIG_JOB_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace parallax {

struct OptimizerConfig {
  std::string type = "sgd";  // sgd | momentum | adagrad | adam
  double lr = 0.01;          // > 0
  double momentum = 0.9;     // momentum: [0, 1)
  double beta1 = 0.9;        // adam: [0, 1)
  double beta2 = 0.999;      // adam: [0, 1)
  double epsilon = 1e-8;     // adam, adagrad: > 0
  double initial_accumulator = 0.1;  // adagrad: >= 0
};

// A [[variable]] table: overrides the plan for one variable.
struct VariableOverride {
  std::string name;
  std::optional<std::string> path;              // allreduce | allgather | ps
  std::optional<OptimizerConfig> optimizer;
  std::optional<int> partitions;                // >= 1
};

struct JobConfig {
  // Where the job was loaded from ("<submitted>" for text with no file) and
  // the directory relative paths resolve against.
  std::string source;
  std::string base_dir;

  struct Job {
    std::string name;                 // required, [A-Za-z0-9._-]{1,64}
    int workers = 1;                  // >= 1
    std::string arch = "hybrid";      // hybrid | allreduce | allgather | ps
    std::string consistency = "sync"; // sync | async | ssp
    int staleness = 0;                // >= 0; used by ssp
    int max_restarts = 0;             // >= 0
  } job;

  struct Trainer {
    std::string model;                 // built-in model name; empty when command is set
    std::vector<std::string> command;  // custom trainer argv; empty when model is set
    int64_t steps = 1000;              // >= 1
    int batch_size = 32;               // >= 1
    int64_t checkpoint_every = 0;      // >= 0; 0 = no checkpoints
    std::string checkpoint_dir;        // absolute after loading; empty = none
    int keep_checkpoints = 3;          // >= 1; newest complete checkpoints kept
    int64_t metrics_every = 10;        // >= 1; steps between metric points
    std::string timeline;              // absolute after loading; empty = no step timeline
    std::map<std::string, std::string> env;  // extra environment for every task
  } trainer;

  // The [model] and [user] tables, re-serialised as TOML text. [model] is
  // validated by the chosen model's own schema; [user] is passed untouched
  // to a custom trainer. In model_toml, string values of keys named `data` or
  // ending in `_path` have been made absolute.
  std::string model_toml;
  std::string user_toml;

  OptimizerConfig dense_optimizer;
  OptimizerConfig sparse_optimizer;

  struct Ps {
    int shards = 0;                  // 0 = auto (one per host)
    int partitions = 0;              // 0 = one per shard, or searched when search_partitions
    bool search_partitions = false;  // partitions = "auto" written: run the partition search
    bool local_aggregation = true;
    std::string value_encoding = "fp32";  // fp32 | fp16
    bool curve = true;  // CURVE on PS sockets when the control plane has a secret
    bool staleness_lr = false;  // async/ssp: a shard scales lr by 1 / max(1, staleness)
    // Rows and gradients through shared memory to shards on the same machine
    // (schemas/ps_wire.md), a region of shared_memory_mb per worker and shard.
    bool shared_memory = false;
    int shared_memory_mb = 64;
  } ps;

  std::vector<VariableOverride> variables;

  // [plan]: the machine's figures for the cost model (core/plan/cost_model.h
  // CostOptions; unset: its defaults; bench/e2e/calibrate.py measures them),
  // and the partition search run when [ps] partitions =
  // "auto" (docs/ARCHITECTURE.md, "The plan"). Each trial attempt runs
  // search_warmup_steps + search_steps steps at one P and is timed by the
  // median of the last search_steps.
  struct Plan {
    std::optional<double> link_bytes_per_s;       // > 0
    std::optional<double> collective_latency_us;  // >= 0
    std::optional<double> ps_rtt_us;              // >= 0
    int search_steps = 20;                        // >= 1
    int search_warmup_steps = 5;                  // >= 0
    int search_min_partitions = 0;                // 0 = auto (the number of PS shards)
    int search_max_partitions = 64;               // >= 1, >= search_min_partitions
    int search_max_trials = 6;                    // >= 3
  } plan;
};

struct JobLoadOptions {
  // Check that paths named in the file (data, checkpoint_dir's parent) exist.
  // The coordinator turns this off: paths are resolved on the hosts that use
  // them, which need not be the coordinator's.
  bool check_paths = true;
};

// Parses and validates `text`. `source` names it in error messages and its
// directory is the base for relative paths ("" or "<submitted>": the current
// directory).
StatusOr<JobConfig> ParseJobConfig(std::string_view text, std::string_view source,
                                   const JobLoadOptions& options = {});

// Reads `path` and calls ParseJobConfig. A file that cannot be read is an
// IO_ERROR naming the path.
StatusOr<JobConfig> LoadJobConfig(const std::string& path, const JobLoadOptions& options = {});

}  // namespace parallax

#endif  // PARALLAX_CORE_CONFIG_JOB_CONFIG_H_
