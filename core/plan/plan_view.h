// How a job's plan is shown, by `parallax status` and the coordinator's job
// page alike: the same table of variables (the same columns) and the same
// lines of machine figures, from a parsed JobPlan (core/plan/job_plan.h's
// one reader).
#ifndef PARALLAX_CORE_PLAN_PLAN_VIEW_H_
#define PARALLAX_CORE_PLAN_PLAN_VIEW_H_

#include <string>
#include <vector>

#include "core/plan/cost_model.h"
#include "core/plan/host_figures.h"
#include "core/plan/job_plan.h"

namespace parallax::plan {

// A row per variable: its name, shape, measured α, path, partitions on the
// PS ("-" off it) and the planner's reason.
struct PlanTable {
  std::vector<std::string> columns;  // VARIABLE SHAPE ALPHA PATH PARTITIONS WHY
  std::vector<std::vector<std::string>> rows;
};
PlanTable PlanTableOf(const JobPlan& plan);

// The cost model's machine figures, one line each with its source
// ("link 0.125 GB/s (measured on h1 at ...)").
std::vector<std::string> FigureLines(const CostOptions& cost, const FigureSources& sources);

// The figures `plan` was made with (FigureLines), its predicted
// communication time per step, and a line with the time scales of a plan
// re-planned on evidence.
std::vector<std::string> PlanFigureLines(const JobPlan& plan);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_PLAN_VIEW_H_
