#include "core/plan/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/base/format_bytes.h"

namespace parallax::plan {
namespace {

std::string Shape(const VariableStats& v) {
  return v.sparse ? std::to_string(v.rows) + "x" + std::to_string(v.dim) : std::to_string(v.dim);
}

}  // namespace

PathCost CostOn(const Choice& choice, const VariableStats& var, VariablePath path,
                const ClusterShape& cluster, const CostOptions& options) {
  switch (path) {
    case VariablePath::kAllReduce: return choice.allreduce;
    case VariablePath::kAllGather: return var.sparse ? choice.allgather : choice.allreduce;
    case VariablePath::kPs: {
      if (choice.ps.feasible) return choice.cost(VariablePath::kPs);
      ClusterShape one = cluster;
      one.shards = 1;
      return PsCost(var, one, options, options.local_aggregation);
    }
  }
  return {};
}

PlanReport BuildPlanReport(const JobPlan& plan) {
  PlanReport report;
  const ClusterShape& cluster = plan.cluster;
  const CostOptions& options = plan.cost;
  report.cluster = cluster;
  report.arch = plan.arch;
  report.shm_allreduce = SharedMemoryAllReduce(cluster, options);
  for (const PlannedVariable& v : plan.variables) {
    PlannedRow row;
    row.var = CostInputs(v);
    row.choice = ChoosePath(row.var, cluster, options);
    row.path = v.path;
    row.reason = v.reason;
    if (const ps::VariableSpec* spec = plan.ps.FindVariable(v.id)) {
      row.partition_shards = spec->partition_shards;
    }
    auto add = [&](PlanBytes* sum, VariablePath p) {
      const PathCost c = CostOn(row.choice, row.var, p, cluster, options);
      sum->worker += c.bytes;
      sum->link += c.link_bytes;
      sum->seconds += c.seconds;
    };
    PlanTotals& t = report.totals;
    add(&t.hybrid, row.path);
    add(&t.hybrid_by_path[static_cast<int>(row.path)], row.path);
    add(&t.allreduce, VariablePath::kAllReduce);
    add(&t.allgather, VariablePath::kAllGather);
    add(&t.ps, VariablePath::kPs);
    report.rows.push_back(std::move(row));
  }
  int in_plan = 0, sparse = 0;
  for (const PlannedRow& r : report.rows) {
    in_plan += r.path == VariablePath::kAllGather;
    sparse += r.var.sparse;
  }
  auto share = [&](PlanBytes* sum, int tables) {
    const PathCost over = AllGatherSharedCallsOvercount(tables, cluster, options);
    sum->worker -= over.bytes;
    sum->link -= over.link_bytes;
    sum->seconds -= over.seconds;
  };
  share(&report.totals.hybrid, in_plan);
  share(&report.totals.hybrid_by_path[static_cast<int>(VariablePath::kAllGather)], in_plan);
  share(&report.totals.allgather, sparse);
  // The variables on all-reduce share the step's fusion buckets: dense
  // gradients first, then the whole-table ones of sparse variables, in
  // registration order, as the session registers them.
  auto fuse = [&](PlanBytes* sum, auto on_allreduce) {
    std::vector<int64_t> elements;
    for (bool sparse_pass : {false, true}) {
      for (const PlannedRow& r : report.rows) {
        if (r.var.sparse == sparse_pass && on_allreduce(r)) elements.push_back(r.var.elements());
      }
    }
    sum->seconds -= AllReduceFusionOvercount(elements, cluster, options).seconds;
  };
  auto in_this_plan = [](const PlannedRow& r) { return r.path == VariablePath::kAllReduce; };
  fuse(&report.totals.hybrid, in_this_plan);
  fuse(&report.totals.hybrid_by_path[static_cast<int>(VariablePath::kAllReduce)], in_this_plan);
  fuse(&report.totals.allreduce, [](const PlannedRow&) { return true; });
  fuse(&report.totals.allgather, [](const PlannedRow& r) { return !r.var.sparse; });
  return report;
}

std::string FormatPlanReport(const PlanReport& report) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof(line), "%d workers on %d host(s), %d PS shard(s), arch = \"%s\"\n\n",
                report.cluster.workers, report.cluster.hosts, report.cluster.shards,
                ArchName(report.arch));
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
    const std::string ag =
        r.choice.allgather.feasible ? FormatBytes(r.choice.allgather.bytes) : std::string("n/a");
    std::snprintf(line, sizeof(line), "%-24s %-14s %-9s %-10s %4s  %12s %12s %12s\n",
                  r.var.name.c_str(), Shape(r.var).c_str(), alpha, VariablePathName(r.path),
                  r.path == VariablePath::kPs ? std::to_string(r.var.partitions).c_str() : "-",
                  FormatBytes(r.choice.allreduce.bytes).c_str(), ag.c_str(),
                  FormatBytes(r.choice.cost(VariablePath::kPs).bytes).c_str());
    out << line;
    // The plan's reason, and the cost model's view when the plan's path was
    // not its choice (a forced arch, a [[variable]] path).
    const bool by_cost_model = r.reason.rfind(r.choice.reason, 0) == 0;
    out << "    " << (by_cost_model ? r.reason : r.reason + " (the cost model: " + r.choice.reason + ")")
        << "\n";
  }
  const PlanTotals& t = report.totals;
  out << "\nbytes per step          this plan  all-reduce only  all-gather only     PS only\n";
  std::snprintf(line, sizeof(line), "  per worker       %12s %16s %16s %11s\n",
                FormatBytes(t.hybrid.worker).c_str(), FormatBytes(t.allreduce.worker).c_str(),
                FormatBytes(t.allgather.worker).c_str(), FormatBytes(t.ps.worker).c_str());
  out << line;
  std::snprintf(line, sizeof(line), "  per host link    %12s %16s %16s %11s\n",
                FormatBytes(t.hybrid.link).c_str(), FormatBytes(t.allreduce.link).c_str(),
                FormatBytes(t.allgather.link).c_str(), FormatBytes(t.ps.link).c_str());
  out << line;
  std::snprintf(line, sizeof(line), "  predicted ms     %12.3g %16.3g %16.3g %11.3g\n",
                t.hybrid.seconds * 1e3, t.allreduce.seconds * 1e3, t.allgather.seconds * 1e3,
                t.ps.seconds * 1e3);
  out << line;
  out << "(per worker: sent + received by one worker's transport; per host link: the busier\n"
         " direction of one host's link, its PS shards included; predicted: communication time\n"
         " per step, link bytes / bandwidth + operations x latency, which the plan minimises)\n";
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
                     {{"allreduce", r.choice.allreduce.bytes},
                      {"allgather", r.choice.allgather.feasible ? nlohmann::json(r.choice.allgather.bytes)
                                                                : nlohmann::json(nullptr)},
                      {"ps", r.choice.cost(VariablePath::kPs).bytes}}},
                    {"predicted_seconds_per_step",
                     {{"allreduce", r.choice.allreduce.seconds},
                      {"allgather", r.choice.allgather.feasible
                                        ? nlohmann::json(r.choice.allgather.seconds)
                                        : nlohmann::json(nullptr)},
                      {"ps", r.choice.cost(VariablePath::kPs).seconds}}},
                    {"reason", r.reason}});
  }
  const PlanTotals& t = report.totals;
  nlohmann::json doc = {
      {"workers", report.cluster.workers},
      {"hosts", report.cluster.hosts},
      {"shards", report.cluster.shards},
      {"arch", ArchName(report.arch)},
      {"allreduce_shared_memory", report.shm_allreduce},
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
        {"ps", t.ps.seconds}}}};
  return doc.dump(2);
}

}  // namespace parallax::plan
