#include "core/plan/plan_cost.h"

#include <algorithm>

namespace parallax::plan {

PathCost CostOn(const CostedVariable& var, VariablePath path, bool aggregate,
                const ClusterShape& cluster, const CostOptions& options) {
  const Choice& choice = var.choice;
  switch (path) {
    case VariablePath::kAllReduce:
      return choice.allreduce;
    case VariablePath::kAllGather:
      return var.stats.sparse ? choice.allgather : choice.allreduce;
    case VariablePath::kPs: {
      if (choice.ps.feasible) return aggregate ? choice.cost(VariablePath::kPs) : choice.ps;
      ClusterShape one = cluster;
      one.shards = 1;
      PathCost c = PsCost(var.stats, one, options, aggregate && options.local_aggregation);
      c.seconds *= TimeScale(VariablePath::kPs, options);
      return c;
    }
  }
  return {};
}

std::vector<VariablePath> AllOn(std::span<const CostedVariable> vars, VariablePath path) {
  std::vector<VariablePath> paths;
  for (const CostedVariable& v : vars) {
    paths.push_back(!v.stats.sparse && path == VariablePath::kAllGather ? VariablePath::kAllReduce
                                                                        : path);
  }
  return paths;
}

PlanBytes PlanCost(std::span<const CostedVariable> vars, std::span<const VariablePath> paths,
                   const ClusterShape& cluster, const CostOptions& options, PlanBytes* by_path) {
  PlanBytes total;
  bool dense_on_ps = false;
  for (size_t i = 0; i < vars.size(); ++i) {
    dense_on_ps |= !vars[i].stats.sparse && paths[i] == VariablePath::kPs;
  }
  const bool aggregate = options.local_aggregation && !dense_on_ps;
  auto add = [](PlanBytes* sum, const PathCost& c, double sign) {
    sum->worker += sign * c.bytes;
    sum->link += sign * c.link_bytes;
    sum->seconds += sign * c.seconds;
  };
  int gathered = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    const PathCost c = CostOn(vars[i], paths[i], aggregate, cluster, options);
    if (!c.feasible && total.feasible) {
      total.feasible = false;
      total.why_not = "\"" + vars[i].stats.name + "\" on " + VariablePathName(paths[i]) + ": " +
                      c.why_not;
    }
    add(&total, c, 1);
    if (by_path) add(&by_path[static_cast<int>(paths[i])], c, 1);
    gathered += vars[i].stats.sparse && paths[i] == VariablePath::kAllGather;
  }
  // The all-gathered tables share the step's 2 calls, which each table's
  // own cost charged it in full.
  PathCost shared = AllGatherSharedCallsOvercount(gathered, cluster, options);
  shared.seconds *= TimeScale(VariablePath::kAllGather, options);
  add(&total, shared, -1);
  if (by_path) add(&by_path[static_cast<int>(VariablePath::kAllGather)], shared, -1);
  // The PS variables share the step's round trips: the session issues every
  // PS variable's pull (and then push) before it waits on any
  // (trainer/sparse_sync.h), so a step waits one pull and one push round
  // trip (a dense variable's push-pull is one, beside the pushes), where
  // each variable's own cost charged it its requests in full.
  double ps_ops = 0;
  bool ps_sparse = false, ps_any = false;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (paths[i] != VariablePath::kPs) continue;
    ps_ops += vars[i].stats.sparse ? 2 : 1;
    ps_sparse |= vars[i].stats.sparse;
    ps_any = true;
  }
  PathCost ps_shared;
  ps_shared.operations = ps_any ? ps_ops - (ps_sparse ? 2 : 1) : 0;
  ps_shared.seconds =
      ps_shared.operations * options.ps_rtt_s * TimeScale(VariablePath::kPs, options);
  add(&total, ps_shared, -1);
  if (by_path) add(&by_path[static_cast<int>(VariablePath::kPs)], ps_shared, -1);
  // The all-reduced gradients share the fusion buckets: dense gradients
  // first, then the whole-table ones of sparse variables, in registration
  // order, as the session registers them.
  std::vector<int64_t> elements;
  for (bool sparse_pass : {false, true}) {
    for (size_t i = 0; i < vars.size(); ++i) {
      if (vars[i].stats.sparse == sparse_pass && paths[i] == VariablePath::kAllReduce) {
        elements.push_back(vars[i].stats.elements());
      }
    }
  }
  PathCost fused = AllReduceFusionOvercount(elements, cluster, options);
  fused.seconds *= TimeScale(VariablePath::kAllReduce, options);
  add(&total, fused, -1);
  if (by_path) add(&by_path[static_cast<int>(VariablePath::kAllReduce)], fused, -1);
  return total;
}

}  // namespace parallax::plan
