// `parallax plan JOB.toml`: the plan of a job with a built-in model, without
// running it. The model registers its variables and samples rank 0's own
// batches locally (negatives included), as parallax-trainer's rank 0 does,
// and core/plan's BuildPlan makes the plan from them: the plan the job
// records on a cluster of that shape.
#ifndef PARALLAX_CLI_PLAN_COMMAND_H_
#define PARALLAX_CLI_PLAN_COMMAND_H_

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/plan/host_figures.h"
#include "core/plan/straggler.h"
#include "parallax/status.h"

namespace parallax::cli {

struct PlanCommandOptions {
  std::string job_file;
  int workers = 0;         // 0: the job's [job] workers
  int hosts = 1;           // hosts the workers are spread over
  int ps_hosts = 0;        // [ps] hosts = "ps": PS hosts (0: as many as `hosts`)
  int sample_batches = 0;  // rank 0's batches sampled for α; 0: what the job samples
  bool json = false;
  // Probe this machine (core/comm/host_probe.h) and plan with its figures.
  bool measure = false;
  // Figures measured elsewhere (tests; an agent's), used as --measure's are.
  std::vector<plan::HostFigures> host_figures;
  // What an earlier sync job of N workers measured of the wait for its
  // slowest rank (`--from-coordinator`), asked once the worker count is
  // known; unset: none.
  std::function<std::optional<plan::MeasuredStraggler>(int workers)> straggler_of;
};

// Prints the table (or JSON) to `out`. INVALID_ARGUMENT for a custom trainer
// (its variables are known only when it runs) or bad options; the job
// file's and the model's own errors as they report them; NOT_FOUND for
// missing data, saying which command creates it.
Status RunPlanCommand(const PlanCommandOptions& options, std::ostream& out);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_PLAN_COMMAND_H_
