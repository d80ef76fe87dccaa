// What `parallax plan --json` prints, parsed: the CLI tests' one way to ask
// for a plan.
#ifndef PARALLAX_TESTS_CLI_PLAN_JSON_H_
#define PARALLAX_TESTS_CLI_PLAN_JSON_H_

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/plan_command.h"
#include "parallax/status.h"

namespace parallax::cli {

// The plan of `job` on `workers` workers (0: the job's) on `hosts` hosts.
inline StatusOr<nlohmann::json> PlanJson(const std::string& job, int workers = 0, int hosts = 1) {
  PlanCommandOptions o;
  o.job_file = job;
  o.workers = workers;
  o.hosts = hosts;
  o.json = true;
  std::ostringstream out;
  PX_RETURN_IF_ERROR(RunPlanCommand(o, out));
  return nlohmann::json::parse(out.str());
}

}  // namespace parallax::cli

#endif  // PARALLAX_TESTS_CLI_PLAN_JSON_H_
