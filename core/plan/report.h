// The whole-job view of the cost model that `parallax plan` prints: per
// variable its shape, α, chosen path and the predicted bytes per worker per
// step on every path, and the totals of the hybrid plan against forcing one
// path for every variable.
#ifndef PARALLAX_CORE_PLAN_REPORT_H_
#define PARALLAX_CORE_PLAN_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "core/plan/cost_model.h"

namespace parallax::plan {

struct PlannedRow {
  VariableStats var;
  Choice choice;
  Path path = Path::kAllReduce;  // the choice, or the forced / overridden path
  std::string note;              // why, when not the cost model's choice
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
  // This plan's bytes by the path they take (index: Path), what the
  // transport counters of a run of it show per path.
  PlanBytes hybrid_by_path[3];
};

struct PlanReport {
  ClusterShape cluster;
  std::string arch;
  std::vector<PlannedRow> rows;
  PlanTotals totals;
};

// `forced` is the path of every variable under arch = allreduce | allgather
// | ps (a dense variable has no all-gather form and stays on all-reduce);
// `overrides[i]`, when set, is variable i's [[variable]] path.
PlanReport BuildPlanReport(const std::vector<VariableStats>& vars, const ClusterShape& cluster,
                           const CostOptions& options, const std::string& arch,
                           const std::vector<std::optional<Path>>& overrides = {});

// A fixed-width table, one line per variable and the totals.
std::string FormatPlanReport(const PlanReport& report);
// The same as JSON text.
std::string PlanReportJson(const PlanReport& report);

// What `var` costs on `path` (a dense variable on PS moves every element
// both ways; without shards, what it would move with one).
PathCost CostOn(const Choice& choice, const VariableStats& var, Path path,
                const ClusterShape& cluster, const CostOptions& options);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_REPORT_H_
