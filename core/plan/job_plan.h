// JobPlan: the plan of one attempt of a job, built once by BuildPlan
// (core/plan/plan_builder.h) on the trainer's rank 0 and stored by the
// coordinator as JSON; every rank, every PS shard, the coordinator and the
// CLI read it back with ParseJobPlan, never by JSON key. Per variable: its
// shape, the path it takes and why, its measured density, optimizer and
// initializer; for the PS part (core/ps/plan.h, what workers and shards
// agree on): partitions and the partition → shard placement. The plan also
// records the cluster shape and the cost model's figures it was made with,
// so its predicted costs (core/plan/report.h) can be recomputed anywhere.
//
//   {"version": 3, "arch": "hybrid", "consistency": "sync",
//    "cluster": {"workers": 2, "hosts": 1, "shards": 1},
//    "cost": {"link_bytes_per_s": 3.5e8, "collective_latency_s": 0.009, ...},
//    "local_aggregation": false, "predicted_comm_s": 0.0123,
//    "variables": [{"id": 0, "name": "emb", "kind": "sparse", "rows": 100,
//                   "dim": 4, "path": "ps", "density": 0.1, "density_host": 0.18,
//                   "reason": "...", "optimizer": {...}, "init": {...},
//                   "hot_rows": [0, 7], "hot_rows_share": 0.4},
//                  {"id": 1, "name": "w", "kind": "dense", "size": 4,
//                   "rows": 1, "dim": 4, "path": "allreduce", ...}],
//    "ps": {"staleness": 0, "sync_warmup_steps": 0, "num_workers": 2,
//           "num_contributors": 2, "sync_reduce": "mean"|"sum", "num_shards": 1,
//           "value_encoding": "fp32"|"fp16", "staleness_lr": false,
//           "nonfinite": "reject"|"count",
//           "variables": [{"id": 0, "scheme": "hash"|"range",
//                          "partition_shards": [0, 0]}]}}
// Each field is written once: a PS variable's name, shape, partitions,
// optimizer and initializer, and the consistency, are the plan's; "ps" adds
// only what workers and shards need beyond them, and ParseJobPlan derives
// the PsPlan from both. Version 2 plans (which repeated them under "ps")
// read the same.
#ifndef PARALLAX_CORE_PLAN_JOB_PLAN_H_
#define PARALLAX_CORE_PLAN_JOB_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/plan/cost_model.h"
#include "core/plan/host_figures.h"
#include "core/ps/plan.h"
#include "parallax/settings.h"
#include "parallax/status.h"

namespace parallax::plan {

struct PlannedVariable {
  uint32_t id = 0;
  std::string name;
  bool sparse = false;
  size_t size = 0;   // dense: elements
  int64_t rows = 0;  // sparse: rows; dense: rows of DenseRowDim(size) elements
  uint32_t dim = 0;  // sparse: row length; dense: DenseRowDim(size)
  VariablePath path = VariablePath::kAllReduce;
  // Measured fraction of rows one rank's batch touches, and a host's ranks'
  // batches together (MeasureSparsity); -1: not measured (dense, or no
  // SampleIds).
  double density = -1;
  double density_host = -1;
  // A dynamic table (no row count, so no density): the mean distinct ids of
  // one rank's sampled batch; -1: not measured.
  double ids_per_step = -1;
  // PS partitions: the variable's on the PS path (as ps.variables holds),
  // else what it would have there (what the cost model assumed).
  uint32_t partitions = 1;
  std::string reason;  // why `path`, one line (the cost model, the arch, [[variable]])
  OptimizerSettings optimizer;
  Initializer init;
  // A dynamic table (Session::RegisterDynamic): rows is 0, the path is
  // always the PS. Written as "dynamic": {"admit_after": 1, "ttl_steps": 0,
  // "max_rows": 0, "eviction": "lru"|"lfu"} and, when there are any,
  // "never_admit": [ids]; absent for other variables.
  std::optional<DynamicTableSettings> dynamic;
  // A sparse PS table's hot rows (core/plan/hot_rows.h), ascending: every
  // rank keeps them and all-reduces their gradients as one dense block with
  // the dense variables; the PS serves the others. Written as "hot_rows":
  // [ids], absent when there are none.
  std::vector<int64_t> hot_rows;
  // The share of a worker's distinct rows of the table a step that the hot
  // rows are expected to be (HotRowsChoice::share): the PS rows they take
  // off, what the plan's predicted cost counts (core/plan/report.h).
  // "hot_rows_share", written with "hot_rows".
  double hot_share = 0;
};

struct JobPlan {
  Arch arch = Arch::kHybrid;
  Consistency consistency = Consistency::kSync;
  ClusterShape cluster;  // workers, hosts and PS shards of the attempt
  CostOptions cost;      // the figures the cost model decided with
  FigureSources figures;  // where cost's machine figures came from
  // The ranks of a host sum their sparse PS gradients and the host's first
  // rank pushes them: ps.num_contributors is the number of hosts.
  bool local_aggregation = false;
  // The cost model's communication time per step of this plan, as made
  // (core/plan/report.h: the plan's total): what a run's measured dense +
  // sparse wait per step is compared with. 0 in plans stored before it was
  // recorded.
  double predicted_comm_s = 0;
  std::vector<PlannedVariable> variables;  // index == id
  ps::PsPlan ps;                           // only the variables on the PS path

  int world_size() const { return cluster.workers; }
  bool has_ps() const { return !ps.variables.empty(); }
  // Partitions of `var` on the PS (0 when it is not on the PS path).
  uint32_t PartitionsOf(uint32_t var) const;
};

// What the cost model sees of a planned variable split into `partitions`
// (its own, once the plan is made).
VariableStats CostInputs(const PlannedVariable& v, uint32_t partitions);
inline VariableStats CostInputs(const PlannedVariable& v) { return CostInputs(v, v.partitions); }

std::string JobPlanToJson(const JobPlan& plan);

// A dynamic table's settings as the plan writes them under "dynamic", and
// as `parallax plan --json` shows them: {"admit_after": 1, "ttl_steps": 0,
// "max_rows": 0, "eviction": "lru"}.
nlohmann::json DynamicSettingsToJson(const DynamicTableSettings& d);

// A plan of PS variables only (arch "ps"), for shards run without a
// trainer: tests and benchmarks write JobPlanToJson of it for parallax-ps
// --plan. REQUIRES: the variables' ids are 0, 1, ... in order.
JobPlan JobPlanOfPs(const ps::PsPlan& ps);
// INVALID_ARGUMENT naming the key that is missing or malformed.
StatusOr<JobPlan> ParseJobPlan(std::string_view json);

// FAILED_PRECONDITION naming the first variable whose name, kind or shape
// differs between `registered` (what `rank` registered, in order) and the
// plan made from rank 0's registrations.
Status CheckRegistrationsMatch(const JobPlan& plan,
                               const std::vector<PlannedVariable>& registered, int rank);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_JOB_PLAN_H_
