// The predicted cost of a whole plan, not variable by variable: what the
// planner minimises and what `parallax plan` prints. Variables of a plan
// share costs that no single variable's cost shows: the all-gathered tables
// share the step's 2 collective calls, the PS variables the step's pull and
// push round trips (their requests are in flight together), the all-reduced gradients share the
// trainer's fusion buckets (one call per bucket), and local aggregation of
// PS gradients applies to every PS variable or to none (a dense variable on
// the PS turns it off).
#ifndef PARALLAX_CORE_PLAN_PLAN_COST_H_
#define PARALLAX_CORE_PLAN_PLAN_COST_H_

#include <span>
#include <string>
#include <vector>

#include "core/plan/cost_model.h"
#include "parallax/settings.h"

namespace parallax::plan {

// Bytes per step of a whole plan: through one worker's transport (sent +
// received), and on a host's link (the busier direction, shards included);
// `seconds`: the predicted communication time per step. PS-only can look
// cheap per worker — the shards' side of its traffic shows on the link.
struct PlanBytes {
  double worker = 0, link = 0, seconds = 0;
  bool feasible = true;  // false: some variable's path is not possible (why_not says which)
  std::string why_not;
};

// A variable as the cost model sees it, with its predicted cost on every path.
struct CostedVariable {
  VariableStats stats;
  Choice choice;  // ChoosePath(stats, cluster, options)
};

// What variable `var` costs on `path` in a plan, with its PS cost locally
// aggregated or not (a dense variable on the PS path has no all-gather form:
// its all-reduce cost; without shards, what it would move with one).
PathCost CostOn(const CostedVariable& var, VariablePath path, bool aggregate,
                const ClusterShape& cluster, const CostOptions& options);

// The cost of the plan in which variable i takes paths[i] (REQUIRES: as many
// paths as variables, in registration order). With `by_path` (3 entries,
// index: VariablePath), also the same split by the path the bytes take.
PlanBytes PlanCost(std::span<const CostedVariable> vars, std::span<const VariablePath> paths,
                   const ClusterShape& cluster, const CostOptions& options,
                   PlanBytes* by_path = nullptr);

// Every variable on `path` (a dense variable stays on all-reduce under
// all-gather): the paths of the single-path plans.
std::vector<VariablePath> AllOn(std::span<const CostedVariable> vars, VariablePath path);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_PLAN_COST_H_
