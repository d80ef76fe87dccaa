#include "core/plan/plan_correction.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/plan/report.h"
#include "schemas/kv_keys.h"

namespace parallax::plan {
namespace {

constexpr double kMinRatio = 1e-9, kMaxRatio = 1e9;

// measured / predicted (> 0), clamped.
double Ratio(double measured, double predicted) {
  const double r = measured / predicted;
  if (!std::isfinite(r)) return kMaxRatio;
  return std::clamp(r, kMinRatio, kMaxRatio);
}

std::string Fixed(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

}  // namespace

PredictedComm PredictedCommOf(const JobPlan& plan) {
  const PlanReport report = BuildPlanReport(plan);
  const PlanBytes* by_path = report.totals.hybrid_by_path;
  PredictedComm p;
  p.total_s = report.totals.hybrid.seconds;
  p.dense_s = by_path[static_cast<int>(VariablePath::kAllReduce)].seconds +
              by_path[static_cast<int>(VariablePath::kAllGather)].seconds;
  p.sparse_s = by_path[static_cast<int>(VariablePath::kPs)].seconds;
  return p;
}

PlanCorrection CorrectionFor(const JobPlan& plan, const Disagreement& measured, int attempt) {
  // A path the plan does not use (nothing predicted) has no variable whose
  // time a scale could change: what was measured there joins the path the
  // plan uses, and its own scale stays.
  double measured_dense = measured.measured_dense_s, measured_sparse = measured.measured_sparse_s;
  const bool dense_used = measured.predicted.dense_s > 0;
  const bool sparse_used = measured.predicted.sparse_s > 0;
  if (dense_used && !sparse_used) {
    measured_dense += measured_sparse;
  } else if (sparse_used && !dense_used) {
    measured_sparse += measured_dense;
  }
  const double dense = dense_used ? Ratio(measured_dense, measured.predicted.dense_s) : 1.0;
  const double sparse = sparse_used ? Ratio(measured_sparse, measured.predicted.sparse_s) : 1.0;
  PlanCorrection c;
  c.from_attempt = attempt;
  c.collective_time_scale = plan.cost.collective_time_scale * dense;
  c.ps_time_scale = plan.cost.ps_time_scale * sparse;
  c.source = "re-planned from attempt " + std::to_string(attempt) +
             "'s measured communication over steps " + std::to_string(measured.first_step) +
             "-" + std::to_string(measured.last_step) + ": collectives " + Fixed("%.3g", dense) +
             "x, PS " + Fixed("%.3g", sparse) + "x the prediction";
  return c;
}

void ApplyCorrection(const PlanCorrection& correction, CostOptions* cost) {
  cost->collective_time_scale = correction.collective_time_scale;
  cost->ps_time_scale = correction.ps_time_scale;
}

std::string PlanCorrectionToJson(const PlanCorrection& c) {
  return nlohmann::json{{"from_attempt", c.from_attempt},
                        {"collective_time_scale", c.collective_time_scale},
                        {"ps_time_scale", c.ps_time_scale},
                        {"source", c.source}}
      .dump();
}

StatusOr<PlanCorrection> ParsePlanCorrection(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgument("plan correction: expected a JSON object, got '" +
                           std::string(json.substr(0, 80)) + "'");
  }
  PlanCorrection c;
  if (!j.contains("from_attempt") || !j["from_attempt"].is_number_integer()) {
    return InvalidArgument("plan correction: \"from_attempt\" is missing or not an integer");
  }
  c.from_attempt = j["from_attempt"].get<int>();
  for (auto [key, out] : {std::pair{"collective_time_scale", &c.collective_time_scale},
                          std::pair{"ps_time_scale", &c.ps_time_scale}}) {
    if (!j.contains(key) || !j[key].is_number()) {
      return InvalidArgument(std::string("plan correction: \"") + key +
                             "\" is missing or not a number");
    }
    *out = j[key].get<double>();
    if (!std::isfinite(*out) || *out <= 0) {
      return InvalidArgument(std::string("plan correction: \"") + key + "\" must be > 0, got " +
                             j[key].dump());
    }
  }
  c.source = j.value("source", std::string("re-planned"));
  return c;
}

std::string DescribePathChanges(const JobPlan& before, const JobPlan& after) {
  std::string changes;
  for (const PlannedVariable& v : after.variables) {
    const auto old = std::find_if(before.variables.begin(), before.variables.end(),
                                  [&](const PlannedVariable& b) { return b.name == v.name; });
    if (old == before.variables.end()) continue;
    const uint32_t p_before = before.PartitionsOf(old->id), p_after = after.PartitionsOf(v.id);
    if (old->path == v.path && p_before == p_after) continue;
    changes += (changes.empty() ? "" : ", ") + v.name + ": " + VariablePathName(old->path);
    if (p_before > 0) changes += " (P=" + std::to_string(p_before) + ")";
    changes += std::string(" -> ") + VariablePathName(v.path);
    if (p_after > 0) changes += " (P=" + std::to_string(p_after) + ")";
  }
  return changes;
}

std::string DescribePlanChange(const JobPlan& before, const JobPlan& after) {
  std::string changes = DescribePathChanges(before, after);
  if (changes.empty()) changes = "no variable changed its path";
  // Both plans priced by the corrected model.
  JobPlan remodelled = before;
  remodelled.cost.collective_time_scale = after.cost.collective_time_scale;
  remodelled.cost.ps_time_scale = after.cost.ps_time_scale;
  return changes + "; predicted communication with the corrected model " +
         Fixed("%.3g", PredictedCommOf(remodelled).total_s * 1e3) + " -> " +
         Fixed("%.3g", PredictedCommOf(after).total_s * 1e3) + " ms/step";
}

}  // namespace parallax::plan
