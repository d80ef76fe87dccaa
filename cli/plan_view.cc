#include "cli/plan_view.h"

#include <cstdio>

#include "core/plan/job_plan.h"

namespace parallax::cli {

StatusOr<std::vector<std::vector<std::string>>> PlanTableRows(const std::string& plan_json) {
  StatusOr<plan::JobPlan> plan = plan::ParseJobPlan(plan_json);
  if (!plan.ok()) {
    return InvalidArgument("the stored plan is not a valid plan: " + plan.status().message());
  }
  std::vector<std::vector<std::string>> rows = {
      {"VARIABLE", "SHAPE", "ALPHA", "PATH", "PARTITIONS", "WHY"}};
  for (const plan::PlannedVariable& v : plan->variables) {
    const std::string shape =
        v.sparse ? std::to_string(v.rows) + "x" + std::to_string(v.dim) : std::to_string(v.size);
    std::string alpha = "dense";
    if (v.sparse) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.4g", v.density);
      alpha = v.density < 0 ? "?" : buf;
    }
    const uint32_t partitions = plan->PartitionsOf(v.id);
    rows.push_back({v.name, shape, alpha, VariablePathName(v.path),
                    partitions == 0 ? "-" : std::to_string(partitions), v.reason});
  }
  return rows;
}

}  // namespace parallax::cli
