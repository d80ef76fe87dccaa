// JobPlan: the whole-job plan the coordinator stores for an attempt (JSON):
// per variable its path, shape, optimizer and initializer, plus the PS part
// (core/ps/plan.h) under "ps", which is what parallax-ps reads.
//
//   {"version": 1, "arch": "hybrid", "consistency": "sync", "world_size": 2,
//    "variables": [{"id": 0, "name": "emb", "kind": "sparse", "rows": 100,
//                   "dim": 4, "path": "ps", "density": 0.1,
//                   "optimizer": {...}, "init": {...}},
//                  {"id": 1, "name": "w", "kind": "dense", "size": 4,
//                   "path": "allreduce", ...}],
//    "ps": { PsPlan JSON }}
//
// Until the planner lands the rule is BuildRulePlan's: sparse → PS when the
// job has shards (else all-gather), dense → all-reduce; `arch` other than
// hybrid forces one path (dense stays on all-reduce under allgather).
#ifndef PARALLAX_TRAINER_JOB_PLAN_H_
#define PARALLAX_TRAINER_JOB_PLAN_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/optim/optimizer.h"
#include "core/ps/plan.h"
#include "trainer/include/parallax/session.h"

namespace parallax::trainer {

struct PlannedVariable {
  uint32_t id = 0;
  std::string name;
  bool sparse = false;
  size_t size = 0;   // dense: elements
  int64_t rows = 0;  // sparse: rows; dense: rows of DenseRowDim(size)
  uint32_t dim = 0;  // sparse: row length; dense: DenseRowDim(size)
  VariablePath path = VariablePath::kAllReduce;
  double density = -1;  // measured fraction of rows a batch touches; -1: unknown
  std::string reason;   // why the plan chose `path` (one line; empty when forced)
  optim::OptimizerSpec optimizer;
  Initializer init;
};

struct JobPlan {
  std::string arch = "hybrid";
  std::string consistency = "sync";
  int world_size = 1;
  std::vector<PlannedVariable> variables;  // index == id
  ps::PsPlan ps;                           // only the variables on the PS path
  // The ranks of a host sum their sparse PS gradients and the host's first
  // rank pushes them: ps.num_contributors is the number of hosts.
  bool local_aggregation = false;
  bool has_ps() const { return !ps.variables.empty(); }
};

// What a rank registered, before it has a path.
struct Registration {
  PlannedVariable var;
  bool explicit_values = false;  // dense with initial_values
  // Sparse: how often SampleIds saw each row (rank 0's samples), for placing
  // the variable's PS partitions on shards by expected load.
  std::unordered_map<int64_t, uint32_t> row_samples;
};

// The rule-based plan. INVALID_ARGUMENT for an unknown arch, FAILED_PRECONDITION
// for arch = ps without shards or explicit dense values on the PS path.
StatusOr<JobPlan> BuildRulePlan(const SessionOptions& options,
                                const std::vector<Registration>& registrations);

std::string JobPlanToJson(const JobPlan& plan);
StatusOr<JobPlan> ParseJobPlan(std::string_view json);

// FAILED_PRECONDITION naming the first variable whose name, kind or shape
// differs between this rank's registrations and the plan.
Status CheckRegistrationsMatch(const JobPlan& plan, const std::vector<Registration>& registrations,
                               int rank);

StatusOr<optim::OptimizerSpec> ToOptimizerSpec(const OptimizerConfig& config);
ps::InitSpec ToPsInit(const Initializer& init);
VariablePath ParsePath(std::string_view name, bool* ok);

}  // namespace parallax::trainer

#endif  // PARALLAX_TRAINER_JOB_PLAN_H_
