// JobConfig: a job file (job.toml) parsed into types, every key as
// schemas/job.md documents it; the defaults are the values of a key left
// out. The loader (core/config, run by the CLI, the coordinator and every
// rank) fills it, and a rank's Session runs with it (SessionOptions::config):
// custom trainers read their own keys here, [user] as TOML text.
#ifndef PARALLAX_INCLUDE_PARALLAX_JOB_CONFIG_H_
#define PARALLAX_INCLUDE_PARALLAX_JOB_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parallax/settings.h"

namespace parallax {

// A [[variable]] table: overrides the plan for one variable.
struct VariableOverride {
  std::string name;
  std::optional<VariablePath> path;
  std::optional<OptimizerSettings> optimizer;
  std::optional<int> partitions;                // >= 1
  // A dynamic table's settings (include/parallax/settings.h), over those its
  // trainer registered; the plan refuses them for any other variable.
  std::optional<int64_t> admit_after;  // >= 1
  std::optional<int64_t> ttl_steps;    // >= 0
  std::optional<int64_t> max_rows;     // >= 1
  std::optional<EvictionPolicy> eviction;
  bool sets_dynamic() const { return admit_after || ttl_steps || max_rows || eviction; }
};

struct JobConfig {
  // Where the job was loaded from ("<submitted>" for text with no file) and
  // the directory relative paths resolve against.
  std::string source;
  std::string base_dir;

  struct Job {
    std::string name;                 // required, [A-Za-z0-9._-]{1,64}
    int workers = 1;                  // >= 1
    Arch arch = Arch::kHybrid;
    Consistency consistency = Consistency::kSync;
    int staleness = 0;                // >= 0; used by ssp
    int max_restarts = 0;             // >= 0
    // Elastic workers: after a lost host the job goes on with fewer workers,
    // not fewer than min_workers (1..workers; default workers: not elastic),
    // once no replacement slot came within replace_timeout_s (>= 0).
    int min_workers = 1;
    int replace_timeout_s = 60;
    // Steps run in sync mode before `consistency` (async or ssp) applies.
    int64_t sync_warmup_steps = 0;    // >= 0
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

  OptimizerSettings dense_optimizer;   // [optimizer.dense]
  OptimizerSettings sparse_optimizer;  // [optimizer.sparse]
  // [optimizer.*] scale_lr_with_workers: the table's lr is the rate of one
  // worker's batch; an attempt on N workers uses lr × N (the linear scaling
  // rule), so the rate follows the global batch when the worker count changes.
  bool dense_scale_lr_with_workers = false;
  bool sparse_scale_lr_with_workers = false;

  struct Ps {
    int shards = 0;                  // 0 = auto (one per host: a worker host, or a PS host)
    PsHosts hosts = PsHosts::kWorkers;  // where the shards run
    int partitions = 0;              // 0 = one per shard, or searched when search_partitions
    bool search_partitions = false;  // partitions = "auto" written: run the partition search
    bool local_aggregation = true;
    ValueEncoding value_encoding = ValueEncoding::kFp32;
    bool curve = true;  // CURVE on PS sockets when the control plane has a secret
    bool staleness_lr = false;  // async/ssp: a shard scales lr by 1 / max(1, staleness)
    // Rows and gradients through shared memory to shards on the same machine
    // (schemas/ps_wire.md), a region of shared_memory_mb per worker and shard.
    bool shared_memory = false;
    int shared_memory_mb = 64;
    // A rank's pushes of a step, every PS variable and partition, go to
    // each shard as one message (schemas/ps_wire.md, "Batches").
    bool batch = true;
    // async and ssp: each worker keeps the rows it pulled of every sparse PS
    // table and reuses a row while it is at most cache_staleness of its own
    // steps old (schemas/ps_wire.md, "Row cache"), up to cache_rows rows per
    // table. 0: no cache.
    int64_t cache_staleness = 0;
    int64_t cache_rows = 100'000;
    // The cache sums the gradients of its rows and pushes each row's sum
    // when due, instead of pushing every step.
    bool cache_accumulate = false;
    // cache_rule = "version": a row past its cache_staleness steps stays and
    // is checked against its shard's row version instead of pulled again;
    // the shard sends it only if it took more than cache_staleness pushes
    // since (HET's rule; schemas/ps_wire.md, "Row versions").
    bool cache_check_versions = false;
    // Sync jobs: the hot rows of a sparse PS table are replicated on every
    // rank and all-reduced with the dense gradients (core/plan/hot_rows.h).
    // 0: none; kHotRowsAuto: the cost model chooses how many per table; N:
    // the N most frequent sampled rows of every table that was sampled.
    int64_t hot_rows = 0;
    static constexpr int64_t kHotRowsAuto = -1;
  } ps;

  std::vector<VariableOverride> variables;

  // [plan]: the machine's figures for the cost model (core/plan/cost_model.h
  // CostOptions; unset: its defaults; bench/e2e/calibrate.sh measures them),
  // and the partition search run when [ps] partitions =
  // "auto" (docs/ARCHITECTURE.md, "The plan"). Each trial attempt runs
  // search_warmup_steps + search_steps steps at one P and is timed by the
  // median of the last search_steps.
  struct Plan {
    std::optional<double> link_bytes_per_s;       // > 0
    std::optional<double> collective_latency_us;  // >= 0
    std::optional<double> ps_rtt_us;              // >= 0
    std::optional<double> loopback_bytes_per_s;   // > 0
    std::optional<double> shm_bytes_per_s;        // > 0
    int search_steps = 20;                        // >= 1
    int search_warmup_steps = 5;                  // >= 0
    int search_min_partitions = 0;                // 0 = auto (the number of PS shards)
    int search_max_partitions = 64;               // >= 1, >= search_min_partitions
    int search_max_trials = 6;                    // >= 3
    // Re-plan on evidence (coordinator/replan.h): after replan_after_steps
    // steps of an attempt, a measured communication time per step more than
    // replan_factor away from the plan's prediction (either way) over at
    // least replan_window_steps steps records an event; with replan, the job
    // also re-plans once, at its next checkpoint.
    bool replan = false;
    double replan_factor = 2.0;        // > 1
    int64_t replan_after_steps = 100;  // >= 0
    int64_t replan_window_steps = 100; // >= 1
  } plan;
};

}  // namespace parallax

#endif  // PARALLAX_INCLUDE_PARALLAX_JOB_CONFIG_H_
