// The predicted costs of a plan, what `parallax plan` prints: per variable
// its shape, α, the plan's path and the predicted bytes per worker per step
// on every path, and the totals of the plan against forcing one path for
// every variable. Recomputed from the plan alone (it records the cluster and
// the cost model's figures), so it never decides a path of its own.
#ifndef PARALLAX_CORE_PLAN_REPORT_H_
#define PARALLAX_CORE_PLAN_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "core/plan/cost_model.h"
#include "core/plan/host_figures.h"
#include "core/plan/job_plan.h"
#include "core/plan/plan_cost.h"

namespace parallax::plan {

struct PlannedRow {
  VariableStats var;    // shape, α and partitions as the cost model sees them
  Choice choice;        // the cost model's prediction on every path
  VariablePath path = VariablePath::kAllReduce;  // the plan's path
  std::string reason;   // the plan's reason
  std::vector<uint32_t> partition_shards;  // on the PS: partition -> shard
  std::optional<DynamicTableSettings> dynamic;  // a dynamic table's settings
  size_t hot_rows = 0;    // [ps] hot_rows: how many the plan keeps on every rank
  double hot_share = 0;   // the share of a step's rows they are expected to be
};

// The plan's predicted cost (core/plan/plan_cost.h) and that of forcing one
// path for every variable.
struct PlanTotals {
  // `hybrid`: this plan, whatever its arch, with its hot rows (a PS table's
  // rows a step pulls and pushes fewer by their share, their block of
  // H × (dim + 1) floats all-reduced with the dense gradients); the others
  // without hot rows.
  PlanBytes hybrid, allreduce, allgather, ps;
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
  CostOptions cost;       // the figures the plan was made with
  FigureSources figures;  // and where they came from
  std::vector<PlannedRow> rows;
  PlanTotals totals;
};

PlanReport BuildPlanReport(const JobPlan& plan);

// A fixed-width table, one line per variable and the totals.
std::string FormatPlanReport(const PlanReport& report);
// The same as JSON text.
std::string PlanReportJson(const PlanReport& report);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_REPORT_H_
