// The predicted costs of a plan, what `parallax plan` prints: per variable
// its shape, α, the plan's path and the predicted bytes per worker per step
// on every path, and the totals of the plan against forcing one path for
// every variable. Recomputed from the plan alone (it records the cluster and
// the cost model's figures), so it never decides a path of its own.
#ifndef PARALLAX_CORE_PLAN_REPORT_H_
#define PARALLAX_CORE_PLAN_REPORT_H_

#include <string>
#include <vector>

#include "core/plan/cost_model.h"
#include "core/plan/job_plan.h"

namespace parallax::plan {

struct PlannedRow {
  VariableStats var;    // shape, α and partitions as the cost model sees them
  Choice choice;        // the cost model's prediction on every path
  VariablePath path = VariablePath::kAllReduce;  // the plan's path
  std::string reason;   // the plan's reason
  std::vector<uint32_t> partition_shards;  // on the PS: partition -> shard
};

// Bytes per step of a whole plan: through one worker's transport (sent +
// received), and on a host's link (the busier direction, shards included).
// The all-gathered variables of a plan share the step's 2 calls
// (AllGatherSharedCallsOvercount), which totals count once; its variables on
// all-reduce share the step's fusion buckets (AllReduceFusionOvercount),
// which totals count as the trainer forms them.
// PS-only can look cheap per worker — the shards' side of its traffic shows
// on the link. `seconds`: the predicted communication time per step (the sum
// over variables; what the cost model minimises, variable by variable).
struct PlanBytes {
  double worker = 0, link = 0, seconds = 0;
};
struct PlanTotals {
  PlanBytes hybrid, allreduce, allgather, ps;  // `hybrid`: this plan, whatever its arch
  // This plan's bytes by the path they take (index: VariablePath), what the
  // transport counters of a run of it show per path.
  PlanBytes hybrid_by_path[3];
};

struct PlanReport {
  ClusterShape cluster;
  Arch arch = Arch::kHybrid;
  // The all-reduce goes through shared memory among a host's ranks and is
  // hierarchical across hosts (the plan's cost.shm_allreduce, and a host
  // runs several ranks); false: Gloo's ring over every rank.
  bool shm_allreduce = false;
  std::vector<PlannedRow> rows;
  PlanTotals totals;
};

PlanReport BuildPlanReport(const JobPlan& plan);

// A fixed-width table, one line per variable and the totals.
std::string FormatPlanReport(const PlanReport& report);
// The same as JSON text.
std::string PlanReportJson(const PlanReport& report);

// What `var` costs on `path` (a dense variable on PS moves every element
// both ways; without shards, what it would move with one).
PathCost CostOn(const Choice& choice, const VariableStats& var, VariablePath path,
                const ClusterShape& cluster, const CostOptions& options);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_REPORT_H_
