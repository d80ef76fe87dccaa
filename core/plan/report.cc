#include "core/plan/report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/base/format_bytes.h"
#include "core/plan/hot_rows.h"

namespace parallax::plan {
namespace {

std::string Shape(const VariableStats& v) {
  if (v.dynamic) return "dynamic x" + std::to_string(v.dim);  // no row count
  return v.sparse ? std::to_string(v.rows) + "x" + std::to_string(v.dim) : std::to_string(v.dim);
}

}  // namespace

PlanReport BuildPlanReport(const JobPlan& plan) {
  PlanReport report;
  report.cluster = plan.cluster;
  report.arch = plan.arch;
  report.shm_allreduce = SharedMemoryAllReduce(plan.cluster, plan.cost);
  report.cost = plan.cost;
  report.figures = plan.figures;
  std::vector<CostedVariable> vars;
  std::vector<VariablePath> paths;
  for (const PlannedVariable& v : plan.variables) {
    PlannedRow row;
    row.var = CostInputs(v);
    row.choice = ChoosePath(row.var, plan.cluster, plan.cost);
    row.path = v.path;
    row.reason = v.reason;
    row.dynamic = v.dynamic;
    row.hot_rows = v.hot_rows.size();
    row.hot_share = v.hot_share;
    if (const ps::VariableSpec* spec = plan.ps.FindVariable(v.id)) {
      row.partition_shards = spec->partition_shards;
    }
    vars.push_back({row.var, row.choice});
    paths.push_back(v.path);
    report.rows.push_back(std::move(row));
  }
  PlanTotals& t = report.totals;
  // This plan's hot rows (core/plan/hot_rows.h): the PS serves the rest of a
  // table's rows, and each table's block joins the all-reduce.
  std::vector<CostedVariable> with_hot = vars;
  std::vector<VariablePath> with_hot_paths = paths;
  for (size_t i = 0; i < plan.variables.size(); ++i) {
    const PlannedVariable& v = plan.variables[i];
    if (v.hot_rows.empty()) continue;
    const VariableStats cold = WithoutHotRows(vars[i].stats, v.hot_share);
    with_hot[i] = {cold, ChoosePath(cold, plan.cluster, plan.cost)};
    const VariableStats block = HotRowsBlock(v.name + " (hot rows)",
                                             static_cast<int64_t>(v.hot_rows.size()), v.dim);
    with_hot.push_back({block, ChoosePath(block, plan.cluster, plan.cost)});
    with_hot_paths.push_back(VariablePath::kAllReduce);
  }
  t.hybrid = PlanCost(with_hot, with_hot_paths, plan.cluster, plan.cost, t.hybrid_by_path);
  for (auto [sum, path] : {std::pair{&t.allreduce, VariablePath::kAllReduce},
                           std::pair{&t.allgather, VariablePath::kAllGather},
                           std::pair{&t.ps, VariablePath::kPs}}) {
    *sum = PlanCost(vars, AllOn(vars, path), plan.cluster, plan.cost);
  }
  return report;
}

std::string FormatPlanReport(const PlanReport& report) {
  std::ostringstream out;
  char line[512];
  const std::string ps_hosts =
      report.cluster.ps_hosts > 0
          ? " on " + std::to_string(report.cluster.ps_hosts) + " PS host(s) of their own"
          : "";
  std::snprintf(line, sizeof(line), "%d workers on %d host(s), %d PS shard(s)%s, arch = \"%s\"\n\n",
                report.cluster.workers, report.cluster.hosts, report.cluster.shards,
                ps_hosts.c_str(), ArchName(report.arch));
  out << line;
  std::snprintf(line, sizeof(line), "%-24s %-14s %-9s %-10s %4s  %12s %12s %12s\n", "variable",
                "shape", "alpha", "path", "P", "allreduce", "allgather", "ps");
  out << line;
  for (const PlannedRow& r : report.rows) {
    char alpha[32];
    if (r.var.sparse) {
      std::snprintf(alpha, sizeof(alpha), "%.4g", r.var.alpha);
    } else {
      std::snprintf(alpha, sizeof(alpha), "dense");
    }
    const std::string ar =
        r.choice.allreduce.feasible ? FormatBytes(r.choice.allreduce.bytes) : std::string("n/a");
    const std::string ag =
        r.choice.allgather.feasible ? FormatBytes(r.choice.allgather.bytes) : std::string("n/a");
    std::snprintf(line, sizeof(line), "%-24s %-14s %-9s %-10s %4s  %12s %12s %12s\n",
                  r.var.name.c_str(), Shape(r.var).c_str(), alpha, VariablePathName(r.path),
                  r.path == VariablePath::kPs ? std::to_string(r.var.partitions).c_str() : "-",
                  ar.c_str(), ag.c_str(),
                  FormatBytes(r.choice.cost(VariablePath::kPs).bytes).c_str());
    out << line;
    // The plan's reason, and the cost model's view when the plan's path was
    // not its choice (a forced arch, a [[variable]] path).
    const bool by_cost_model = r.reason.rfind(r.choice.reason, 0) == 0;
    out << "    " << (by_cost_model ? r.reason : r.reason + " (the cost model: " + r.choice.reason + ")")
        << "\n";
  }
  const PlanTotals& t = report.totals;
  const PlanBytes* columns[] = {&t.hybrid, &t.allreduce, &t.allgather, &t.ps};
  auto row = [&](const char* label, auto cell) {
    out << label;
    const int widths[] = {12, 16, 16, 11};
    for (int i = 0; i < 4; ++i) {
      const std::string text = columns[i]->feasible ? cell(*columns[i]) : "n/a";
      out << std::string(1 + std::max<int>(0, widths[i] - static_cast<int>(text.size())), ' ')
          << text;
    }
    out << "\n";
  };
  out << "\nbytes per step          this plan  all-reduce only  all-gather only     PS only\n";
  row("  per worker      ", [](const PlanBytes& b) { return FormatBytes(b.worker); });
  row("  per host link   ", [](const PlanBytes& b) { return FormatBytes(b.link); });
  row("  predicted ms    ", [](const PlanBytes& b) {
    char ms[32];
    std::snprintf(ms, sizeof(ms), "%.3g", b.seconds * 1e3);
    return std::string(ms);
  });
  for (const PlanBytes* c : columns) {
    if (!c->feasible) out << "(n/a: " << c->why_not << ")\n";
  }
  if (report.cluster.ps_hosts > 0) {
    out << "(per worker: sent + received by one worker's transport; per host link: the busier\n"
           " direction of one worker host's link, the PS shards being on " +
               std::to_string(report.cluster.ps_hosts) +
               " PS host(s) of their own;\n predicted: communication time per step, the busier "
               "link's bytes (a worker host's or a PS\n host's) / bandwidth + operations x "
               "latency; under arch = \"hybrid\" the plan is the\n cheapest predicted of the "
               "per-variable choice and the single-path plans)\n";
  } else {
    out << "(per worker: sent + received by one worker's transport; per host link: the busier\n"
           " direction of one host's link, its PS shards included; predicted: communication time\n"
           " per step, link bytes / bandwidth + operations x latency; under arch = \"hybrid\" the\n"
           " plan is the cheapest predicted of the per-variable choice and the single-path plans)\n";
  }
  size_t hot = 0;
  for (const PlannedRow& r : report.rows) hot += r.hot_rows;
  if (hot > 0) {
    out << "(this plan counts its " << hot
        << " hot rows: the PS moves the other rows of their\n tables, and their blocks join "
           "the all-reduce; the single-path plans have none)\n";
  }
  if (report.cost.sync_straggler_s > 0) {
    std::snprintf(line, sizeof(line),
                  "predicted wait per step: %.3g ms communication + %.3g ms for the slowest "
                  "rank's compute (sync; %s)\n",
                  t.hybrid.seconds * 1e3, report.cost.sync_straggler_s * 1e3,
                  report.figures.straggler.c_str());
    out << line;
  }
  if (report.cost.collective_time_scale != 1 || report.cost.ps_time_scale != 1) {
    std::snprintf(line, sizeof(line),
                  "(re-planned on evidence: predicted times of the collective paths x%.3g, of the "
                  "PS path x%.3g, what an earlier attempt measured over what it predicted)\n",
                  report.cost.collective_time_scale, report.cost.ps_time_scale);
    out << line;
  }
  return out.str();
}

std::string PlanReportJson(const PlanReport& report) {
  nlohmann::json vars = nlohmann::json::array();
  for (const PlannedRow& r : report.rows) {
    vars.push_back({{"name", r.var.name},
                    {"kind", r.var.sparse ? "sparse" : "dense"},
                    {"rows", r.var.rows},
                    {"dim", r.var.dim},
                    {"alpha", r.var.alpha},
                    {"alpha_host", r.var.alpha_host},
                    {"path", VariablePathName(r.path)},
                    {"partitions", r.path == VariablePath::kPs ? r.var.partitions : 0},
                    {"partition_shards", r.partition_shards},
                    {"bytes_per_worker",
                     {{"allreduce", r.choice.allreduce.feasible ? nlohmann::json(r.choice.allreduce.bytes)
                                                                : nlohmann::json(nullptr)},
                      {"allgather", r.choice.allgather.feasible ? nlohmann::json(r.choice.allgather.bytes)
                                                                : nlohmann::json(nullptr)},
                      {"ps", r.choice.cost(VariablePath::kPs).bytes}}},
                    {"predicted_seconds_per_step",
                     {{"allreduce", r.choice.allreduce.feasible
                                        ? nlohmann::json(r.choice.allreduce.seconds)
                                        : nlohmann::json(nullptr)},
                      {"allgather", r.choice.allgather.feasible
                                        ? nlohmann::json(r.choice.allgather.seconds)
                                        : nlohmann::json(nullptr)},
                      {"ps", r.choice.cost(VariablePath::kPs).seconds}}},
                    {"reason", r.reason}});
    // As the plan's own JSON writes it (JobPlanToJson), so that a script
    // reads a table's budget and policy the same from either.
    if (r.dynamic) vars.back()["dynamic"] = DynamicSettingsToJson(*r.dynamic);
    // The count, not the ids (the plan's JSON lists those).
    if (r.hot_rows > 0) {
      vars.back()["hot_rows"] = r.hot_rows;
      vars.back()["hot_rows_share"] = r.hot_share;
    }
  }
  const PlanTotals& t = report.totals;
  nlohmann::json doc = {
      {"workers", report.cluster.workers},
      {"hosts", report.cluster.hosts},
      {"shards", report.cluster.shards},
      {"ps_hosts", report.cluster.ps_hosts},
      {"arch", ArchName(report.arch)},
      {"allreduce_shared_memory", report.shm_allreduce},
      {"figures",
       {{"link_bytes_per_s", {{"value", report.cost.bandwidth_bytes_per_s},
                              {"source", report.figures.link}}},
        {"loopback_bytes_per_s", {{"value", LoopbackBytesPerS(report.cost)},
                                  {"source", report.figures.loopback}}},
        {"shm_bytes_per_s", {{"value", report.cost.shm_bytes_per_s},
                             {"source", report.figures.shm}}},
        {"collective_latency_s", {{"value", report.cost.collective_latency_s},
                                  {"source", report.figures.collective}}},
        {"ps_rtt_s", {{"value", report.cost.ps_rtt_s}, {"source", report.figures.ps_rtt}}},
        {"sync_straggler_s", {{"value", report.cost.sync_straggler_s},
                              {"source", report.figures.straggler}}}}},
      {"variables", vars},
      {"total_bytes_per_worker",
       {{"plan", t.hybrid.worker},
        {"allreduce", t.allreduce.worker},
        {"allgather", t.allgather.worker},
        {"ps", t.ps.worker}}},
      {"plan_bytes_per_worker_by_path",
       {{"allreduce", t.hybrid_by_path[static_cast<int>(VariablePath::kAllReduce)].worker},
        {"allgather", t.hybrid_by_path[static_cast<int>(VariablePath::kAllGather)].worker},
        {"ps", t.hybrid_by_path[static_cast<int>(VariablePath::kPs)].worker}}},
      {"total_bytes_per_host_link",
       {{"plan", t.hybrid.link},
        {"allreduce", t.allreduce.link},
        {"allgather", t.allgather.link},
        {"ps", t.ps.link}}},
      {"predicted_seconds_per_step",
       {{"plan", t.hybrid.seconds},
        {"allreduce", t.allreduce.seconds},
        {"allgather", t.allgather.seconds},
        {"ps", t.ps.seconds}}},
      // What a rank is predicted to wait per step: the plan's communication
      // and, in sync mode, the slowest rank's compute beyond the mean.
      {"predicted_wait_seconds_per_step", t.hybrid.seconds + report.cost.sync_straggler_s},
      {"feasible",
       {{"plan", t.hybrid.feasible},
        {"allreduce", t.allreduce.feasible},
        {"allgather", t.allgather.feasible},
        {"ps", t.ps.feasible}}}};
  return doc.dump(2);
}

}  // namespace parallax::plan
