// Re-planning on evidence: the cost model corrected by what an attempt
// measured (core/plan/comm_disagreement.h), kept by the coordinator in its
// key-value store under kv_keys::PlanCorrection(job) and read by the trainer's
// rank 0 of every later attempt, whose BuildPlan then plans with it
// (PlanInputs::correction).
//
// The correction scales the model's predicted time of each part of the step
// by what the attempt measured over what its plan predicted for that part
// (the trainer reports the two apart): the collective paths (all-reduce,
// all-gather) by measured dense_wait over their predicted time, the PS path
// by measured sparse_wait over its predicted time (CostOptions::
// collective_time_scale, ps_time_scale; the figures themselves are left as
// the job file, the hosts' measurements or the defaults give them). So the
// re-planned model reproduces what was measured on the paths the attempt
// used, and a path that turned out slower than predicted loses to one the
// model still believes. A part the plan does not use (nothing predicted)
// keeps its scale, since no variable of it could have been slow; the wait
// measured there anyway (the session's bookkeeping) is added to the part the
// plan uses, so the corrected model prices the plan at the whole measured
// time. Each ratio is clamped to [1e-9, 1e9]; scales of an earlier
// correction are multiplied.
#ifndef PARALLAX_CORE_PLAN_PLAN_CORRECTION_H_
#define PARALLAX_CORE_PLAN_PLAN_CORRECTION_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/plan/comm_disagreement.h"
#include "core/plan/cost_model.h"
#include "core/plan/job_plan.h"
#include "parallax/status.h"

namespace parallax::plan {

struct PlanCorrection {
  int from_attempt = 0;  // the attempt whose measurements made it
  double collective_time_scale = 1;
  double ps_time_scale = 1;
  // One line for events and the plan's figure sources: "re-planned from
  // attempt 2's measured communication over steps 200-400: collectives
  // 1.2x, PS 9.1x the prediction".
  std::string source;
};

// The plan's predicted communication time per step, whole and by part
// (what BuildPlanReport's totals say).
PredictedComm PredictedCommOf(const JobPlan& plan);

// The correction of `plan`'s model by `measured` (a disagreement found on
// `attempt`, which ran `plan`).
PlanCorrection CorrectionFor(const JobPlan& plan, const Disagreement& measured, int attempt);

// Sets the time scales of `cost` to the correction's.
void ApplyCorrection(const PlanCorrection& correction, CostOptions* cost);

std::string PlanCorrectionToJson(const PlanCorrection& correction);
// INVALID_ARGUMENT naming the key that is missing or malformed.
StatusOr<PlanCorrection> ParsePlanCorrection(std::string_view json);

// What changed from `before` to `after` (a plan made with a correction),
// one line: the variables whose path or partitions changed ("lm/emb: ps
// (P=2) -> allgather"; "no variable changed its path" when none did) and
// the predicted communication time per step of both plans under the
// corrected model (after's time scales).
// The variables whose path or PS partition count differs between two plans
// ("emb: ps (P=2) -> allgather, w: ps (P=1) -> allreduce"); empty when none.
std::string DescribePathChanges(const JobPlan& before, const JobPlan& after);
std::string DescribePlanChange(const JobPlan& before, const JobPlan& after);

}  // namespace parallax::plan

#endif  // PARALLAX_CORE_PLAN_PLAN_CORRECTION_H_
