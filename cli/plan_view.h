// How the CLI shows a job's stored plan (the JSON trainer rank 0 puts with
// the coordinator, core/plan/job_plan.h).
#ifndef PARALLAX_CLI_PLAN_VIEW_H_
#define PARALLAX_CLI_PLAN_VIEW_H_

#include <string>
#include <vector>

#include "core/plan/cost_model.h"
#include "core/plan/host_figures.h"
#include "parallax/status.h"

namespace parallax::cli {

// Rows of a table: a header, then per variable its name, shape, measured
// α, path, partitions and the planner's reason. INVALID_ARGUMENT for text
// that is not a plan.
StatusOr<std::vector<std::vector<std::string>>> PlanTableRows(const std::string& plan_json);

// The cost model's machine figures, one line each with its source.
std::vector<std::string> FigureLines(const plan::CostOptions& cost,
                                     const plan::FigureSources& sources);

// The machine figures the plan was made with, one line each with its source
// ("link 0.125 GB/s (measured on h1 at ...)"), and a line with the time
// scales of a plan re-planned on evidence; none for an invalid plan.
std::vector<std::string> PlanFigureLines(const std::string& plan_json);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_PLAN_VIEW_H_
