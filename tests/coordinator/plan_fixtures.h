// Plans for coordinator tests that need one stored: a sparse table "name" of
// `rows` × `dim` on the PS in `partitions` partitions, all on shard 0.
#ifndef PARALLAX_TESTS_COORDINATOR_PLAN_FIXTURES_H_
#define PARALLAX_TESTS_COORDINATOR_PLAN_FIXTURES_H_

#include <string>

#include "core/plan/job_plan.h"

namespace parallax::testing {

inline plan::JobPlan OnePsTablePlan(const std::string& name, int64_t rows, uint32_t dim,
                                    uint32_t partitions = 1) {
  plan::PlannedVariable v;
  v.name = name;
  v.sparse = true;
  v.rows = rows;
  v.dim = dim;
  v.path = VariablePath::kPs;
  v.partitions = partitions;
  ps::VariableSpec spec;
  spec.name = name;
  spec.rows = rows;
  spec.dim = dim;
  spec.partitions = partitions;
  spec.partition_shards.assign(partitions, 0);
  plan::JobPlan plan;
  plan.variables.push_back(v);
  plan.ps.variables.push_back(spec);
  return plan;
}

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_COORDINATOR_PLAN_FIXTURES_H_
