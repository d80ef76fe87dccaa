// `parallax plan JOB.toml`: the plan the cost model predicts for a job with a
// built-in model, without running it: the model declares its variables from
// [model] alone and samples its own batches locally (negatives included) to
// measure each sparse variable's α.
#ifndef PARALLAX_CLI_PLAN_COMMAND_H_
#define PARALLAX_CLI_PLAN_COMMAND_H_

#include <ostream>
#include <string>

#include "core/base/status.h"

namespace parallax::cli {

struct PlanCommandOptions {
  std::string job_file;
  int workers = 0;         // 0: the job's [job] workers
  int hosts = 1;           // hosts the workers are spread over
  int sample_batches = 8;  // batches per worker sampled for α
  bool json = false;
};

// Prints the table (or JSON) to `out`. INVALID_ARGUMENT for a custom trainer
// (its variables are known only when it runs) or bad options; the job
// file's and the model's own errors as they report them; NOT_FOUND for
// missing data, saying which command creates it.
Status RunPlanCommand(const PlanCommandOptions& options, std::ostream& out);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_PLAN_COMMAND_H_
