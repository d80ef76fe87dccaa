#include "core/plan/plan_view.h"

#include <cmath>
#include <cstdio>

namespace parallax::plan {

PlanTable PlanTableOf(const JobPlan& plan) {
  PlanTable table;
  table.columns = {"VARIABLE", "SHAPE", "ALPHA", "PATH", "PARTITIONS", "WHY"};
  for (const PlannedVariable& v : plan.variables) {
    const std::string shape = v.dynamic  ? "dynamic x" + std::to_string(v.dim)
                              : v.sparse ? std::to_string(v.rows) + "x" + std::to_string(v.dim)
                                         : std::to_string(v.size);
    std::string alpha = "dense";
    if (v.dynamic) {
      // No row count, so no fraction of rows: what a batch touches.
      alpha = v.ids_per_step < 0 ? "?" : "ids/step " + std::to_string(std::llround(v.ids_per_step));
    } else if (v.sparse) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.4g", v.density);
      alpha = v.density < 0 ? "?" : buf;
    }
    const uint32_t partitions = plan.PartitionsOf(v.id);
    table.rows.push_back({v.name, shape, alpha, VariablePathName(v.path),
                          partitions == 0 ? "-" : std::to_string(partitions), v.reason});
  }
  return table;
}

std::vector<std::string> FigureLines(const CostOptions& c, const FigureSources& f) {
  auto line = [](const char* name, double v, const char* unit, const std::string& source) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s %.4g %s", name, v, unit);
    return std::string(buf) + " (" + source + ")";
  };
  std::vector<std::string> lines = {
      line("link", c.bandwidth_bytes_per_s / 1e9, "GB/s", f.link),
      line("loopback", LoopbackBytesPerS(c) / 1e9, "GB/s",
           c.loopback_bytes_per_s > 0 ? f.loopback : "the link's figure"),
      line("shared memory", c.shm_bytes_per_s / 1e9, "GB/s", f.shm),
      line("collective call", c.collective_latency_s * 1e6, "us", f.collective),
      line("PS round trip", c.ps_rtt_s * 1e6, "us", f.ps_rtt)};
  if (c.sync_straggler_s > 0) {
    lines.push_back(line("sync wait for the slowest rank", c.sync_straggler_s * 1e3, "ms",
                         f.straggler));
  }
  return lines;
}

std::vector<std::string> PlanFigureLines(const JobPlan& plan) {
  std::vector<std::string> lines = FigureLines(plan.cost, plan.figures);
  if (plan.predicted_comm_s > 0) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "predicted communication %.4g ms per step (these figures)",
                  plan.predicted_comm_s * 1e3);
    lines.push_back(buf);
    if (plan.cost.sync_straggler_s > 0) {
      std::snprintf(buf, sizeof(buf), "predicted wait %.4g ms per step (with the slowest rank's)",
                    (plan.predicted_comm_s + plan.cost.sync_straggler_s) * 1e3);
      lines.push_back(buf);
    }
  }
  const CostOptions& c = plan.cost;
  if (c.collective_time_scale != 1 || c.ps_time_scale != 1) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "re-planned on evidence: predicted times x%.3g collectives, x%.3g PS "
                  "(an earlier attempt's measured over predicted)",
                  c.collective_time_scale, c.ps_time_scale);
    lines.push_back(buf);
  }
  return lines;
}

}  // namespace parallax::plan
