#include "cli/plan_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "cli/job_file.h"
#include "core/plan/plan_view.h"
#include "core/comm/host_probe.h"
#include "core/config/job_config.h"
#include "core/plan/plan_builder.h"
#include "core/plan/report.h"
#include "trainer/models/model.h"
#include "trainer/models/model_data.h"
#include "trainer/variable_registry.h"

namespace parallax::cli {
namespace {

// What rank 0 of the job would register and sample: the same model options
// parallax-trainer gives it, its variables and kPlanSampleBatches of its own
// batches (or `sample_batches`).
StatusOr<std::vector<plan::VariableInput>> RankZeroInputs(const JobConfig& job, int workers,
                                                          int sample_batches) {
  models::ModelOptions mo;
  mo.rank = 0;
  mo.world_size = workers;
  mo.batch_size = job.trainer.batch_size;
  mo.steps = job.trainer.steps;
  PX_ASSIGN_OR_RETURN(auto model, models::CreateModel(job.trainer.model, job.model_toml, mo));
  PX_ASSIGN_OR_RETURN(models::ModelData data, models::OpenModelData(*model, mo));
  PX_RETURN_IF_ERROR(model->SetData(std::move(data)));
  trainer::VariableRegistry registry(job);
  PX_RETURN_IF_ERROR(model->RegisterWith(&registry, sample_batches));
  return registry.inputs();
}

void PrintHeader(const JobConfig& job, const plan::JobPlan& plan, int sample_batches,
                 std::ostream& out) {
  out << "job '" << job.job.name << "', model '" << job.trainer.model << "': α measured over "
      << sample_batches << " batches of " << job.trainer.batch_size << " of rank 0\n";
  const plan::FigureSources& f = plan.figures;
  out << "machine figures:\n";
  for (const std::string& line : plan::FigureLines(plan.cost, f)) out << "  " << line << "\n";
  for (const std::string* s : {&f.link, &f.collective, &f.ps_rtt}) {
    if (*s == "default") {
      out << "(defaults are a development machine's: --measure probes this machine, "
             "--from-coordinator takes what the agents and the last job's trainers measured, "
             "and bench/e2e/calibrate.sh measures all of them for the job's [plan] table)\n";
      break;
    }
  }
  if (plan::SharedMemoryAllReduce(plan.cluster, plan.cost)) {
    out << "all-reduce: through shared memory among a host's " << plan.cluster.workers_per_host()
        << " ranks";
    if (plan.cluster.hosts > 1) {
      out << ", hierarchical across the " << plan.cluster.hosts
          << " hosts (a ring of their first ranks: a host's link carries one rank's bytes)";
    }
    out << "\n";
  }
  if (plan.local_aggregation) {
    out << "local aggregation: the ranks of a host sum their PS gradients and push once\n";
  }
}

// This machine's loopback and shared-memory rates (core/comm/host_probe.h).
StatusOr<plan::HostFigures> MeasureThisHost() {
  PX_ASSIGN_OR_RETURN(comm::HostProbe probe, comm::ProbeHost({}));
  plan::HostFigures h;
  char name[256] = "this machine";
  ::gethostname(name, sizeof(name) - 1);
  h.host = name;
  h.measured_unix_s = std::time(nullptr);
  h.loopback_bytes_per_s = probe.loopback_bytes_per_s;
  h.shm_bytes_per_s = probe.shm_bytes_per_s;
  return h;
}

}  // namespace

Status RunPlanCommand(const PlanCommandOptions& options, std::ostream& out) {
  PX_ASSIGN_OR_RETURN(std::string text, ReadJobFile(options.job_file));
  PX_ASSIGN_OR_RETURN(JobConfig job, ParseJobConfig(text, options.job_file));
  if (job.trainer.model.empty()) {
    return InvalidArgument(
        "job '" + job.job.name +
        "' runs a custom trainer ([trainer] command): its variables are known only when rank 0 "
        "registers them; submit it and `parallax status JOB` shows the plan it got");
  }
  const int workers = options.workers > 0 ? options.workers : job.job.workers;
  const int hosts = std::max(1, options.hosts);
  if (hosts > workers) {
    return InvalidArgument("--hosts " + std::to_string(hosts) + " is more than the " +
                           std::to_string(workers) + " workers");
  }
  const int sample_batches = options.sample_batches > 0
                                 ? options.sample_batches
                                 : models::PlanSampleBatches(job.ps.hot_rows);
  plan::PlanInputs inputs;
  // Shards "auto" are one per host of theirs: PS hosts under [ps] hosts = "ps".
  const bool on_ps_hosts = job.ps.hosts == PsHosts::kPs && options.ps_hosts > 0;
  const int shards = plan::PsShards(job, on_ps_hosts ? options.ps_hosts : hosts);
  inputs.cluster = {.workers = workers,
                    .hosts = hosts,
                    .shards = shards,
                    .ps_hosts = plan::PsHostsOf(job, shards)};
  PX_ASSIGN_OR_RETURN(inputs.variables, RankZeroInputs(job, workers, sample_batches));
  inputs.host_figures = options.host_figures;
  if (options.straggler_of) inputs.straggler = options.straggler_of(workers);
  if (options.measure) {
    PX_ASSIGN_OR_RETURN(plan::HostFigures here, MeasureThisHost());
    inputs.host_figures.push_back(here);
  }
  StatusOr<plan::JobPlan> plan = plan::BuildPlan(job, inputs);
  if (!plan.ok()) return plan.status().WithContext(options.job_file);
  const plan::PlanReport report = plan::BuildPlanReport(*plan);
  if (options.json) {
    out << plan::PlanReportJson(report) << "\n";
    return Status::Ok();
  }
  PrintHeader(job, *plan, sample_batches, out);
  out << plan::FormatPlanReport(report);
  if (job.ps.search_partitions) {
    out << "partitions = \"auto\": the table uses one partition per shard; the job's first "
           "attempts are trials that search P (docs/ARCHITECTURE.md, \"The plan\")\n";
  }
  return Status::Ok();
}

}  // namespace parallax::cli
