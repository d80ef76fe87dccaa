#include "cli/plan_command.h"

#include <algorithm>
#include <map>
#include <optional>

#include "cli/job_file.h"
#include "core/config/job_config.h"
#include "core/plan/report.h"
#include "core/plan/sparsity.h"
#include "trainer/models/model.h"
#include "trainer/models/model_data.h"

namespace parallax::cli {
namespace {

std::optional<plan::Path> ParsePath(const std::string& name) {
  if (name == "allreduce") return plan::Path::kAllReduce;
  if (name == "allgather") return plan::Path::kAllGather;
  if (name == "ps") return plan::Path::kPs;
  return std::nullopt;
}

// The ids every sparse variable's batches touch, for `workers_per_host`
// ranks of one host, interleaved step by step: [r0 b0, r1 b0, ..., r0 b1, ...]
// (what MeasureSparsity takes).
StatusOr<std::map<std::string, std::vector<std::vector<int64_t>>>> SampleHost(
    const JobConfig& job, int world_size, int workers_per_host, int batches) {
  std::map<std::string, std::vector<std::vector<int64_t>>> out;
  std::vector<std::map<std::string, std::vector<std::vector<int64_t>>>> per_rank;
  for (int r = 0; r < workers_per_host; ++r) {
    models::ModelOptions mo;
    mo.rank = r;
    mo.world_size = world_size;
    mo.batch_size = job.trainer.batch_size;
    mo.steps = job.trainer.steps;
    PX_ASSIGN_OR_RETURN(auto model, models::CreateModel(job.trainer.model, job.model_toml, mo));
    PX_ASSIGN_OR_RETURN(models::ModelData data, models::OpenModelData(*model, mo));
    PX_RETURN_IF_ERROR(model->SetData(std::move(data)));
    PX_ASSIGN_OR_RETURN(auto ids, model->SampleIds(batches));
    per_rank.push_back(std::move(ids));
  }
  for (const auto& [name, unused] : per_rank.front()) {
    auto& all = out[name];
    for (int b = 0; b < batches; ++b) {
      for (const auto& rank : per_rank) {
        const auto it = rank.find(name);
        if (it != rank.end() && b < static_cast<int>(it->second.size())) all.push_back(it->second[b]);
      }
    }
  }
  return out;
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
  plan::ClusterShape cluster{.workers = workers,
                             .hosts = hosts,
                             .shards = job.ps.shards > 0 ? job.ps.shards : hosts};
  if (job.job.arch == "allreduce" || job.job.arch == "allgather") cluster.shards = 0;
  plan::CostOptions cost;
  cost.value_bytes = job.ps.value_encoding == "fp16" ? 2 : 4;
  cost.ps_shared_memory = job.ps.shared_memory;
  // The machine's measured figures ([plan]), else the cost model's defaults.
  if (job.plan.link_bytes_per_s) cost.bandwidth_bytes_per_s = *job.plan.link_bytes_per_s;
  if (job.plan.collective_latency_us) cost.collective_latency_s = *job.plan.collective_latency_us * 1e-6;
  if (job.plan.ps_rtt_us) cost.ps_rtt_s = *job.plan.ps_rtt_us * 1e-6;
  // Trainer ranks push once per worker today (no local aggregation in the
  // Session), so the prediction must not count on it.
  cost.local_aggregation = false;

  models::ModelOptions mo;
  mo.world_size = workers;
  mo.batch_size = job.trainer.batch_size;
  PX_ASSIGN_OR_RETURN(auto model, models::CreateModel(job.trainer.model, job.model_toml, mo));
  const int per_host = cluster.workers_per_host();
  PX_ASSIGN_OR_RETURN(auto samples,
                      SampleHost(job, workers, per_host, std::max(1, options.sample_batches)));

  std::vector<plan::VariableStats> vars;
  std::vector<std::optional<plan::Path>> overrides;
  for (const models::VariableSpec& v : model->Variables()) {
    plan::VariableStats s;
    s.name = v.name;
    s.sparse = v.sparse;
    s.rows = v.sparse ? v.rows : 1;
    s.dim = v.sparse ? v.dim : static_cast<int64_t>(v.size);
    s.partitions = std::max(1, job.ps.partitions > 0 ? job.ps.partitions : cluster.shards);
    std::optional<plan::Path> over;
    for (const VariableOverride& o : job.variables) {
      if (o.name != v.name) continue;
      if (o.path) over = ParsePath(*o.path);
      if (o.partitions) s.partitions = *o.partitions;
    }
    if (v.sparse) {
      const auto it = samples.find(v.name);
      if (it != samples.end()) {
        plan::Sparsity sp = plan::MeasureSparsity(it->second, v.rows, per_host);
        s.alpha = sp.alpha;
        s.alpha_host = sp.alpha_host;
      }
    }
    vars.push_back(std::move(s));
    overrides.push_back(over);
  }
  for (const VariableOverride& o : job.variables) {
    const bool known = std::any_of(vars.begin(), vars.end(),
                                   [&](const plan::VariableStats& v) { return v.name == o.name; });
    if (!known) {
      std::string names;
      for (const auto& v : vars) names += (names.empty() ? "" : ", ") + v.name;
      return InvalidArgument("[[variable]] \"" + o.name + "\" in " + options.job_file +
                             " names no variable of model '" + job.trainer.model + "' (" + names +
                             ")");
    }
  }
  plan::PlanReport report = plan::BuildPlanReport(vars, cluster, cost, job.job.arch, overrides);
  if (options.json) {
    out << plan::PlanReportJson(report) << "\n";
    return Status::Ok();
  }
  out << "job '" << job.job.name << "', model '" << job.trainer.model << "': α measured over "
      << std::max(1, options.sample_batches) << " batches of " << job.trainer.batch_size
      << " per worker\n";
  out << "link " << cost.bandwidth_bytes_per_s / 1e9 << " GB/s, collective call "
      << cost.collective_latency_s * 1e6 << " us, PS round trip " << cost.ps_rtt_s * 1e6
      << " us (" << (job.plan.link_bytes_per_s || job.plan.collective_latency_us || job.plan.ps_rtt_us
                         ? "the job's [plan] table; defaults for keys it leaves out"
                         : "defaults: measure this machine with bench/e2e/calibrate.py and put them in [plan]")
      << ")\n";
  out << plan::FormatPlanReport(report);
  if (job.ps.search_partitions) {
    out << "partitions = \"auto\": the table uses one partition per shard; the job's first "
           "attempts are trials that search P (docs/ARCHITECTURE.md, \"The plan\")\n";
  }
  return Status::Ok();
}

}  // namespace parallax::cli
